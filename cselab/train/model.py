"""The encoder being trained, and the checkpoint folder it leaves.

:class:`TrainingEncoder` is a transformers backbone with the poolers and prompts of
:class:`~cselab.encoders.TransformerEncoder` (tokenisation, padding and pooling are that
class's, so training and probing see sentences the same way) and, when a method asks for them,
a head used in training (SimCSE's dense + tanh, SG-OPT's projection; kept at test with ``head_at_test``), pooled
intermediate layers (SSCL's negatives, SG-OPT's views), a frozen copy of the initial
backbone (SG-OPT's BERT_F) or a momentum copy that follows it (ESimCSE), and the trained auxiliary
models of its losses (DiffCSE's discriminator), which checkpoints leave out.

:func:`save_checkpoint` writes a folder that ``probe run --model FOLDER`` reads as it is
(weights in safetensors, tokenizer, ``cselab.json``) and that sentence-transformers loads with the same
vectors: ``SentenceTransformer(FOLDER)`` for the ``cls_before_pooler`` and ``avg`` poolers without a prompt or a
kept head (its own Transformer and Pooling modules), ``SentenceTransformer(FOLDER, trust_remote_code=True)`` for
every other pooler, any prompt and a head kept at test (cselab's module, :mod:`cselab.encoders.st_module`). A run with
an adapter (LoRA) writes the base with the adapter merged in, and beside it ``adapter/``, the adapter alone as peft
writes it, which ``PeftModel.from_pretrained(base, FOLDER / "adapter")`` loads.
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cselab.encoders.checkpoint import CheckpointInfo
from cselab.encoders.pretrained import auto_config, load_pretrained
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import ConfigError
from cselab.registry import build_plugin
from cselab.train.config.sections import PAD_MULTIPLE, EncoderConfig
from cselab.train.language_models import load_lm_head
from cselab.train.plugins.heads import build_head

ADAPTER = "adapter"  # a checkpoint's subfolder holding an adapter as its library writes it (peft's files for LoRA)


class TrainingEncoder(nn.Module):
    """A backbone with a pooler, an optional prompt, an optional head and an optional frozen copy, as
    the method's ``encoder`` section (an :class:`~cselab.train.config.sections.EncoderConfig`) says; a sentence keeps
    at most ``max_length`` tokens in training.

    ``head``: ``{"kind": "mlp"}`` (SimCSE), ``{"kind": "projection", ...}`` (SG-OPT), applied to every view in
    training (and at test with ``head_at_test``, the view's own head then), its weights started as ``head_init``
    says. ``frozen``: a dtype name (``"float32"``, ``"bfloat16"``,
    ``"float16"``) to keep a frozen copy of the initial backbone (no gradient; SG-OPT's BERT_F); ``frozen_mode``
    ``"eval"`` runs it without dropout, ``"train"`` with (as SG-BERT's released code does); with ``momentum`` the copy
    follows the backbone (:meth:`new_batch`), a momentum encoder whose weights are training state (``OUT/last``).
    ``freeze_embeddings`` stops the embedding layer (layer 0) from training."""

    backbone: Any  # a transformers model (in its adapter's wrapper with one): its config and layers read by name
    lm_head: nn.Module | None
    frozen: nn.Module | None  # in __dict__, as compiled: not submodules
    compiled: nn.Module | None

    def __init__(self, backbone, tokenizer, config: EncoderConfig, max_length: int, lm_head: nn.Module | None = None):
        super().__init__()
        self.adapter = build_plugin("adapter", config.adapter)  # trained instead of the backbone's own weights
        if self.adapter is not None:
            backbone = self.adapter.wrap(backbone, getattr(backbone.config, "_name_or_path", "") or "the backbone")
        self.backbone = backbone
        self.lm_head = lm_head  # the model's own LM head (the mlm or mntp loss's), trained and saved in OUT/last
        self.head = build_head(config.head, config.head_init, backbone.config)
        self.head_at_test = config.head_at_test  # the head is the view's too, and checkpoints keep it
        self.view = TransformerEncoder(backbone, tokenizer, config.training_encoding(max_length),
                                       head=self.head if config.head_at_test else None)
        self.prompt = config.prompt
        self._views = {self.prompt: self.view}  # by template as given, before [MASK] becomes the tokenizer's token
        # not a submodule: outside the optimizer, DDP and the saved state (it is rebuilt from the base model)
        frozen = (copy.deepcopy(backbone).to(getattr(torch, config.frozen)).eval().requires_grad_(False)
                  if config.frozen else None)
        self.__dict__["frozen"] = frozen
        self.frozen_mode, self.momentum = config.frozen_mode, config.momentum
        self.__dict__["compiled"] = None  # the backbone through torch.compile (compile_backbone): not a submodule
        self.packing = False  # the sentence passes run packed (training.packing; cselab.encoders.packing)
        self.base_settings: dict[str, Any] = {}  # the base's own values of its config fields training changed
        if frozen is not None and config.momentum is not None and config.momentum_start == "random":  # (momentum
            # needs the frozen copy: EncoderConfig)
            frozen.apply(backbone._init_weights)  # the backbone's initialisation, drawn anew
        # trained auxiliary models of the method's losses (DiffCSE's discriminator): in the optimizer, DDP and OUT/last,
        # never in a checkpoint (attach_auxiliary)
        self.auxiliary = nn.ModuleDict()
        if config.pooler != "cls" and getattr(backbone, "pooler", None) is not None:
            # the backbone's pooler layer gets no gradient; frozen, DDP does not wait for one
            backbone.pooler.requires_grad_(False)
        if config.freeze_embeddings:
            (getattr(backbone, "embeddings", None) or backbone.get_input_embeddings()).requires_grad_(False)
        self.train()

    @torch.no_grad()
    def new_batch(self) -> None:
        """A new batch begins: a momentum copy moves to ``momentum * m + (1 - momentum) * theta`` (every parameter
        of the backbone, as ESimCSE's cl_forward); nothing otherwise."""
        if self.momentum is None or self.frozen is None:  # (a momentum encoder has its frozen copy)
            return
        for theta, m in zip(self.backbone.parameters(), self.frozen.parameters(), strict=True):
            m.mul_(self.momentum).add_(theta.detach().to(m.device), alpha=1.0 - self.momentum)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, max_length: int, lm_head: str | None = None,
                        **settings) -> TrainingEncoder:
        """The backbone and tokenizer of a folder or hub name, checked (:func:`~cselab.encoders.pretrained.
        load_pretrained`), with the ``encoder`` section's ``settings`` (keywords of :class:`EncoderConfig`, checked
        and completed with its defaults); with ``lm_head`` (``"masked"`` or ``"causal"``), the model's LM head of that
        kind too (:func:`load_lm_head`)."""
        config = EncoderConfig(**settings)
        adapter = build_plugin("adapter", config.adapter)  # a k-bit adapter loads the base quantized
        backbone, tokenizer = load_pretrained(str(name_or_path), config.pooler, config.model_config,
                                              adapter.load_options() if adapter is not None else None)
        head = load_lm_head(str(name_or_path), backbone, lm_head) if lm_head else None
        encoder = cls(backbone, tokenizer, config, max_length, head)
        base = auto_config(str(name_or_path))  # a training-time dropout is not the checkpoint's (save_checkpoint)
        encoder.base_settings = {key: getattr(base, key) for key in config.model_config or {} if "dropout" in key}
        return encoder

    @property
    def tokenizer(self):
        return self.view.tokenizer

    def compile_backbone(self, cuda_graphs: bool = False) -> None:
        """Training's passes of the backbone through ``torch.compile`` (the same weights; the dev scorer, the
        language-model head's passes and checkpoints use the plain backbone), each batch's rows padded with the
        tokenizer's padding to a multiple of :data:`PAD_MULTIPLE` tokens (fewer shapes to compile; the pooled vectors
        are the same); replayed as CUDA graphs with ``cuda_graphs``."""
        self.__dict__["compiled"] = torch.compile(self.backbone, mode="reduce-overhead" if cuda_graphs else None)

    def checkpoint_view(self) -> TransformerEncoder:
        """The encoder a checkpoint holds: the trained one, or with an adapter a copy whose backbone has the
        adapter's weights merged in (a plain model of the base's architecture)."""
        if self.adapter is None:
            return self.view
        view = copy.copy(self.view)
        view.model = self.adapter.merged(self.backbone).eval()
        return view

    def _view(self, prompt: str | None) -> TransformerEncoder:
        prompt = self.prompt if prompt is None else prompt
        if prompt not in self._views:
            self._views[prompt] = TransformerEncoder(self.backbone, self.tokenizer,
                                                     replace(self.view.encoding, prompt=prompt), head=self.view.head)
        return self._views[prompt]

    def text_view(self, prompt: str | None = None, tokenizer=None) -> TransformerEncoder:
        """The view of ``prompt`` (the encoder's by default) for tokenising only, with ``tokenizer`` instead of the
        encoder's when given (a copy another thread uses); the backbone's mode is left as it was."""
        training = self.backbone.training
        view = copy.copy(self._view(prompt))
        self.backbone.train(training)
        if tokenizer is not None:
            view.tokenizer = tokenizer
        return view

    def tokenize(self, sentences: list[str], prompt: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded token ids and attention mask of ``sentences`` in ``prompt`` (the encoder's by default)."""
        view = self._view(prompt)
        return view.pad(view.tokenize(sentences, warn=False))  # training cuts at max_length

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt: str | None = None,
                use_head: bool = True, layers: list[int] | str | None = None, layer_pooler: str | None = None,
                frozen: bool = False, input_augment=None, mlm: bool = False, auxiliary: str | None = None,
                condition: torch.Tensor | None = None, pooled: bool = False):
        """Pooled vectors of a tokenized batch (through the head in training, and at test too when the checkpoint keeps
        it). Training calls
        this through the accelerate/DDP wrapper, so that gradients are synchronised across processes.

        With ``layers`` (hidden-state indices, 0 = embeddings, negative from the last; or ``"all"``) it returns
        ``(vectors, layer_vectors)``, the second of shape (batch, layers, dim), each layer pooled with
        ``layer_pooler`` (by default the one matching the encoder's pooler). ``frozen`` runs the frozen copy.
        ``input_augment`` maps the word embeddings (batch, tokens, dim; (1, tokens, dim) in a packed pass, the
        batch's real tokens) to what the encoder reads instead. ``mlm``
        returns the masked-LM head's logits of every token instead (batch, tokens, vocabulary); ``auxiliary`` runs that
        auxiliary model instead, on the tokens and the sentence vectors ``condition``. ``pooled`` (without ``layers``)
        returns ``(vectors, pooled)``, the second before the head."""
        if auxiliary is not None:
            device = next(self.backbone.parameters()).device
            return self.auxiliary[auxiliary](input_ids.to(device), attention_mask.to(device), condition)
        if mlm:
            device = next(self.backbone.parameters()).device
            if self.lm_head is None:
                raise ConfigError("an mlm view needs the model's LM head (load the encoder with lm_head)")
            states = self.view.run(self.backbone, input_ids.to(device), attention_mask.to(device))
            return self.lm_head(states.last_hidden_state)
        view = self._view(prompt)
        model = self.frozen if frozen else self.backbone
        if model is None:
            raise ConfigError("a frozen view needs the encoder's frozen copy (encoder.frozen in the method)")
        device = next(self.backbone.parameters()).device
        if frozen and next(model.parameters()).device != device:
            model.to(device)  # the frozen copy follows the backbone (it is not a submodule)
        # TransformerEncoder puts the backbone in eval mode; the frozen copy has dropout only in frozen_mode train
        model.train(self.training and (not frozen or self.frozen_mode == "train"))
        input_ids, attention_mask = (t.to(device, non_blocking=True) for t in (input_ids, attention_mask))
        if self.compiled is not None and self.training and not frozen:
            model = self.compiled
            input_ids, attention_mask = padded(input_ids, attention_mask, self.tokenizer.pad_token_id or 0,
                                               PAD_MULTIPLE, self.view.limit)
        use = self.head is not None and use_head and (self.training or self.head_at_test)
        # the view applies a head that goes before the denoising's subtraction; every other head is applied here
        inside = use and view.head_before_denoise
        if inside and (layers is not None or pooled):
            raise ConfigError("encoder.head_before_denoise: the head goes inside the denoising, so there is no "
                              "vector before it and no pooled layer through it; a loss that reads them does not go "
                              "with it")
        with torch.no_grad() if frozen else contextlib.nullcontext():
            result = view.forward_batch(input_ids, attention_mask, model=model, layers=layers,
                                        layer_pooler=layer_pooler, input_augment=input_augment,
                                        head=self.head if inside else None, packed=self.packing)
        vectors, stacked = ((result.float(), None) if isinstance(result, torch.Tensor)  # (a pair with layers)
                            else (result[0].float(), result[1].float()))
        head = self.head if use and not inside and self.head is not None else (lambda x: x)
        if layers is None:
            return (head(vectors), vectors) if pooled else head(vectors)
        return head(vectors), head(stacked)

    def empty(self) -> torch.Tensor:
        """The vectors of no sentence: zero rows, on the backbone's device, part of the graph."""
        parameter = next(self.backbone.parameters())
        if hasattr(parameter, "to_local"):  # a DTensor (FSDP): this process's shard, which may have no element
            return parameter.to_local().new_zeros((0, self.backbone.config.hidden_size)) * parameter.to_local().sum()
        return parameter.new_zeros((0, self.backbone.config.hidden_size)) * parameter.flatten()[0]

    def embed(self, sentences: list[str], prompt: str | None = None, use_head: bool = True, **options):
        """Pooled vectors of ``sentences``; ``prompt`` overrides the encoder's template for this call
        (e.g. the second view of a prompt-based positive pair); ``options`` as in :meth:`forward`."""
        return self(*self.tokenize(sentences, prompt), prompt=prompt, use_head=use_head, **options)


def padded(input_ids: torch.Tensor, attention_mask: torch.Tensor, pad_id: int, multiple: int, limit: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded rows widened with ``pad_id`` (attention 0) to the next multiple of ``multiple`` tokens, at most
    ``limit`` (the model's positions)."""
    width = input_ids.shape[1]
    target = min(-(-width // multiple) * multiple, max(limit, width))
    if target == width:
        return input_ids, attention_mask
    extra = target - width
    return (torch.nn.functional.pad(input_ids, (0, extra), value=pad_id),
            torch.nn.functional.pad(attention_mask, (0, extra), value=0))


def save_checkpoint(folder: str | os.PathLike, encoder: TrainingEncoder, info: CheckpointInfo) -> Path:
    """Write a self-describing checkpoint folder (see the module docstring); returns it. ``config.json`` holds the
    base's values of the dropout settings training changed (``encoder.model_config``: LLM2Vec's
    attention_dropout)."""
    from cselab.encoders.st_module import write_checkpoint  # sentence-transformers, when saving

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if encoder.adapter is not None:  # beside the merged model, the adapter as its library writes it
        encoder.adapter.save(encoder.backbone, str(folder / ADAPTER))
    return write_checkpoint(folder, encoder.checkpoint_view(), info, encoder.base_settings)
