"""Everything a training step needs, built from a method: the training encoder, the objective, the optimizer and its
schedule, the batches and the dev set (:func:`setup`). Nothing here writes a file or reads the data: the trainer
(:mod:`cselab.train.recipe`) hands it the rows, wraps the parts for its devices and owns the run folder;
``benchmarks/gpu_check.py`` and the tests build their steps with the same function."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from accelerate.utils import set_seed
from torch.utils.data import DataLoader

from cselab.encoders import packing
from cselab.errors import ConfigError, TrainingError
from cselab.probes.dev import DevSet, dev_set
from cselab.train.config.method import MethodConfig
from cselab.train.config.schema import loss_plugin
from cselab.train.config.sections import TrainingConfig
from cselab.train.model import TrainingEncoder
from cselab.train.objective import Objective
from cselab.train.plugins.kinds import Loss
from cselab.train import sharding
from cselab.train.run.execution import Execution, plan
from cselab.train.run.optim import build_optimizer, build_scheduler
from cselab.train.batches import Collator, Key, training_loader
from cselab.train.step import Step
from cselab.train.token_ids import TokenIds

TokenIdsMaker = Callable[[TrainingEncoder, Objective], dict[Key, TokenIds]]


def build_encoder(method: MethodConfig, model: str) -> TrainingEncoder:
    """The method's training encoder over the backbone ``model`` (a folder or a hub name), with the model's
    language-model head when a loss needs it (one kind of head: masked or causal)."""
    heads = {name: loss_plugin(name, params).cls.needs_lm_head for name, params in method.losses.items()}
    kinds = sorted({kind for kind in heads.values() if kind})
    if len(kinds) > 1:
        raise ConfigError(f"losses: {', '.join(name for name, kind in heads.items() if kind)} need a masked and a "
                          "causal language-model head; one encoder has one")
    return TrainingEncoder.from_pretrained(model, method.training.max_length, lm_head=kinds[0] if kinds else None,
                                           **method.to_dict()["encoder"])


def attach_auxiliary(encoder: TrainingEncoder, objective: Objective) -> None:
    """Load each loss's own models for ``encoder``; a trained one joins it as ``encoder.auxiliary[LOSS]`` (so that
    the optimizer, DDP and ``OUT/last`` hold it, and a checkpoint does not)."""
    for name, loss in zip(objective.names, objective.losses, strict=True):
        plugin = cast(Loss, loss)  # the objective's ModuleList holds Loss modules
        module = plugin.auxiliary(encoder)
        if module is not None:
            encoder.auxiliary[name] = module
            plugin.attached = name


def initial_weights(encoder: TrainingEncoder) -> list[torch.Tensor]:
    """The backbone's initial weights for ``recall``: the frozen copy's when it has full precision and stays the
    initial backbone (no momentum; no second copy), else a snapshot."""
    if encoder.frozen is not None and encoder.momentum is None and \
            next(encoder.frozen.parameters()).dtype == torch.float32:
        return list(encoder.frozen.parameters())
    return [p.detach().clone() for p in encoder.backbone.parameters()]


def step_counts(rows: int, cfg: TrainingConfig, where: str) -> tuple[int, int]:
    """Batches per epoch and the run's optimizer steps for ``rows`` rows (``where`` names them in the error)."""
    per_epoch = rows // cfg.batch_size
    if per_epoch < cfg.grad_accum:
        raise TrainingError(f"{where}: {rows} rows, fewer than one step of {cfg.grad_accum} batch(es) of "
                            f"{cfg.batch_size}")
    total = per_epoch * cfg.epochs // cfg.grad_accum
    return per_epoch, total if cfg.max_steps is None else min(cfg.max_steps, total)


def check_hooks(objective: Objective, cfg: TrainingConfig, processes: int) -> None:
    """Refuse what the step cannot do yet: a second pass per step on several processes, SAM/AWP over accumulation."""
    if (objective.weight_hook is not None or objective.gradient_views) and processes > 1:
        raise TrainingError("FGSM views and SAM/AWP take a second pass per step that is not synchronised across "
                            "processes yet: train them on one device")
    if objective.weight_hook is not None and cfg.grad_accum > 1:
        raise TrainingError("hooks.weights (SAM/AWP) perturbs the weights once per step: set training.grad_accum=1")


def checkpoint_activations(backbone, model: str, packed: bool = False) -> None:
    """``training.gradient_checkpointing``: the backbone recomputes its layers' activations in the backward pass
    (transformers' non-reentrant checkpointing, which replays each layer's dropout masks); a model that cannot is
    refused. With ``packed`` passes a layer is recomputed with the attention its pass ran."""
    if not getattr(backbone, "supports_gradient_checkpointing", False):
        raise TrainingError(f"training.gradient_checkpointing: {model} ({type(backbone).__name__}) does not support "
                            "gradient checkpointing")
    options: dict[str, Any] = {"use_reentrant": False}
    if packed:
        options["context_fn"] = packing.checkpoint_contexts(backbone.config)
    enable = getattr(backbone, "activation_checkpointing_enable", None)  # transformers >= 5.x's name
    if enable is not None:
        enable(activation_checkpointing_kwargs=options)
    else:
        backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)


def check_packing(encoder: TrainingEncoder, cfg: TrainingConfig) -> None:
    """Refuse packed passes the loaded backbone cannot take (its attention, its layers: what its config did not
    say), whether ``training.packing`` is true or auto; otherwise the encoder's sentence passes run packed."""
    why = packing.refusal(encoder.backbone)
    if why is not None:
        raise ConfigError(f"training.packing: {str(cfg.packing).lower()}, and packing cannot be used here: {why}; "
                          "set it to false")
    encoder.packing = True


