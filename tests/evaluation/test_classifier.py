import numpy as np
import pytest
import torch

from cselab.evaluation.classifier import ClassifierConfig, Job, holdout_job, train_group, train_jobs


def blobs(n=600, dim=12, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    X = rs.randn(n, dim).astype(np.float32)
    y = (X @ rs.randn(dim, classes) + 0.5 * rs.randn(n, classes)).argmax(1)
    return X, y


def one_by_one(X, y, job, classes, epochs, seed=1111):
    """One nn.Linear trained by torch.optim.Adam the way SentEval trains it, for ``epochs`` single passes."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(X.shape[1], classes)
    optimizer = torch.optim.Adam(model.parameters(), weight_decay=job.reg)
    rng = np.random.RandomState(seed)
    Xt, yt = torch.from_numpy(X[job.train]), torch.from_numpy(y[job.train])
    for _ in range(epochs):
        order = rng.permutation(len(job.train))
        for start in range(0, len(order), 64):
            batch = torch.from_numpy(order[start:start + 64])
            loss = torch.nn.functional.cross_entropy(model(Xt[batch]), yt[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        return model(torch.from_numpy(X[job.test])).argmax(1).numpy()


def test_each_stacked_model_is_trained_as_torch_adam_trains_it_alone():
    X, y = blobs()
    jobs = [Job(np.arange(0, 300 + 45 * k), np.arange(500, 550), reg, np.arange(400, 600))
            for k, reg in enumerate((1e-5, 1e-3, 1e-2))]
    jobs.append(Job(np.arange(0, 300), np.arange(500, 550), 1e-2, np.arange(400, 600)))  # shares the first's rows
    config = ClassifierConfig(epoch_size=3, max_epoch=0)  # exactly three passes, then stop
    results = train_group(X, y, jobs, 3, config)
    for job, result in zip(jobs, results):
        np.testing.assert_array_equal(result.test_predictions, one_by_one(X, y, job, 3, epochs=3))
        assert result.test_accuracy == pytest.approx((result.test_predictions == y[job.test]).mean())


def test_models_of_a_group_do_not_interact():
    X, y = blobs(classes=2)
    config = ClassifierConfig(tenacity=1, epoch_size=1)
    jobs = [Job(np.arange(0, 200), np.arange(300, 400), 1e-4, np.arange(400, 600)),
            Job(np.arange(50, 330), np.arange(330, 400), 1e-2, np.arange(400, 600)),
            holdout_job(np.arange(0, 400), 1e-3, 1111, test=np.arange(400, 600))]
    together = train_group(X, y, jobs, 2, config)
    alone = [train_group(X, y, [job], 2, config)[0] for job in
             (jobs[0], jobs[1], holdout_job(np.arange(0, 400), 1e-3, 1111, test=np.arange(400, 600)))]
    jobs[2] = holdout_job(np.arange(0, 400), 1e-3, 1111, test=np.arange(400, 600))
    one_at_a_time = train_group(X, y, jobs, 2, config, gather_budget=1)  # chunks of one stream
    for a, b, c in zip(together, alone, one_at_a_time):
        assert a.dev_accuracy == b.dev_accuracy == c.dev_accuracy
        np.testing.assert_array_equal(a.test_predictions, b.test_predictions)
        np.testing.assert_array_equal(a.test_predictions, c.test_predictions)


def test_holdout_takes_the_first_permutation_of_the_models_rng():
    rows = np.arange(100, 300)
    job = holdout_job(rows, 0.1, seed=7, fraction=0.05)
    order = np.random.RandomState(7).permutation(200)
    np.testing.assert_array_equal(job.dev, rows[order[:10]])
    np.testing.assert_array_equal(job.train, rows[order[10:]])


def test_mlp_with_dropout_learns_and_worker_processes_agree():
    X, y = blobs(classes=2, seed=1)
    config = ClassifierConfig(nhid=16, dropout=0.1, optim="rmsprop", batch_size=32, tenacity=2, epoch_size=2)
    jobs = [Job(np.arange(0, 400), np.arange(400, 500), reg, np.arange(500, 600)) for reg in (1e-5, 1e-4, 1e-3)]
    one = train_jobs(X, y, jobs, 2, config, n_jobs=1)
    two = train_jobs(X, y, [Job(j.train, j.dev, j.reg, j.test) for j in jobs], 2, config, n_jobs=2)
    assert min(r.test_accuracy for r in one) > 0.8
    assert [r.dev_accuracy for r in one] == [r.dev_accuracy for r in two]


def test_bad_settings_are_refused_in_the_one_config_error_format():
    with pytest.raises(ValueError, match="classifier.optim: 'sgd' is not allowed; expected one of adam, rmsprop"):
        ClassifierConfig(optim="sgd")
    with pytest.raises(ValueError, match="classifier.batch_size: 0 is out of range; expected a whole number >= 1"):
        ClassifierConfig(batch_size=0)
    assert ClassifierConfig(dropout=0).dropout == 0.0 and isinstance(ClassifierConfig(dropout=0).dropout, float)


def test_training_the_classifiers_leaves_the_callers_generators_alone():
    # a transfer dev scorer scores a training run between steps: its dropout masks must go on as they were
    X, y = blobs(n=120)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    first = train_jobs(X, y, [holdout_job(np.arange(120), 1e-3, 1111)], 3, ClassifierConfig(max_epoch=2), 1111)
    assert torch.equal(torch.rand(3), expected)
    again = train_jobs(X, y, [holdout_job(np.arange(120), 1e-3, 1111)], 3, ClassifierConfig(max_epoch=2), 1111)
    assert first[0].dev_accuracy == again[0].dev_accuracy  # the classifier's own start is still SentEval's seed
