"""FSDP2: the training encoder's weights, gradients and optimizer state sharded across the processes
(``torch.distributed.fsdp.fully_shard``), asked for the way accelerate asks: ``accelerate launch --use_fsdp
--fsdp_version 2 ...`` or an accelerate config file with ``distributed_type: FSDP`` and ``fsdp_config: {fsdp_version:
2}``, both of which reach the processes as accelerate's environment variables (``ACCELERATE_USE_FSDP``,
``FSDP_*``), read here with accelerate's own :class:`~accelerate.utils.FullyShardedDataParallelPlugin`.

cselab shards the encoder itself rather than through ``accelerator.prepare``: accelerate turns FSDP on only for GPU
(and similar) devices, and leaves a CPU run over gloo as plain DDP without a word; its wrapping would also shard the
encoder as one block, which the dev scorer (the backbone alone) cannot run. Here each transformer layer (the
backbone's ``_no_split_modules``, or accelerate's ``fsdp_transformer_layer_cls_to_wrap``), the backbone, a head kept
at test and then the whole encoder are each a ``fully_shard`` unit, on every device: a run over two CPU processes
takes the same path as one over eight GPUs. The batches are split across the processes as with DDP
(:mod:`cselab.train.distributed` gathers the in-batch negatives), so a sharded run trains the same weights as one
process: sharding is how a run executes, recorded in ``OUT/run.json``'s provenance, not part of its identity.

Saves gather the shards: ``OUT/last`` and ``OUT/best`` hold full (unsharded) tensors in the files a one-process run
writes, so a checkpoint loads as any other and a run resumes under another sharding or process count. The dev scorer
runs on every process (each layer gathered in turn), its score the main process's.

Settings of accelerate's FSDP config that cselab does not apply are refused in one line (:func:`requested`), and so
are methods whose step reads the weights outside the encoder's forward pass (:func:`blocker`).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cselab.errors import ConfigError, TrainingError
from cselab.train.config.schema import loss_plugin
from cselab.train.model import TrainingEncoder

FSDP_VARIABLE = "ACCELERATE_USE_FSDP"


@dataclass(frozen=True)
class Sharding:
    """What a sharded run applies: ``layers`` (class names made units of their own; empty: the backbone's
    ``_no_split_modules``) and ``reshard_after_forward`` (free each unit's gathered weights after its forward pass)."""

    layers: tuple[str, ...] = ()
    reshard_after_forward: bool = True

    def describe(self) -> dict[str, Any]:
        return {"kind": "fsdp2", "layers": list(self.layers), "reshard_after_forward": self.reshard_after_forward}


def _flag(name: str) -> bool:
    return os.environ.get(name, "false").strip().lower() in ("1", "true", "yes")


def requested() -> Sharding | None:
    """The FSDP run accelerate's settings (its environment) ask for; None without FSDP. FSDP1, and settings cselab
    does not apply (CPU offload, accelerate's activation checkpointing, a size-based wrap, RAM-efficient loading), are
    refused in one line naming the setting."""
    if not _flag(FSDP_VARIABLE):
        return None
    from accelerate.utils import FullyShardedDataParallelPlugin

    with _fsdp_variable(True):
        plugin = FullyShardedDataParallelPlugin()
    where = "accelerate's FSDP config"
    if plugin.fsdp_version != 2:
        raise TrainingError(f"{where}: fsdp_version {plugin.fsdp_version}; cselab shards with FSDP2 only: set "
                            "fsdp_version: 2 (accelerate launch --fsdp_version 2)")
    refused = {"fsdp_offload_params (CPU offload)": getattr(plugin.cpu_offload, "offload_params", False)
               or type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy",
               "fsdp_activation_checkpointing (use training.gradient_checkpointing)": plugin.activation_checkpointing,
               "fsdp_cpu_ram_efficient_loading": plugin.cpu_ram_efficient_loading,
               "fsdp_auto_wrap_policy SIZE_BASED_WRAP (cselab wraps transformer layers)":
                   os.environ.get("FSDP_AUTO_WRAP_POLICY", "").upper() == "SIZE_BASED_WRAP"}
    for setting, on in refused.items():
        if on:
            raise TrainingError(f"{where}: {setting} is not applied by cselab's FSDP2 training; leave it out")
    return Sharding(tuple(plugin.transformer_cls_names_to_wrap or ()), bool(plugin.reshard_after_forward))


@contextlib.contextmanager
def _fsdp_variable(on: bool) -> Iterator[None]:
    """accelerate's FSDP variable set to ``on`` inside (restored after)."""
    before = os.environ.get(FSDP_VARIABLE)
    os.environ[FSDP_VARIABLE] = "true" if on else "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FSDP_VARIABLE, None)
        else:
            os.environ[FSDP_VARIABLE] = before


def without_accelerate_fsdp():
    """Around the Accelerator's construction: accelerate's own FSDP off (cselab shards; see the module docstring)."""
    return _fsdp_variable(False)


def blocker(method) -> str | None:
    """Why ``method``'s step cannot run sharded, or None: what reads or moves the weights outside the encoder's
    forward pass (where FSDP gathers them) would see one process's shard."""
    cfg, encoder = method.training, method.encoder
    if method.hooks.get("weights") is not None:
        return "hooks.weights (SAM/AWP) moves the weights in place between two passes of a step"
    if encoder.adapter is not None:
        return "encoder.adapter (peft) keeps its own trained weights beside the frozen base"
    if encoder.frozen is not None and encoder.momentum is not None:
        return ("encoder.momentum: the momentum copy follows the backbone's weights outside its forward pass (a "
                "whole copy on every process)")
    if cfg.mixed_precision != "no":
        return f"training.mixed_precision {cfg.mixed_precision}: FSDP2's own mixed precision is not wired yet"
    for name, params in method.losses.items():
        cls = loss_plugin(name, params).cls
        if cls.needs_initial_weights:
            return f"losses.{name} compares the backbone's weights with its initial ones outside the forward pass"
        if cls.needs_tokens or cls.needs_lm_head:  # each pass of a sharded model is a collective of all processes
            return (f"losses.{name} runs the model on inputs of its own, a pass the processes may not all take "
                    "(each pass of a sharded model gathers the weights from every process)")
    return None


def check(method) -> None:
    """Refuse, in one line, a method that cannot train sharded (:func:`blocker`)."""
    reason = blocker(method)
    if reason is not None:
        raise ConfigError(f"{method.name} cannot train with FSDP (accelerate's distributed_type: FSDP): {reason}; "
                          "train it with DDP (accelerate launch --multi_gpu) or on one device")


def _units(encoder: TrainingEncoder, sharding: Sharding) -> list[nn.Module]:
    """The modules made ``fully_shard`` units before the encoder itself, innermost first."""
    backbone = encoder.backbone
    names = set(sharding.layers or getattr(backbone, "_no_split_modules", None) or ())
    if not names:
        raise TrainingError(f"FSDP: {type(backbone).__name__} names no transformer layer class (_no_split_modules); "
                            "set fsdp_transformer_layer_cls_to_wrap in accelerate's FSDP config")
    layers = [module for module in backbone.modules() if type(module).__name__ in names]
    if not layers:
        raise TrainingError(f"FSDP: no module of {type(backbone).__name__} is a {', '.join(sorted(names))} "
                            "(fsdp_transformer_layer_cls_to_wrap)")
    head = encoder.head
    return [*layers, backbone, *([head] if head is not None and encoder.head_at_test else [])]


def shard(encoder: TrainingEncoder, sharding: Sharding, device: torch.device) -> None:
    """Shard ``encoder`` in place over every process (one mesh, on ``device``): each transformer layer, the
    backbone, a head kept at test, then the encoder (the root, initialised at once so that the dev scorer's pass of
    the backbone alone finds it so)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    from cselab.train.distributed import world_size

    mesh = init_device_mesh(device.type, (world_size(),))
    for unit in _units(encoder, sharding):
        fully_shard(unit, mesh=mesh, reshard_after_forward=sharding.reshard_after_forward)
    fully_shard(encoder, mesh=mesh, reshard_after_forward=sharding.reshard_after_forward)
    assert isinstance(encoder, FSDPModule)
    encoder._get_fsdp_state()._lazy_init()  # the root before any pass: the dev scorer may run the backbone first


def _full(value: Any, keep: bool) -> Any:
    """A DTensor gathered whole (every process takes part), on the CPU where ``keep``; other values as they are."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        whole = value.full_tensor()
        return whole.cpu() if keep else None
    if isinstance(value, torch.Tensor):
        return value.detach().cpu() if keep else None
    return value


def full_model_state(module: nn.Module, keep: bool) -> dict[str, torch.Tensor]:
    """``module``'s state dict with every shard gathered (every process calls it; one tensor at a time); the main
    process (``keep``) gets the tensors on the CPU, the others an empty dict."""
    gathered = {name: _full(value, keep) for name, value in module.state_dict().items()}
    return gathered if keep else {}


def full_optimizer_state(optimizer: torch.optim.Optimizer, keep: bool) -> dict[str, Any]:
    """The optimizer's ``state_dict`` with its moments gathered: the file a one-process run writes (every process
    calls it)."""
    saved = optimizer.state_dict()
    state = {index: {key: _full(value, keep) for key, value in entry.items()}
             for index, entry in saved["state"].items()}
    return {"state": state, "param_groups": saved["param_groups"]} if keep else {}


def _like(full: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``full`` sharded as ``reference`` is (a DTensor), or as it is."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(reference, DTensor):
        return distribute_tensor(full.to(reference.device, reference.dtype), reference.device_mesh,
                                 reference.placements)
    return full


def load_full_model_state(module: nn.Module, full: dict[str, torch.Tensor]) -> None:
    """Full tensors (every process holds them) into the sharded ``module``, each cut to this process's shard."""
    own = module.state_dict()
    missing, unexpected = sorted(own.keys() - full.keys()), sorted(full.keys() - own.keys())
    if missing or unexpected:
        raise TrainingError(f"the saved weights do not fit the model: missing {missing[:3]}, unexpected "
                            f"{unexpected[:3]}")
    module.load_state_dict({name: _like(full[name], own[name]) for name in own})


def shard_optimizer_state(optimizer: torch.optim.Optimizer, full: dict[str, Any]) -> dict[str, Any]:
    """A one-process optimizer state (full moments) with each moment cut to its parameter's shard."""
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    state = {index: {key: _like(value, parameters[int(index)]) if isinstance(value, torch.Tensor)
                     and value.dim() > 0 else value for key, value in entry.items()}
             for index, entry in full["state"].items()}
    return {**full, "state": state}


def plain_copy(encoder: nn.Module) -> nn.Module:
    """Before sharding: a copy of ``encoder`` on the meta device (no memory), made whole again by :func:`filled`."""
    # a frozen copy (not a submodule, not trained) is not part of a checkpoint: left out of the copy
    skeleton = copy.deepcopy(encoder, {id(encoder.__dict__.get("frozen")): None}).to("meta")
    skeleton.__dict__["_buffers_kept"] = {name: buffer.detach().clone() for name, buffer in encoder.named_buffers()}
    return skeleton


def filled(skeleton: nn.Module, full: dict[str, torch.Tensor]) -> nn.Module:
    """A plain (unsharded) encoder on the CPU from the ``skeleton`` and gathered weights: what a checkpoint saves."""
    whole = copy.deepcopy(skeleton)
    whole.load_state_dict(full, assign=True)  # the gathered tensors themselves: no second copy
    for name, buffer in skeleton.__dict__["_buffers_kept"].items():  # non-persistent buffers (position ids)
        owner, _, leaf = name.rpartition(".")
        whole.get_submodule(owner)._buffers[leaf] = buffer.clone()
    return whole.eval()