def check_matryoshka(objective: Objective, encoder: TrainingEncoder) -> None:
    """Refuse a Matryoshka width wider than the encoder's vectors."""
    width = encoder.backbone.config.hidden_size
    for name, spec in objective.matryoshka.items():
        if spec and max(spec["dims"]) > width:
            raise TrainingError(f"losses.{name}.matryoshka.dims: {max(spec['dims'])} is wider than the model's "
                                f"vectors ({width})")


@dataclass
class TrainingSetup:
    """A method's training parts, unwrapped (the trainer hands ``encoder``, ``optimizer`` and ``loader`` to
    accelerate). ``initial`` is the backbone's initial weights where a loss reads them (``recall``)."""

    cfg: TrainingConfig
    objective: Objective
    encoder: TrainingEncoder
    optimizer: torch.optim.Optimizer
    scheduler: Any
    loader: DataLoader
    collator: Collator
    dev: DevSet | None
    per_epoch: int
    total: int
    initial: list[torch.Tensor] | None
    execution: Execution
    skeleton: torch.nn.Module | None = None  # sharded (FSDP2): the encoder's plain copy, on the meta device

    @property
    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.encoder.parameters() if p.requires_grad]

    def initial_weights(self) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """What ``recall`` compares: the backbone's weights now and at the start (moved to the backbone's device
        once, the first time the backbone is found there)."""
        current = list(self.encoder.backbone.parameters())
        if self.initial and self.initial[0].device != current[0].device:
            self.initial = [tensor.to(current[0].device) for tensor in self.initial]
        return current, self.initial

    def step(self, model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
             accelerator: Any = None, scheduler: Any = None) -> Step:
        """The method's :class:`~cselab.train.step.Step` over ``model`` and ``optimizer`` (accelerate's wrappers in
        the trainer; by default the unwrapped encoder and optimizer), with ``accelerator``'s backward, clipping and
        accumulation where one is given, this setup's trainable weights and execution, and its schedule (or
        ``scheduler``: a benchmark's constant rate)."""
        cfg, execution = self.cfg, self.execution
        accelerated = {} if accelerator is None else {
            "backward": accelerator.backward, "clip": accelerator.clip_grad_norm_,
            "accumulate": lambda: accelerator.accumulate(model)}
        return Step(model if model is not None else self.encoder, self.objective, optimizer or self.optimizer,
                    scheduler or self.scheduler, self.trainable, max_grad_norm=cfg.max_grad_norm,
                    mini_batch_size=cfg.mini_batch_size, initial_weights=self.initial_weights, encoder=self.encoder,
                    compile=execution.compile, cuda_graphs=execution.cuda_graphs, **accelerated)


def setup(method: MethodConfig, model: str, rows, where: str = "the training data", processes: int = 1,
          data_dir: str | os.PathLike | None = None, eval_limit: int | None = None,
          execution: Execution | None = None, token_ids: TokenIdsMaker | None = None) -> TrainingSetup:
    """``method``'s training parts over the backbone ``model`` and the training ``rows`` (``where`` names them in an
    error), for ``processes`` processes; seeded with ``training.seed`` first, so that the same method builds the same
    initial weights. The dev set (``training.dev`` over ``data_dir``, ``eval_limit`` pairs, :mod:`cselab.probes.dev`)
    reads its data when it first runs. ``execution``: how the steps execute (:func:`~cselab.train.run.execution.plan`;
    by default, on the CPU). ``token_ids(encoder, objective)``: the rows' token ids made once
    (:mod:`cselab.train.token_ids`; the trainer's, which keeps them on disk), which batches then pad; without it each
    batch is tokenised."""
    cfg = method.training
    execution = execution or plan(method, "cpu", processes)
    set_seed(cfg.seed)
    objective = Objective(method, merge=execution.merge_passes)
    check_hooks(objective, cfg, processes)
    per_epoch, total = step_counts(len(rows), cfg, where)
    encoder = build_encoder(method, model)
    if execution.packing:
        check_packing(encoder, cfg)
    if cfg.gradient_checkpointing:
        checkpoint_activations(encoder.backbone, model, execution.packing)
    check_matryoshka(objective, encoder)
    attach_auxiliary(encoder, objective)
    initial = initial_weights(encoder) if objective.needs_initial_weights else None
    skeleton = sharded(encoder, execution)
    optimizer = build_optimizer([(n, p) for n, p in encoder.named_parameters() if p.requires_grad], cfg,
                                execution.fused_update)
    if execution.compile:
        encoder.compile_backbone(execution.cuda_graphs)
    reached = -(-total * cfg.grad_accum // per_epoch)  # the epochs the run's steps reach (the last maybe in part)
    ahead = execution.prefetch > 0
    collator = Collator(encoder, objective.forward_keys, objective.texts, own_tokenizer=ahead,
                        pin=ahead and execution.device == "cuda",
                        ids=token_ids(encoder, objective) if token_ids is not None else None)
    loader = training_loader(rows, cfg, objective.forward_keys, reached, objective.texts)
    return TrainingSetup(cfg, objective, encoder, optimizer, build_scheduler(optimizer, cfg, total), loader, collator,
                         dev_set(cfg.dev, data_dir, eval_limit), per_epoch, total, initial, execution, skeleton)


def sharded(encoder: TrainingEncoder, execution: Execution) -> torch.nn.Module | None:
    """With ``execution.sharding`` (FSDP2), shard ``encoder`` in place over the processes (before the optimizer is
    built on its sharded weights); returns its plain copy on the meta device, which checkpoints fill (None
    otherwise)."""
    if execution.sharding is None:
        return None
    skeleton = sharding.plain_copy(encoder)
    device = torch.device("cuda", torch.cuda.current_device()) if execution.device == "cuda" else torch.device("cpu")
    sharding.shard(encoder, execution.sharding, device)
    return skeleton
