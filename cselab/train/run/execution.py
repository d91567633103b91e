"""How a run's steps execute on its device (``training.prefetch``, ``compile``, ``cuda_graphs``, ``merge_passes``):
levers of speed that change no formula of the method. :func:`plan` decides each from the config and the device, as a
pure function, so that a run records what it did (``OUT/run.json``'s provenance) and says in one line why a lever it
would take (``auto``) is off. Asked for explicitly (``true``) where the method's step cannot take it, a lever is
refused before the model loads.

- compile: the backbone through ``torch.compile`` (its rows padded to a multiple of
  :data:`~cselab.train.config.sections.PAD_MULTIPLE` tokens, so that few shapes compile) and the losses' pure
  functions (:func:`cselab.train.plugins.functional.compiled`); the dev scorer and checkpoints use the plain model;
- CUDA graphs: the compiled backbone replayed as CUDA graphs (``mode="reduce-overhead"``), for a step whose
  backbone passes are its only work on the model;
- merged passes: views that differ only in column or prompt share one forward pass
  (:func:`cselab.train.objective.merged_passes`);
- packing: the sentence passes run padding-free, a batch's real tokens in one row (:mod:`cselab.encoders.packing`;
  the token-level passes of a loss, mlm's and mntp's, and PromptBERT's template passes stay padded), on any device
  where the backbone is not compiled (compiling wins: its rows are padded to few shapes, which CUDA graphs replay,
  where a packed row has a new length every batch). Its dropout draws the padded pass's masks, so a packed run is
  the padded run, seed for seed, up to rounding;
- the optimizer's update in fused kernels on a CUDA device (:class:`~cselab.train.run.optim.LegacyAdamW`'s exact
  update, torch's fused AdamW for ``optimizer: adamw``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cselab.errors import ConfigError
from cselab.registry import get
from cselab.train.config.method import MethodConfig
from cselab.train.config.schema import loss_plugin, named_models
from cselab.train.config.sections import AUTO
from cselab.train.plugins.kinds import NegativeSource
from cselab.train.sharding import Sharding
from cselab.train.sharding import check as check_sharding


@dataclass(frozen=True)
class Execution:
    """What :func:`plan` decided for a run on ``device`` (``cpu`` or ``cuda``); ``notes`` say why a lever left at
    ``auto`` is off where the device would take it."""

    device: str
    prefetch: int
    compile: bool
    cuda_graphs: bool
    merge_passes: bool
    fused_update: bool
    notes: tuple[str, ...] = field(default=())
    processes: int = 1
    sharding: Sharding | None = None  # FSDP2 (accelerate's FSDP config); None: each process holds the whole model
    packing: bool = False

    def describe(self) -> dict[str, Any]:
        """For ``OUT/run.json``'s provenance: each lever as decided, and the notes."""
        return {"device": self.device, "prefetch": self.prefetch, "compile": self.compile,
                "cuda_graphs": self.cuda_graphs, "merge_passes": self.merge_passes, "packing": self.packing,
                "fused_update": self.fused_update, "processes": self.processes,
                "sharding": self.sharding.describe() if self.sharding is not None else None, "notes": list(self.notes)}

    def line(self) -> str:
        """One line for the console."""
        taken = [f"batches tokenised {self.prefetch} ahead" if self.prefetch else "batches tokenised in the step",
                 *(["compiled"] if self.compile else []), *(["CUDA graphs"] if self.cuda_graphs else []),
                 *(["passes merged"] if self.merge_passes else []), *(["passes packed"] if self.packing else []),
                 *(["fused optimizer update"] if self.fused_update else []),
                 *([f"sharded over {self.processes} processes (FSDP2)"] if self.sharding is not None else [])]
        return f"training on {self.device}: {', '.join(taken)}" + "".join(f"; {note}" for note in self.notes)


def compile_blocker(method: MethodConfig, sharded: bool = False) -> str | None:
    """Why the method's backbone cannot be compiled, or None."""
    if sharded:
        return "FSDP shards the backbone (a compiled sharded backbone is not wired yet)"
    if method.encoder.adapter is not None:
        return "an adapter (peft) wraps the backbone"
    if method.training.gradient_checkpointing:
        return "gradient checkpointing recomputes the backbone's layers"
    if method.training.packing is True:
        return "training.packing is true (a packed row has a new length every batch)"
    for name, view in method.views.items():
        if view.augment is not None and not view.of:
            return f"views.{name}'s input augment runs as a hook inside the backbone"
    return None


