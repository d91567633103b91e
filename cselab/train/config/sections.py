"""A method's ``encoder`` and ``training`` sections as typed objects: each dataclass field declares its
:class:`~cselab.registry.Param` once (:func:`~cselab.registry.setting`), the schema a config is checked against is
derived from it (:func:`~cselab.registry.schema_of`, as the augment config's), and the run reads attributes, not
keys. Building one checks it (a :class:`~cselab.errors.ConfigError` naming the key), cross-field rules included."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from cselab.encoders.encoding import Encoding, EncodingSettings
from cselab.encoders.heads import CHECKPOINT_HEADS
from cselab.errors import ConfigError
from cselab.probes.dev import NONE, resolve
from cselab.files import shown
from cselab.registry import MAX_SEED, REQUIRED, Checked, Param, check_plugin, get, schema_of, setting

DTYPES = ("float32", "bfloat16", "float16")
AUTO = "auto"  # a speed setting decided by the device (cselab.train.run.execution)
PAD_MULTIPLE = 16  # a compiled backbone's rows are padded to a multiple of this many tokens (fewer shapes)


def head_spec(head: Any, where: str = "encoder.head") -> Any:
    """``encoder.head: NAME`` is ``{kind: NAME}`` (the name checked against the registered heads); a mapping or null
    as it is."""
    return {"kind": get("head", head, where).name} if isinstance(head, str) else head


@dataclass(frozen=True, kw_only=True)
class EncoderConfig(EncodingSettings):
    """``encoder``: how the backbone becomes a sentence encoder in training: how text becomes a vector
    (:class:`~cselab.encoders.encoding.EncodingSettings`, its rules included), what of it a checkpoint keeps
    (:meth:`at_test`), and what training alone reads."""

    where = "encoder"

    head_at_test: bool = setting(False, "keep the head in checkpoints and encode through it (PromptBERT's "
                                 "supervised runs; heads mlp and mlm_transform)")
    head_init: str = setting("bert", "the head's initial weights: bert (normal(0, the backbone's "
                             "initializer_range), biases 0) or torch (PyTorch's default)", choices=("bert", "torch"))
    denoise_at_test: bool = setting(False, "checkpoints denoise too (PromptBERT's supervised runs: "
                                    "--mask_embedding_sentence_delta in its evaluation)")
    frozen: str | None = setting(None, "dtype of a frozen copy of the initial backbone", choices=DTYPES)
    momentum: float | None = setting(None, "the frozen copy follows the backbone as a momentum encoder: m = "
                                     "momentum * m + (1 - momentum) * theta at each batch, before its views are "
                                     "encoded (ESimCSE; null: the copy stays the initial backbone)", min=0.0, max=1.0,
                                     below=True)
    momentum_start: str = setting("backbone", "the momentum copy's first weights: backbone (a copy of the "
                                  "initial backbone, as momentum contrast starts) or random (the backbone's "
                                  "initialisation drawn anew, as ESimCSE's released code leaves it)",
                                  choices=("backbone", "random"))
    frozen_mode: str = setting("eval", "the frozen copy's mode in training: eval (no dropout) or train "
                               "(dropout on)", choices=("eval", "train"))
    freeze_embeddings: bool = setting(False, "do not train the embedding layer")
    adapter: dict[str, Any] | None = setting(None, "a parameter-efficient adapter trained instead of the "
                                             "backbone: {kind: lora, r, alpha, dropout, target_modules} (checkpoints "
                                             "hold the merged weights)", plugin="adapter")
    model_config: dict[str, Any] | None = setting(None, "fields of the backbone's transformers config set when "
                                                  "it loads (LLM2Vec's {attention_dropout: 0.3}); each must be a "
                                                  "field it has")

    def __post_init__(self) -> None:
        """The head a name or a mapping, checked against its plug-in (a training head may be any kind)."""
        head = head_spec(self.head)
        object.__setattr__(self, "head", None if head is None else check_plugin("head", head, "encoder.head"))
        super().__post_init__()

    def training_encoding(self, max_length: int | None) -> Encoding:
        """How the trained encoder's own view encodes in training: sentences cut at ``max_length``, the head
        applied inside it only where it stays at test (training applies it to every view otherwise)."""
        return Encoding(**{name: getattr(self, name) for name in SHARED if name != "head"},
                        head=self.head if self.head_at_test else None, max_length=max_length)

    def at_test(self, max_length: int, normalize: bool) -> Encoding:
        """How the run's checkpoints encode: the head only with ``head_at_test``, the denoising (and the head inside
        it) only with ``denoise_at_test``, the filled template as text (its evaluation's), ``max_length`` and
        ``normalize``."""
        return replace(self.training_encoding(max_length), denoise=self.denoise_at_test, prompt_pieces=False,
                       head_before_denoise=self.head_before_denoise and self.denoise_at_test, normalize=normalize)

    def rules(self) -> None:
        super().rules()
        if self.momentum is None and self.momentum_start != "backbone":
            raise ConfigError("encoder.momentum_start: set, and encoder.momentum is null: there is no momentum copy")
        if self.momentum is not None and self.frozen != "float32":
            raise ConfigError(f"encoder.momentum: a momentum encoder is the frozen copy kept in float32 (steps of "
                              f"{1 - self.momentum:g} of a weight vanish in half precision); set encoder.frozen: "
                              f"float32 (now {self.frozen})")
        kind = self.head["kind"] if isinstance(self.head, dict) else self.head
        if self.head_at_test and kind not in CHECKPOINT_HEADS:
            raise ConfigError(f"encoder.head_at_test: a checkpoint keeps a head of kind {' or '.join(CHECKPOINT_HEADS)}"
                              f", not {'no head' if kind is None else repr(kind)}")
        if self.denoise_at_test and not self.denoise:
            raise ConfigError("encoder.denoise_at_test: checkpoints denoise as training does; set encoder.denoise too")
        if self.head_before_denoise and not self.head_at_test:
            raise ConfigError("encoder.head_before_denoise: the template's vector goes through the head before it "
                              "is subtracted, in training and at test; it needs encoder.head_at_test")
        if self.head_before_denoise and self.frozen:
            raise ConfigError("encoder.head_before_denoise: the head goes inside the denoising, which a frozen or "
                              "momentum copy's no-gradient views would run it in; it does not go with encoder.frozen")
        if self.adapter is not None and (self.frozen or self.freeze_embeddings):
            raise ConfigError("encoder.adapter: the adapter's weights alone train; a frozen or momentum copy of the "
                              "backbone, or freeze_embeddings, does not go with it yet")


#: The settings a method's encoder shares with :class:`~cselab.encoders.encoding.Encoding`.
SHARED = tuple(f.name for f in fields(EncodingSettings))


@dataclass(frozen=True, kw_only=True)
class TrainingConfig(Checked):
    """``training``: the optimizer, its schedule, the batches, the evaluations and the early stop."""

    where = "training"

    batch_size: int = setting(REQUIRED, "rows per contrastive batch", min=1)
    lr: float = setting(REQUIRED, "peak learning rate (0: a control run that does not move)", min=0.0)
    epochs: int = setting(1, min=1)
    max_steps: int | None = setting(None, "stop after this many optimizer steps", min=1)
    max_length: int = setting(REQUIRED, "tokens per training sentence", min=1)
    eval_steps: int = setting(REQUIRED, "steps between evaluations and saves", min=1)
    grad_accum: int = setting(1, "batches per optimizer step", min=1)
    mixed_precision: str = setting("no", choices=("no", "fp16", "bf16"))
    gradient_checkpointing: bool = setting(False, "recompute the backbone's activations in the backward pass "
                                           "instead of keeping them (less memory, about a third more time)")
    seed: int = setting(42, min=0, max=MAX_SEED)
    optimizer: str = setting("adamw_legacy", "adamw (torch's) or adamw_legacy (transformers 4.x: eps added "
                             "before the bias correction, decay after the update)", choices=("adamw", "adamw_legacy"))
    weight_decay: float = setting(0.0, "AdamW's decoupled decay", min=0.0)
    no_decay: list[str] = setting(["bias", "LayerNorm.weight"], "parameters whose name contains one of these "
                                  "take no weight decay (an empty list: all do)", items=Param(str), empty=True)
    adam_betas: list[float] = setting([0.9, 0.999], items=Param(float, min=0.0, max=1.0, below=True), length=2)
    adam_eps: float = setting(1e-8, min=0.0, above=True)
    max_grad_norm: float | None = setting(1.0, "clip the gradients' total norm to this before each step "
                                          "(null: no clipping)", min=0.0, above=True)
    warmup: int | float = setting(0, "linear warm-up: a fraction of the total steps (below 1) or a "
                                  "number of steps", min=0)
    lr_schedule: str = setting("linear", "after the warm-up: linear (decay to 0 at the last step, Hugging Face's "
                               "Trainer) or constant (the peak rate to the end, as Keras trains)",
                               choices=("linear", "constant"))
    early_stop: int | None = setting(None, "patience in evaluations", min=1)
    early_stop_rule: str = setting("no_improvement", "what early_stop counts: no_improvement (evaluations in a "
                                   "row without a better best score) or drops (evaluations scoring below the one "
                                   "before, never reset)", choices=("no_improvement", "drops"))
    mini_batch_size: int | None = setting(None, "cached InfoNCE: encode the batch this many rows at a time, "
                                          "the losses still over the whole batch (null: the whole batch at once)",
                                          min=1)
    sampler: str = setting("random", "how rows form batches: random (the epoch's order drawn from the seed, as "
                           "the released code samples) or no_duplicates (the same order, a row whose text of a view "
                           "is already in the batch deferred to the next one)", choices=("random", "no_duplicates"))
    view_rows: str = setting("stacked", "how views that share a forward pass lay out its rows, which decides "
                             "the dropout mask each copy draws: stacked (x1..xN, x1..xN) or interleaved (x1, x1, x2, "
                             "x2, ...: SimCSE's released cl_forward)", choices=("stacked", "interleaved"))
    eval_at_end: bool = setting(True, "evaluate at the last step too, when it is no multiple of eval_steps "
                                "(false: the last step only saves OUT/last, as SimCSE's released Trainer, which "
                                "evaluates every eval_steps only)")
    eval_at_start: bool = setting(False, "score the initial weights before the first step: they are the best "
                                  "to beat (and OUT/best if nothing beats them)")
    dev: str | dict[str, Any] = setting(
        "stsb", "the dev score computed at each evaluation (OUT/best keeps the best score): stsb (STS-B dev), sickr "
        "(SICK-R dev), sts-dev-avg (their mean), a transfer task's dev accuracy (mr, cr, subj, mpqa, sst2, trec, "
        "mrpc), transfer-dev-avg (their mean), none (best = last save), or a probe suite on its dev split, "
        "{suite: sts, tasks: [stsb]} (cselab.probes.dev)")
    # how the steps execute (docs/train.md, "Speed"): none changes the method's math; auto decides by the device
    prefetch: int = setting(2, "batches tokenised ahead of the step in a background thread (0: each batch "
                            "tokenised in its step)", min=0)
    compile: bool | str = setting(AUTO, "torch.compile the backbone (its rows padded to a multiple of "
                                  f"{PAD_MULTIPLE} tokens) and the losses' math: auto (on a CUDA device; off on the "
                                  "CPU, or where the method cannot, with a note saying why), true or false",
                                  words=(AUTO,))
    cuda_graphs: bool | str = setting(AUTO, "replay the compiled backbone as CUDA graphs: auto (where "
                                      "it is compiled on a CUDA device and the step allows, else a note says why "
                                      "not), true (refused where it cannot) or false", words=(AUTO,))
    merge_passes: bool | str = setting(AUTO, "views that differ only in column or prompt (same copy, "
                                       "layers and pooling, no augment) share one forward pass, their rows padded to "
                                       "one length: auto (on a CUDA device), true or false; the same vectors with "
                                       "dropout off, other dropout masks with it on", words=(AUTO,))
    packing: bool | str = setting(AUTO, "the sentence passes run padding-free: a batch's real tokens "
                                  "in one row, each layer's attention re-padded per row: auto (where the method and "
                                  "model can and the backbone is not compiled), true (refused where they cannot) or "
                                  "false; the padded pass's vectors and dropout masks, its gradients up to rounding",
                                  words=(AUTO,))

    def rules(self) -> None:
        if self.dev != NONE:
            resolve(self.dev)  # a named dev set, or a suite that scores a dev split with its settings
        if self.warmup >= 1 and self.warmup != int(self.warmup):
            raise ConfigError(f"training.warmup: {shown(self.warmup)} is neither a fraction below 1 nor a whole "
                              "number of steps")
        if self.cuda_graphs is True and self.compile is False:
            raise ConfigError("training.cuda_graphs: true replays the compiled backbone, and training.compile is "
                              "false; set compile to true or auto, or cuda_graphs to auto or false")
        if self.packing is True and self.compile is True:
            raise ConfigError("training.packing: true runs rows of a new length every batch, and training.compile: "
                              "true compiles the backbone for rows padded to few shapes; set one of them to auto or "
                              "false")


def warmup_steps(warmup: float, total: int) -> int:
    """``training.warmup`` in steps: a fraction below 1 of ``total`` (rounded up, as Hugging Face's
    ``warmup_ratio`` and SG-BERT's ``training.py``), else a count."""
    return math.ceil(warmup * total) if warmup < 1 else int(warmup)


@dataclass(frozen=True, kw_only=True)
class ViewConfig(Checked):
    """A view (``views.NAME``): the cache ``column`` encoded, or the view it is made ``of``; its ``prompt``, pooled
    ``layers`` (and their ``layer_pooler``), whether the ``frozen`` copy encodes it, its ``augment`` plug-in and its
    token augmentation (``tokens``). The rules that read other views (``of`` names one) are the method's
    (:mod:`~cselab.train.config.schema`)."""

    where = "views"

    column: str | None = setting(None, "the cache column encoded (a forward pass)")
    of: str | None = setting(None, "the view whose vectors this one is made from")
    prompt: str | None = setting(None, "this view's prompt template")
    layers: list[int] | str | None = setting(None, "hidden layers pooled too (NAME.layers), or all", items=Param(int),
                                             words=("all",))
    layer_pooler: str | None = setting(None, "how each layer is pooled", choices="plugin:layer_pooler")
    frozen: bool = setting(False, "encode with the frozen copy")
    augment: dict[str, Any] | None = setting(None, "an input augmentation, or an output one for a view of "
                                             "another")
    tokens: dict[str, Any] | None = setting(None, "a token-level augmentation of a forward view's input "
                                            "(word_repetition)", plugin="token_augment")


ENCODER = schema_of(EncoderConfig)
TRAINING = schema_of(TrainingConfig)
VIEW = schema_of(ViewConfig)
