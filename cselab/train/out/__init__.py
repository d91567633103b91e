"""What ``OUT``, a training run's folder, guarantees, apart from the recipe (:mod:`cselab.train.recipe`) that writes
it: one run per folder (:mod:`~cselab.train.out.folder`: ``OUT/config.yaml``, the identity in ``OUT/run.json``
checked on every start, ``OUT/.lock`` against a second writer), a state that resumes exactly, verified file by file
(:mod:`~cselab.train.out.state`), checkpoints written atomically (:mod:`~cselab.train.out.checkpoint`: ``OUT/best``,
``OUT/last``; what a kill left half-written removed) and the model card beside the best
(:mod:`~cselab.train.out.card`)."""
