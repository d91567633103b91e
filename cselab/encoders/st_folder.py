"""Sentence-transformers model folders.

A folder whose modules are a Transformer, a mean or CLS Pooling and optionally Normalize
(most published models, the packaged MiniLM among them) is encoded by
:class:`~cselab.encoders.transformer.TransformerEncoder` with the matching pooler; any
other module stack is run by sentence-transformers itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cselab.encoders.base import Encoder
from cselab.errors import ModelError
from cselab.files import clipped

# Pooling modes cselab runs itself: sentence-transformers >= 6 writes "pooling_mode",
# earlier versions one boolean "pooling_mode_<mode>" key per mode.
POOLING_MODES = {"mean": "avg", "cls": "cls_before_pooler",
                 "pooling_mode_mean_tokens": "avg", "pooling_mode_cls_token": "cls_before_pooler"}


def native_settings(read_json: Callable[[str], Any]) -> dict[str, Any] | None:
    """Pooler, max length and normalisation when cselab can run the model itself, else None.

    ``read_json(name)`` returns the parsed JSON file ``name`` of the model (local or on the hub),
    or None when the model has no such file.
    """
    modules = read_json("modules.json")
    classes = [module["type"].rsplit(".", 1)[-1] for module in modules]  # the module path moved between versions
    if classes not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or modules[0]["path"]:
        return None
    pooling = read_json(f"{modules[1]['path']}/config.json") or {}
    if "pooling_mode" in pooling:
        modes = [pooling["pooling_mode"]]
    else:
        modes = [key for key, value in pooling.items() if key.startswith("pooling_mode") and value is True]
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        return None
    settings: dict[str, Any] = {"pooler": POOLING_MODES[modes[0]], "normalize": len(classes) == 3}
    max_length = (read_json("sentence_bert_config.json") or {}).get("max_seq_length")
    if max_length:  # newer versions keep it as the tokenizer's model_max_length instead
        settings["max_length"] = max_length
    return settings


class SentenceTransformerEncoder(Encoder):
    """Any sentence-transformers model, run by that library."""

    def __init__(self, path: str, device: str | None = None):
        from sentence_transformers import SentenceTransformer

        try:
            self.model = SentenceTransformer(path, device=device)
        except Exception as err:  # a module stack the library cannot build from this folder
            raise ModelError(f"{path}: sentence-transformers cannot load it ({type(err).__name__}: "
                             f"{clipped(err, 160)})") from None
        self.spec = str(path)

    @property
    def dim(self) -> int:
        return self.model.get_sentence_embedding_dimension()

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        return self.model.encode(sentences, batch_size=batch_size, show_progress_bar=bool(show_progress_bar),
                                 convert_to_numpy=True)