def graph_blocker(method: MethodConfig, processes: int) -> str | None:
    """Why the method's step cannot replay the backbone as CUDA graphs (it does other work on the model, or keeps
    the backbone's outputs past the step), or None."""
    if processes > 1:
        return "several processes (DDP) synchronise inside the backward pass"
    if method.hooks.get("weights") is not None:
        return "SAM/AWP take a second pass at perturbed weights"
    if method.training.mini_batch_size is not None:
        return "cached InfoNCE replays mini-batches"
    if method.encoder.denoise:
        return "PromptBERT's template passes vary in shape with the sentences' lengths"
    if method.encoder.frozen is not None:
        return "a frozen or momentum copy (a teacher) runs beside the backbone"
    for name, view in method.views.items():
        if view.augment is not None:
            return f"views.{name}'s augment takes a pass of its own"
        if view.tokens is not None:
            return f"views.{name}'s token augment makes rows of random lengths"
    for name, params in method.losses.items():
        plugin = loss_plugin(name, params)
        cls = plugin.cls
        if cls.needs_tokens or cls.needs_lm_head:
            return f"losses.{name} runs the model on inputs of its own"
        if named_models(plugin, params):
            return f"losses.{name} runs a model of its own"
        generated = params.get("generated")
        if generated and get("negatives", generated["kind"]).cls.remember is not NegativeSource.remember:
            return f"losses.{name}'s generated negatives keep a memory of past batches"
    return None


def packing_blocker(method: MethodConfig, compiled: bool, model_blocker: str | None = None) -> str | None:
    """Why the method's sentence passes cannot run packed (``compiled``: its backbone is; ``model_blocker``: why the
    base model's cannot, :func:`cselab.encoders.packing.config_refusal`), or None."""
    if compiled:
        return "the compiled backbone takes rows padded to few shapes"
    for name, view in method.views.items():
        if view.augment is not None and not view.of and not get("input_augment", view.augment["kind"]).cls.per_token:
            return (f"views.{name}'s input augment ({view.augment['kind']}) draws along a row's tokens, and a packed "
                    "pass has one row")
    return model_blocker


def _decided(value: bool | str, device_allows: bool, blocker: str | None, lever: str, key: str) -> tuple[bool, str]:
    """A lever's value (``auto``, True or False) on this device: on or off, and a note where ``auto`` leaves it off
    on a device that would take it; True where the method cannot is refused."""
    if value is False:
        return False, ""
    if blocker is not None:
        if value is True:
            raise ConfigError(f"training.{key}: true, and {lever} cannot be used here: {blocker}; set it to auto or "
                              "false")
        return False, f"{lever} off: {blocker}" if device_allows else ""
    return (True, "") if value is True or device_allows else (False, "")


def plan(method: MethodConfig, device: str, processes: int = 1, sharding: Sharding | None = None,
         model_blocker: str | None = None) -> Execution:
    """The levers a run of ``method`` on ``device`` (its type: ``cpu``, ``cuda``) over ``processes`` takes, its
    weights sharded as ``sharding`` says (FSDP2; a method that cannot is refused, :func:`~cselab.train.sharding.
    check`); ``model_blocker``: why the base model's passes cannot be packed, read from its config (None: they
    can)."""
    cfg, cuda = method.training, device == "cuda"
    if sharding is not None:
        check_sharding(method)
    compiled, compile_note = _decided(cfg.compile, cuda, compile_blocker(method, sharding is not None), "compile",
                                      "compile")
    graphs_blocker = ("CUDA graphs need a CUDA device" if not cuda else
                      "the backbone is not compiled" if not compiled else graph_blocker(method, processes))
    graphs, graphs_note = _decided(cfg.cuda_graphs, cuda and compiled, graphs_blocker, "CUDA graphs", "cuda_graphs")
    merged = cfg.merge_passes is True or (cfg.merge_passes == AUTO and cuda)
    packed, packing_note = _decided(cfg.packing, True, packing_blocker(method, compiled, model_blocker), "packing",
                                    "packing")
    return Execution(device, cfg.prefetch, compiled, graphs, merged, cuda,
                     tuple(note for note in (compile_note, graphs_note, packing_note) if note), processes, sharding,
                     packed)
