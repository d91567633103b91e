"""A transformers model and its tokenizer, checked before any work is done with them.

transformers loads a great deal without complaint: a folder without tokenizer files gets a placeholder vocabulary of
a handful of tokens (every word then ``[UNK]``), a config that describes more layers than the weights hold gets the
missing ones at random, and a damaged or refused weights file ends in a long traceback. :func:`load_pretrained`
turns each of these into one :class:`~cselab.errors.ModelError` naming the folder (or hub name) and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cselab.checksum import sha256
from cselab.errors import ConfigError, ModelError
from cselab.files import clipped, shown

if TYPE_CHECKING:
    from torch.nn import Embedding
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_MAX_LENGTH = 512  # the most tokens cselab gives a model whose config and tokenizer set no lower limit
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")
SMALLEST_VOCABULARY = 100  # a placeholder tokenizer has its few special tokens; a real one has thousands


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer of a folder or hub name; a folder must hold a vocabulary file, and what loads must be a real
    vocabulary, not a placeholder."""
    from transformers import AutoTokenizer

    folder = Path(path)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"{path}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); copy the tokenizer of the "
                         "model it was trained from into the folder")
    try:  # a bidirectional checkpoint's config read as its base's (transformers would warn at cselab's model type)
        config = auto_config(path) if bidirectional_checkpoint(path) else None
        tokenizer = AutoTokenizer.from_pretrained(path, **({"config": config} if config is not None else {}))
    except Exception as err:  # any failure of the library to read the folder is the folder's to fix
        raise ModelError(f"{path}: the tokenizer cannot be loaded ({type(err).__name__}: {clipped(err)})") from None
    if len(tokenizer) < SMALLEST_VOCABULARY:
        raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens, a placeholder rather than a "
                         "vocabulary; copy the real tokenizer files into the folder")
    return padded_on_the_right(tokenizer, path)


def padded_on_the_right(tokenizer: PreTrainedTokenizerBase, path: str) -> PreTrainedTokenizerBase:
    """``tokenizer`` set to pad as cselab pads: on the right (a decoder's tokens keep positions 0..n-1, and its
    last-token pooler reads each row's last real token), with its end-of-sequence token where it has no padding token
    (a decoder LM's: GPT-2, Llama), as a checkpoint saves it, so that sentence-transformers pads a checkpoint's rows
    as cselab does. A tokenizer with neither token is refused."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelError(f"{path}: the tokenizer has no padding token and no end-of-sequence token to pad with; "
                             "add one (tokenizer.add_special_tokens({'pad_token': ...}) and save it in the folder)")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def token_limit(config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase) -> int:
    """The tokens a model takes: its position embeddings, its tokenizer's ``model_max_length``, at most
    :data:`DEFAULT_MAX_LENGTH`."""
    positions = getattr(config, "max_position_embeddings", None) or DEFAULT_MAX_LENGTH
    limit: int = min(tokenizer.model_max_length, DEFAULT_MAX_LENGTH, positions)
    return limit


#: A checkpoint whose model attends bidirectionally (LLM2Vec) has a model type of cselab's in its config.json, so that
#: transformers refuses to load it (its own classes of the base's type attend causally: other vectors, without a
#: word), with the base's type and why beside it; cselab reads it as the base's (:func:`auto_config`).
BIDIRECTIONAL_TYPE = "cselab-bidirectional"
BASE_TYPE = "cselab_base_model_type"
NOTE = "cselab_note"


def mark_bidirectional(folder: str | Path) -> None:
    """Give the checkpoint ``folder``'s config.json cselab's model type (see :data:`BIDIRECTIONAL_TYPE`)."""
    from cselab.atomic import write_json_atomic

    path = Path(folder) / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    base = config.get(BASE_TYPE, config["model_type"])
    write_json_atomic(path, {**config, "model_type": BIDIRECTIONAL_TYPE, BASE_TYPE: base, NOTE: (
        f"attends bidirectionally (LLM2Vec), which transformers' {base} classes do not: load it with cselab (pip "
        "install cselab-toolkit), SentenceTransformer(PATH, trust_remote_code=True) or "
        "cselab.encoders.load_encoder(PATH)")})


def bidirectional_checkpoint(path: str) -> bool:
    """Whether the folder ``path`` is a checkpoint cselab marked bidirectional (:func:`mark_bidirectional`)."""
    file = Path(path) / "config.json"
    try:
        return file.is_file() and json.loads(file.read_text(encoding="utf-8")).get("model_type") == BIDIRECTIONAL_TYPE
    except (OSError, ValueError, AttributeError):  # a config.json transformers will name when it reads it
        return False


def auto_config(path: str) -> PretrainedConfig:
    """The transformers config of a folder or hub name, a bidirectional checkpoint's (:data:`BIDIRECTIONAL_TYPE`) as
    its base's type."""
    from transformers import AutoConfig, PretrainedConfig

    fields, _ = PretrainedConfig.get_config_dict(path)  # the file as written, the folder's or the hub's
    if fields.get("model_type") != BIDIRECTIONAL_TYPE:
        config: PretrainedConfig = AutoConfig.from_pretrained(path)
        return config
    base = fields.pop(BASE_TYPE)
    for key in ("model_type", NOTE):
        fields.pop(key, None)
    return AutoConfig.for_model(base, **fields)


def check_max_length(path: str, max_length: int, where: str) -> None:
    """Refuse a ``max_length`` (named ``where``) above the tokens the model of ``path`` takes, from its config and
    tokenizer, before its weights load (a sentence that long would index past its position embeddings)."""
    try:
        config = auto_config(path)
    except Exception as err:  # no config.json, or one transformers cannot read
        raise ModelError(f"{path}: the config cannot be loaded ({type(err).__name__}: {clipped(err)})") from None
    limit = token_limit(config, load_tokenizer(path))
    if max_length > limit:
        raise ConfigError(f"{where}: {max_length} is more than the {limit} tokens {path} takes (its position "
                          f"embeddings or tokenizer limit); give at most {limit}")


