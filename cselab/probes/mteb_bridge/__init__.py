"""cselab and MTEB 2, both ways (the ``mteb`` extra): cselab's test sets as MTEB tasks
(:mod:`~cselab.probes.mteb_bridge.tasks`), MTEB tasks in ``probe run --suite mteb`` (:mod:`cselab.probes.mteb_suite`)
and a results JSON in MTEB's results layout (:mod:`~cselab.probes.mteb_bridge.export`). Importing this package
imports no mteb; its names do, on first use::

    import mteb
    from cselab.encoders.mteb_model import as_mteb
    from cselab.probes.mteb_bridge import bias_tasks

    results = mteb.evaluate(as_mteb("minilm"), bias_tasks(), cache=None)
"""

from cselab.lazy import exports

_WHERE = {name: "cselab.probes.mteb_bridge.tasks" for name in
          ("bias_tasks", "sts_tasks", "TASKS", "CselabCont", "CselabOppn", "CselabTransformations", "CselabCANNOT",
           "CselabSTS12", "CselabSTS13", "CselabSTS14", "CselabSTS15", "CselabSTS16", "CselabSTSB", "CselabSICKR")}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
