"""Any cselab encoder inside MTEB 2 (the ``mteb`` extra): ``mteb.evaluate(as_mteb("minilm"), tasks)``.

:class:`MTEBEncoder` is a model on mteb's own base class (``AbsEncoder``), so it passes mteb's ``EncoderProtocol``
check, and it carries a ``ModelMeta`` built from what cselab knows of the model (:func:`model_meta`): its name, its
weights' sha256 as the revision, width, parameters, token limit, cosine similarity, what it was trained on (a
checkpoint's own config: SG trains on STS-B, so MTEB sees it is not zero-shot there) and what mteb's own registry
says of the model it was adapted from. Fields nobody knows stay null.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from cselab.encoders.base import Encoder
from cselab.encoders.checkpoint import CHECKPOINT_FILE, CheckpointInfo, read_checkpoint_info, trusted
from cselab.encoders.encoding import DEFAULT_POOLER
from cselab.encoders.loading import folder_settings, load_encoder, resolve_backbone
from cselab.encoders.specs import ALIAS_NAMES, ALIASES, hub_name, recorded_hub_name
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import ModelError
from cselab.metrics import cosine_rows

if TYPE_CHECKING:
    from mteb.abstasks.task_metadata import TaskMetadata
    from mteb.types import Array, BatchedInput, PromptType
    from torch.utils.data import DataLoader

#: cselab's training data that is (or is made from) an MTEB task's data.
CORPUS_TASKS = {"stsb-rows": "STSBenchmark", "stsb-sentences": "STSBenchmark", "stsb-raw-rows": "STSBenchmark",
                "sick-entailment": "SICK-R"}
LEXICAL = ("bow", "tfidf")
LOADER_KEYS = ("device", "pooler", "prompt", "max_length")  # what meta.load_model() passes on to load_encoder


def _registered(name: str | None) -> ModelMeta | None:
    """mteb's own metadata of a model it knows by name; None for any other."""
    if not name:
        return None
    from mteb import get_model_meta

    try:
        return get_model_meta(name, fetch_from_hf=False)
    except Exception:  # a name mteb's registry does not hold
        return None