def load_model(path: str, needs_pooler: bool = False, config: dict[str, Any] | None = None,
               options: dict[str, Any] | None = None) -> PreTrainedModel:
    """The transformers model of a folder or hub name, ``config``'s fields set on its config (each one a field the
    config has), ``options`` further keywords of ``from_pretrained`` (a quantization config); weights that do not
    load, or that leave part of the model its config describes at random (a pooler layer aside, unless
    ``needs_pooler``), are a ModelError."""
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    fields = auto_config(path)
    unknown = [key for key in config or {} if not hasattr(fields, key)]
    if unknown:
        raise ConfigError(f"encoder.model_config.{unknown[0]}: {path}'s config ({type(fields).__name__}) has no "
                          "such field")
    set_fields(fields, config or {}, path)
    verbosity = transformers_logging.get_verbosity()
    # a head's weights beside the base are expected; missing ones below
    transformers_logging.set_verbosity(transformers_logging.ERROR)
    model: PreTrainedModel
    try:
        model, info = AutoModel.from_pretrained(path, config=fields, output_loading_info=True, **(options or {}))
    except Exception as err:  # a missing, truncated, refused (pickle) or mismatched weights file
        raise ModelError(f"{path}: the weights cannot be loaded ({type(err).__name__}: {clipped(err)})") from None
    finally:
        transformers_logging.set_verbosity(verbosity)
    missing = [key for key in info.get("missing_keys", ()) if needs_pooler or not key.startswith("pooler.")]
    if missing:
        raise ModelError(f"{path}: the weights do not cover the model its config.json describes: {len(missing)} "
                         f"tensor(s) would start at random, e.g. {sorted(missing)[0]}")
    return model


def set_fields(config: PretrainedConfig, values: dict[str, Any], path: str) -> None:
    """``values`` set on ``config`` (``encoder.model_config``'s); a value of the wrong type for its field, which
    transformers' config (a strict dataclass) refuses, is one line naming the key, the value and the field's type,
    before any weight loads."""
    try:  # huggingface_hub's strict dataclasses (transformers 5's configs); before them, a setter's own errors
        from huggingface_hub.errors import StrictDataclassError
        refused: tuple[type[Exception], ...] = (StrictDataclassError, TypeError, ValueError)
    except ImportError:
        refused = (TypeError, ValueError)
    for key, value in values.items():
        try:
            setattr(config, key, value)
        except refused:
            field = getattr(type(config), "__dataclass_fields__", {}).get(key)
            kind = getattr(field, "type", None)
            expected = f"; expected {getattr(kind, '__name__', None) or kind}" if kind is not None else ""
            raise ConfigError(f"encoder.model_config.{key}: {shown(value)} is not valid for {path}'s config "
                              f"({type(config).__name__}){expected}") from None


def load_pretrained(path: str, pooler: str | None = None, config: dict[str, Any] | None = None,
                    options: dict[str, Any] | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` of a folder or hub name, both checked (see the module docstring), and checked to be a
    pair (:func:`check_vocabulary`); ``config``: fields set on the model's config, ``options``: further keywords of
    ``from_pretrained`` (:func:`load_model`)."""
    tokenizer = load_tokenizer(path)
    model = load_model(path, needs_pooler=pooler == "cls", config=config, options=options)
    embeddings = cast("Embedding", model.get_input_embeddings())  # transformers declares an nn.Module
    check_vocabulary(tokenizer, embeddings.num_embeddings, path, "embedding rows")
    return model, tokenizer


def check_vocabulary(tokenizer: PreTrainedTokenizerBase, rows: int, where: str, what: str,
                     error: type[Exception] = ModelError) -> None:
    """Refuse ``tokenizer`` where one of its token ids (its vocabulary, added and special tokens included: a decoder's
    end token that pads) is not below ``rows`` (a model's ``what``: its embedding rows, or the ids a head predicts):
    the model would index past them deep in a forward pass."""
    vocabulary = tokenizer.get_vocab()
    token, highest = max(vocabulary.items(), key=lambda item: item[1], default=(None, -1))
    if highest >= rows:
        raise error(f"{where}: the tokenizer's ids reach {highest} ({token!r}), and the model has {rows} {what}: "
                    "they are not a pair; give the model's own tokenizer (or resize its embeddings to the tokenizer "
                    "and save it)")


# model.pt: the extra weights a Condenser folder keeps beside its encoder (InfoCSE's aggregation head reads them)
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "model.pt")


def weight_files(path: str) -> dict[str, str]:
    """Each weight file of a model (folder or hub name, looked up in the local cache and fetched there when it can
    be) by name, with its sha256 as ``sha256sum`` prints it; empty when no weight file is at hand."""
    folder = Path(path)
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(path, allow_patterns=list(WEIGHT_FILES)))
        except Exception:  # offline and not cached, or not a hub name: no weights to name it by
            return {}
    files = sorted({f for pattern in WEIGHT_FILES for f in folder.glob(pattern)})
    return {file.name: sha256(file) for file in files}


def combined_sha256(files: dict[str, str]) -> str | None:
    """One sha256 over weight files' names and sha256s (:func:`weight_files`); None for none."""
    if not files:
        return None
    digest = hashlib.sha256()
    for name, file_digest in sorted(files.items()):
        digest.update(f"{name}\0{file_digest}\n".encode())
    return digest.hexdigest()

