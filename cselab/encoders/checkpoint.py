"""The cselab checkpoint folder, its format in one place: a transformers model folder, ``cselab.json`` and the files
that let sentence-transformers load it.

``cselab.json`` says how the folder encodes sentences, so ``probe run --model DIR`` needs no other flag::

    {"format": "cselab-checkpoint", "version": 1,
     "pooler": "cls_before_pooler", "prompt": null, "prompt_pieces": false, "pool_tokens": "all",
     "bidirectional": false, "denoise": false, "head": null, "head_before_denoise": false, "lowercase": false,
     "max_length": 32, "normalize": false,
     "method": "simcse", "base_model": "bert-base-uncased", "data": {"kind": "corpus", "name": "wiki1m", ...},
     "config": {...}, "weights_sha256": "..."}

Its keys are the fields of :class:`CheckpointInfo`: an :class:`~cselab.encoders.encoding.Encoding` (how text becomes
a vector) and the lineage: ``base_model``, the base's hub name where it has one (:func:`cselab.encoders.specs.
hub_name`), else its folder; ``data``, what the run trained on, as ``OUT/run.json`` records it; ``weights_sha256``,
the weights that lineage describes. A head kept at test has its weights in ``head.safetensors``.

Two layouts: where sentence-transformers' own modules encode as cselab does (pooler ``cls_before_pooler`` or
``avg``, no prompt, head or bidirectional attention), its Transformer, Pooling and Normalize modules
(:func:`write_native_layout`, read back by :func:`native_settings`, which reads any such sentence-transformers folder);
otherwise cselab's own module, which sentence-transformers writes itself (:func:`cselab.encoders.st_module.
save_with_module`) around :func:`write_model_files`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cselab.atomic import write_json_atomic
from cselab.encoders.encoding import ENCODING_FIELDS, Encoding
from cselab.encoders.heads import HEAD_FILE, save_head
from cselab.encoders.pretrained import BIDIRECTIONAL_TYPE, combined_sha256, mark_bidirectional, weight_files
from cselab.encoders.specs import hub_name, looks_like_path
from cselab.errors import ConfigError, ModelError
from cselab.files import read_json, shown
from cselab.registry import check, schema_of, setting

if TYPE_CHECKING:
    from cselab.encoders.transformer import TransformerEncoder

logger = logging.getLogger(__name__)
CHECKPOINT_FILE = "cselab.json"
FORMAT = "cselab-checkpoint"
VERSION = 1
#: cselab's poolers that sentence-transformers' Pooling runs: its mode's name (``pooling_mode``, v6 and later) and
#: the boolean key earlier versions write.
ST_POOLING = {"cls_before_pooler": ("cls", "pooling_mode_cls_token"), "avg": ("mean", "pooling_mode_mean_tokens")}
LEGACY_POOLING_KEYS = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                       "pooling_mode_mean_sqrt_len_tokens")
NATIVE_MODULES = (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"])


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo(Encoding):
    """``cselab.json``: how a checkpoint folder encodes sentences, and what produced it."""

    method: str | None = setting(None, "the method that trained it")
    base_model: str | None = setting(None, "the base model's hub name, else its folder")
    data: dict[str, Any] = setting({}, "what the run trained on, as OUT/run.json records it")
    config: dict[str, Any] = setting({}, "the method's resolved config")
    weights_sha256: str | None = setting(None, "the folder's weights this lineage describes (combined_sha256 of "
                                         "its weight files)")

    @property
    def encoding(self) -> Encoding:
        return Encoding(**{name: getattr(self, name) for name in ENCODING_FIELDS})

    @classmethod
    def of(cls, encoding: Encoding, **lineage: Any) -> CheckpointInfo:
        return cls(**{name: getattr(encoding, name) for name in ENCODING_FIELDS}, **lineage)

    def lineage_dropped(self, folder: str | os.PathLike[str], why: str) -> CheckpointInfo:
        """This info without ``method``, ``data`` and ``config`` (the weights are not those they describe), with a
        warning saying ``why``."""
        logger.warning("%s: %s: the earlier run's lineage (method %s, data %s) is left out", folder, why, self.method,
                       (self.data or {}).get("name"))
        return replace(self, method=None, data={}, config={})


def needs_module(info: Encoding) -> bool:
    """Whether sentence-transformers needs cselab's module (:mod:`cselab.encoders.st_module`, loaded with
    ``trust_remote_code=True``) for an encoding: a prompt, a pooler its own Pooling lacks, bidirectional attention or
    a head kept at test."""
    return bool(info.prompt) or info.pooler not in ST_POOLING or info.bidirectional or info.head is not None


def write_checkpoint_info(folder: str | os.PathLike[str], info: CheckpointInfo) -> Path:
    """Write ``cselab.json`` into ``folder`` atomically (temporary file, then rename), once the folder's weights are
    written: it records their sha256, which its lineage (``method``, ``data``, ``config``) describes. Rewritten over
    other weights than those it was read with (a checkpoint trained further elsewhere, sentence-transformers' trainer
    say), it drops that lineage, with a warning: what the new weights were trained on is not known here."""
    digest = combined_sha256(weight_files(str(folder)))
    if info.weights_sha256 is not None and digest != info.weights_sha256 and (info.data or info.config):
        info = info.lineage_dropped(folder, f"its weights are not those {CHECKPOINT_FILE} was read with (trained "
                                            "further?): what they were trained on is not known")
    return write_json_atomic(Path(folder) / CHECKPOINT_FILE, {"format": FORMAT, "version": VERSION,
                                                              **asdict(replace(info, weights_sha256=digest))})


def trusted(info: CheckpointInfo, folder: str | os.PathLike[str]) -> CheckpointInfo:
    """``info`` as ``folder``'s lineage: as it is where the folder's weights are those ``cselab.json`` recorded (or
    it recorded none: a checkpoint written before cselab did), else without its ``method``, ``data`` and ``config``
    (the weights changed after it was written), with a warning."""
    if info.weights_sha256 is None or combined_sha256(weight_files(str(folder))) == info.weights_sha256:
        return info
    return info.lineage_dropped(folder, f"its weights are not those its {CHECKPOINT_FILE} describes (changed after "
                                        "cselab wrote it)")


def read_checkpoint_info(path: str | os.PathLike[str]) -> CheckpointInfo:
    """Read a ``cselab.json`` file; unknown keys, values of the wrong type or another format are errors naming
    the file."""
    path = Path(path)
    payload = read_json(path, ModelError)
    if payload.pop("format", None) != FORMAT:
        raise ModelError(f"{path}: 'format' must be {FORMAT!r}")
    version = payload.pop("version", None)
    if version != VERSION:
        raise ModelError(f"{path}: checkpoint version {shown(version)} is not supported (this cselab reads "
                         f"{VERSION})")
    try:
        return CheckpointInfo(**check(payload, schema_of(CheckpointInfo), ""))
    except ConfigError as err:
        raise ModelError(f"{path}: {err}") from None


ADAPTER_CONFIG = "adapter/adapter_config.json"  # the adapter alone, as peft writes it (a LoRA run's checkpoint)


def check_agreement(info: CheckpointInfo, path: Path, find: Callable[[str], Path | None]) -> None:
    """Refuse, in one line naming both files, a checkpoint whose files disagree with its ``cselab.json`` (at
    ``path``; ``find(name)`` gives another file of the folder, None where it has none): bidirectional attention
    against config.json's model type (transformers' own classes would attend causally, or cselab bidirectionally,
    where the other file says otherwise), a ``head.safetensors`` that cselab.json names no head for (weights that
    would go unused), an adapter trained on another base than the one cselab.json names (a hub name, or a folder
    still there: a base folder moved since cannot be compared)."""
    config = find("config.json")
    model_type = read_json(config, ModelError).get("model_type") if config is not None else None
    if config is not None and info.bidirectional != (model_type == BIDIRECTIONAL_TYPE):
        said = ("its model type is not cselab's bidirectional one, so transformers would load it causally" if
                info.bidirectional else f"its model type is {BIDIRECTIONAL_TYPE} (a model that attends both ways)")
        raise ModelError(f"{path} and {config} disagree: {path.name} says bidirectional: "
                         f"{str(info.bidirectional).lower()}, {config.name} that {said}; a checkpoint is written "
                         "whole by cselab: write it again rather than edit one file")
    head = find(HEAD_FILE)
    if head is not None and info.head is None:
        raise ModelError(f"{path} and {head} disagree: {head.name} holds a head's weights, {path.name} names no head "
                         "(head: null), so they would go unused; remove the file or name the head it holds")
    adapter = find(ADAPTER_CONFIG)
    base = read_json(adapter, ModelError).get("base_model_name_or_path") if adapter is not None else None
    checkable = base and (Path(base).exists() or not looks_like_path(str(base)))  # (a folder gone since: no word)
    if checkable and info.base_model and hub_name(str(base)) not in (info.base_model, hub_name(info.base_model)):
        raise ModelError(f"{path} and {adapter} disagree: {path.name}'s base model is {info.base_model!r}, the "
                         f"adapter's {base!r}; peft would put the adapter on another base than cselab trained it on")


def write_model_files(folder: str | os.PathLike[str], view: TransformerEncoder, info: CheckpointInfo,
                      config_fields: dict[str, Any] | None = None) -> None:
    """The files of an encoder's model in ``folder``: its weights (safetensors) and config.json (with
    ``config_fields`` over the model's own values, and, for bidirectional attention, cselab's model type:
    :func:`~cselab.encoders.pretrained.mark_bidirectional`), its tokenizer and a head kept at test; ``cselab.json``
    (:func:`write_checkpoint_info`) comes after every other file. ``view`` is the
    :class:`~cselab.encoders.transformer.TransformerEncoder` the checkpoint holds."""
    folder = Path(folder)
    view.model.save_pretrained(folder, safe_serialization=True)
    if config_fields:
        path = folder / "config.json"
        write_json_atomic(path, {**json.loads(path.read_text(encoding="utf-8")), **config_fields})
    if info.bidirectional:  # transformers' own classes of the base's type would attend causally
        mark_bidirectional(folder)
    view.tokenizer.save_pretrained(folder)
    if view.head is not None:
        save_head(folder, view.head)


def write_native_layout(folder: str | os.PathLike[str], view: TransformerEncoder, info: CheckpointInfo,
                        config_fields: dict[str, Any] | None = None) -> None:
    """A checkpoint whose encoding sentence-transformers' own modules run (:func:`needs_module` is false): the model's
    files, then its Transformer, Pooling and, with ``normalize``, Normalize modules as that library writes them."""
    folder = Path(folder)
    write_model_files(folder, view, info, config_fields)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if info.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        (folder / "2_Normalize").mkdir(exist_ok=True)
    pooling = {key: key == ST_POOLING[info.pooler][1] for key in LEGACY_POOLING_KEYS}
    write_json_atomic(folder / "1_Pooling" / "config.json",
                      {"word_embedding_dimension": view.model.config.hidden_size, **pooling})
    write_json_atomic(folder / "sentence_bert_config.json",
                      {"max_seq_length": view.max_length, "do_lower_case": info.lowercase})
    write_json_atomic(folder / "modules.json", modules)
    write_json_atomic(folder / "config_sentence_transformers.json", sentence_transformers_config())
    write_checkpoint_info(folder, info)


def native_settings(read_json: Callable[[str], Any]) -> dict[str, Any] | None:
    """The :class:`~cselab.encoders.encoding.Encoding` fields of a sentence-transformers model that cselab can run
    itself (a Transformer at the root, a CLS or mean Pooling, optionally Normalize), else None.

    ``read_json(name)`` returns the parsed JSON file ``name`` of the model (local or on the hub), or None when the
    model has no such file."""
    modules = read_json("modules.json")
    classes = [module["type"].rsplit(".", 1)[-1] for module in modules]  # the module path moved between versions
    if classes not in NATIVE_MODULES or modules[0]["path"]:
        return None
    pooling = read_json(f"{modules[1]['path']}/config.json") or {}
    if "pooling_mode" in pooling:
        modes = [pooling["pooling_mode"]]
    else:
        modes = [key for key, value in pooling.items() if key.startswith("pooling_mode") and value is True]
    poolers = {name: pooler for pooler, names in ST_POOLING.items() for name in names}
    if len(modes) != 1 or modes[0] not in poolers:
        return None
    settings: dict[str, Any] = {"pooler": poolers[modes[0]], "normalize": len(classes) == 3}
    module_config = read_json("sentence_bert_config.json") or {}
    if module_config.get("max_seq_length"):  # newer versions keep it as the tokenizer's model_max_length instead
        settings["max_length"] = module_config["max_seq_length"]
    if module_config.get("do_lower_case"):
        settings["lowercase"] = True
    return settings


def sentence_transformers_config() -> dict[str, Any]:
    """``config_sentence_transformers.json`` as sentence-transformers writes it: the versions that saved the model
    and its similarity function (cosine: what cselab trains and scores with)."""
    import sentence_transformers
    import torch
    import transformers

    return {"__version__": {"pytorch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
                            "transformers": transformers.__version__},
            "default_prompt_name": None, "model_type": "SentenceTransformer", "prompts": {},
            "similarity_fn_name": "cosine"}