def revision(encoder: Encoder) -> str | None:
    """The sha256 of the encoder's weights (of the one file, or of the sorted ``name sha256`` lines of several);
    None for an encoder without weight files (lexical baselines, factories)."""
    if not encoder.weights:
        return None
    if len(encoder.weights) == 1:
        return next(iter(encoder.weights.values()))
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(encoder.weights.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def model_name(spec: str) -> str:
    """An ``org/name`` for a spec: an alias's hub name, a hub name as it is, ``cselab/FOLDER`` for a local folder
    (``cselab/osscse-best`` for ``runs/osscse/best``), ``cselab/bow`` for a lexical baseline or a factory."""
    if spec in ALIAS_NAMES:
        return ALIAS_NAMES[spec]
    path = Path(os.path.expanduser(spec))
    if path.is_dir():
        path = path.resolve()
        return f"cselab/{path.parent.name}-{path.name}" if path.name in ("best", "last") else f"cselab/{path.name}"
    if spec.split(":")[0] in LEXICAL or ":" in spec:
        return "cselab/" + spec.replace(":", ".").replace("/", "_")
    return spec if spec.count("/") == 1 else f"cselab/{spec}"


def _checkpoint(spec: str) -> CheckpointInfo | None:
    """A checkpoint folder's ``cselab.json``, its lineage only where the folder's weights are those it describes."""
    path = Path(os.path.expanduser(spec)) / CHECKPOINT_FILE
    return trusted(read_checkpoint_info(path), path.parent) if path.is_file() else None


def _parameters(encoder: Encoder) -> int | None:
    model = getattr(encoder, "model", None)
    parameters = getattr(model, "parameters", None)
    return sum(p.numel() for p in parameters()) if callable(parameters) else None


def _max_tokens(encoder: Encoder) -> int | None:
    """A transformer's token budget; a sentence-transformers model's ``max_seq_length``; None for the others."""
    limit = getattr(encoder, "max_length", None)
    return limit if limit is not None else getattr(getattr(encoder, "model", None), "max_seq_length", None)


def trained_on(info: CheckpointInfo) -> set[str]:
    """The MTEB tasks whose data a checkpoint trained on: its run's data (``cselab.json``'s ``data``; a checkpoint
    written before cselab recorded it: the method's own ``data``)."""
    data = info.data.get("name") if info.data else info.config.get("data")
    return {CORPUS_TASKS[data]} if data in CORPUS_TASKS else set()


def settings_changed(encoder: Encoder) -> dict[str, Any]:
    """The settings (pooler, prompt, max length) in which ``encoder`` differs from what ``load_encoder`` makes of its
    spec alone: the ModelMeta's ``experiment_kwargs``, so that mteb's result cache keeps its results apart from the
    spec's own and ``meta.load_model()`` loads this encoder again (mteb passes them to the loader)."""
    if not isinstance(encoder, TransformerEncoder) or not encoder.spec:
        return {}
    defaults = folder_settings(resolve_backbone(encoder.spec)) or {}
    described = encoder.describe()
    wanted = {"pooler": defaults.get("pooler", DEFAULT_POOLER), "prompt": defaults.get("prompt"),
              "max_length": defaults.get("max_length") or encoder.limit}
    return {key: described[key] for key, value in wanted.items() if described[key] != value}


def model_meta(encoder: Encoder, name: str | None = None) -> ModelMeta:
    """The ``ModelMeta`` MTEB records with every result of ``encoder`` (see the module docstring); ``name`` overrides
    the ``org/name`` cselab derives from the spec."""
    spec = encoder.spec or type(encoder).__name__
    info = _checkpoint(spec) if spec not in ALIASES else None
    base_name = hub_name(info.base_model) if info is not None and info.base_model else None
    base = _registered(base_name) if info is not None else _registered(model_name(spec))
    trained = set(base.training_datasets or ()) if base is not None else set()
    if info is not None:
        trained |= trained_on(info)
    # a hub name not in mteb's registry is trusted only where cselab recorded it as one (with the run's data): older
    # checkpoints recorded the base's folder as typed, a relative path perhaps
    adapted = base.name if base is not None else recorded_hub_name(base_name) if info is not None and info.data \
        else None
    transformer = _parameters(encoder) is not None
    return ModelMeta(
        loader=load_mteb_model, loader_kwargs={"spec": spec}, experiment_kwargs=settings_changed(encoder) or None,
        name=name or model_name(spec), revision=revision(encoder),
        release_date=base.release_date if base is not None and info is None else None,
        languages=["eng-Latn"] if info is not None or base is not None else None,
        n_parameters=_parameters(encoder), memory_usage_mb=None, max_tokens=_max_tokens(encoder),
        embed_dim=encoder.dim, license=base.license if base is not None and info is None else None,
        open_weights=True if transformer else None, public_training_code=None, public_training_data=None,
        framework=["PyTorch", "Sentence Transformers"] if transformer else ["NumPy"], reference=None,
        similarity_fn_name=ScoringFunction.COSINE, use_instructions=False, training_datasets=trained or None,
        adapted_from=adapted if info is not None else None,
    )


class MTEBEncoder(AbsEncoder):
    """A cselab :class:`~cselab.encoders.base.Encoder` as an MTEB model: mteb's batches in, float32 rows out. Its
    similarity of pairs is cselab's cosine in float64 (``probe run``'s), so MTEB's ``spearman`` (the model's own
    similarity) equals ``probe run``'s figure; MTEB's ``cosine_spearman`` is computed by scikit-learn in float32 and
    differs where float32 rounding breaks or makes ties (bag-of-words vectors). The encoder's prompt template and
    pooler are its own; MTEB's task instructions are not applied (``use_instructions=False``)."""

    mteb_model_meta: ModelMeta  # always set (AbsEncoder's may be None)
    model: Encoder  # (AbsEncoder's may be any model)

    def __init__(self, encoder: Encoder, name: str | None = None):
        self.model = encoder
        self.mteb_model_meta = model_meta(encoder, name)

    def encode(self, inputs: DataLoader[BatchedInput], *, task_metadata: TaskMetadata, hf_split: str, hf_subset: str,
               prompt_type: PromptType | None = None, **kwargs: Any) -> np.ndarray:
        return self.model.encode(inputs, batch_size=kwargs.get("batch_size", 64),
                                 show_progress_bar=kwargs.get("show_progress_bar"))

    def similarity_pairwise(self, embeddings1: Array, embeddings2: Array) -> np.ndarray:
        return cosine_rows(np.asarray(embeddings1), np.asarray(embeddings2))


def as_mteb(model: Encoder | str, name: str | None = None, **load: Any) -> MTEBEncoder:
    """An MTEB model of a cselab encoder, or of a spec :func:`~cselab.encoders.load_encoder` loads (``load``: its
    keyword arguments, e.g. ``device``, ``pooler``)."""
    return MTEBEncoder(load_encoder(model, **load) if isinstance(model, str) else model, name)


def load_mteb_model(model_name: str, revision: str | None = None, *, spec: str, **load: Any) -> MTEBEncoder:
    """The ``ModelMeta``'s loader (``meta.load_model()``): the spec loaded again, with the settings it was loaded with
    (pooler, prompt, max length: its ``experiment_kwargs``, which mteb passes here), under the same name; refused when
    its weights are no longer those of ``revision``."""
    model = as_mteb(spec, name=model_name, **{k: v for k, v in load.items() if k in LOADER_KEYS})
    if revision is not None and model.mteb_model_meta.revision != revision:
        raise ModelError(f"{spec}: its weights changed since this ModelMeta was made (sha256 {revision[:12]}..., now "
                         f"{str(model.mteb_model_meta.revision)[:12]}...)")
    return model
