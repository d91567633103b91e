"""The transfer and probing classifier setups (``--classifier``), kept here once: ``full`` is SentEval's recommended
configuration, ``fast`` its prototyping one. Plain data, so that the CLI offers the names without loading torch;
:func:`cselab.evaluation.validation.classifier_setup` builds them."""

from typing import Any

CLASSIFIER_SETUPS: dict[str, dict[str, Any]] = {
    "full": {"kfold": 10, "classifier": {"optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4}},
    "fast": {"kfold": 5, "classifier": {"optim": "rmsprop", "batch_size": 128, "tenacity": 3, "epoch_size": 2}},
}
