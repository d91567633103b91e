"""The training recipe: a method (:mod:`cselab.train.config.methods`) trained on the augment cache, written to ``OUT``,
read top to bottom as the run goes.

1. :func:`train`: ``OUT`` checked, the accelerator launched (:mod:`~cselab.train.run.launch`: one CPU or GPU, or
   several GPUs with ``accelerate launch``; bf16/fp16 with ``mixed_precision``), ``OUT`` locked.
2. **Setup** (:func:`start`, then :class:`Trainer`): ``OUT`` opened (:mod:`cselab.train.out`: is it this run?), the
   parts built (:func:`~cselab.train.run.setup.setup`: encoder, objective, optimizer, batches, dev set) and wrapped
   for the devices, ``OUT/last`` resumed.
3. **The loop** (:meth:`Trainer.run`): optimizer steps, each a :class:`~cselab.train.step.Step` over ``grad_accum``
   batches, tokenised ``training.prefetch`` ahead; nothing is read back from the device in a step (a loss that is not
   finite is watched for there, :class:`~cselab.train.step.divergence.Divergence`).
4. **After each step** the callbacks decide (:mod:`~cselab.train.run.callbacks`): log, evaluate, save, stop.
5. **Evaluate and save** (:meth:`Trainer.evaluate_and_save`): the dev set ``training.dev`` names (a probe suite on
   its dev split, :mod:`cselab.probes.dev`; with ``none`` every evaluation is the best), the best checkpoint kept in
   ``OUT/best`` with its model card, the full state in ``OUT/last``, which a run started again on ``OUT`` resumes
   from (:mod:`cselab.train.out.checkpoint`).
6. **Finish**: the trackers ended, the process group closed, the run's summary returned.

A NaN or infinite loss stops the run, naming the step. ``OUT/log.jsonl`` (and a tracker) has a line per logged step
(the loss, its parts, the gradient norm before clipping, the learning rate), evaluation, stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, set_seed

from cselab.boundary import calling, note
from cselab.encoders.checkpoint import CheckpointInfo
from cselab.encoders.loading import after_pooling, model_folder
from cselab.encoders.packing import config_refusal
from cselab.encoders.pretrained import auto_config, check_max_length, weight_files
from cselab.encoders.specs import hub_name
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import TrainingError
from cselab.probes.dev import NONE, log_key
from cselab.files import check_folder, kept_only_if_written
from cselab.progress import Progress
from cselab.provenance import provenance
from cselab.registry import build_plugin
from cselab.train import sharding
from cselab.train.batches import Ahead, Batch
from cselab.train.config.method import MethodConfig, with_data
from cselab.train.model import TrainingEncoder
from cselab.train.objective import Objective
from cselab.train.out import folder as run_folder
from cselab.train.out.card import base_license, model_card
from cselab.train.out.checkpoint import Checkpoints
from cselab.train.run.callbacks import EarlyStop, Schedule, TrainerControl, TrainerState, stateful
from cselab.train.run.data import training_rows
from cselab.train.run.execution import plan
from cselab.train.run.launch import launch, start_trackers
from cselab.train.run.optim import set_schedule_step
from cselab.train.run.options import RunOptions
from cselab.train.run.setup import TokenIdsMaker, TrainingSetup, setup
from cselab.train.step import StepLosses
from cselab.train.step.divergence import Diverged, Divergence
from cselab.train.token_ids import ids_root, run_ids

logger = logging.getLogger(__name__)
NOT_LOGGED = ("seconds", "saved", "reason")  # log.jsonl's words and timings, not a tracker's figures


def train(method: MethodConfig, model: str, data: str | os.PathLike | None, out: str | os.PathLike,
          options: RunOptions | None = None) -> dict[str, Any]:
    """Train ``model`` with ``method`` on ``data`` (see :func:`cselab.train.run.data.training_rows`; None: the
    method's own ``data``, else ``cache/augment``); returns its summary. ``--method OUT/config.yaml`` repeats it.

    ``training.batch_size`` rows make one contrastive batch (its in-batch negatives), split across processes when
    there are several; ``grad_accum`` batches make one optimizer step, which ``max_steps``, ``eval_steps`` and the
    learning-rate schedule count.

    ``OUT`` is locked while the run writes it; on an existing ``OUT`` the run continues only the same run (same
    config, data, base model, cselab version; :mod:`cselab.train.out.folder`), from ``OUT/last`` once every file
    there is verified (:mod:`cselab.train.out.state`). How the run is carried out (the data root, the dev pairs,
    logging, trackers, overwriting, a restart, callbacks) is ``options``
    (:class:`~cselab.train.run.options.RunOptions`)."""
    options = options or RunOptions()
    out = check_folder(out, inputs=(model, data))  # never the model's or the data's own folder
    method = with_data(method, data)  # OUT/config.yaml and the checkpoints say what the run trains on
    data = None if data is None else method.data  # as OUT/config.yaml has it: --method OUT/config.yaml is this run
    first = os.environ.get("RANK", "0") == "0"  # one process of several may remove OUT
    with kept_only_if_written(out) if first else contextlib.nullcontext():  # refused before a save: no empty OUT
        return _train(method, model, data, out, options)


def _train(method: MethodConfig, model: str, data: str | os.PathLike | None, out: Path, options: RunOptions
           ) -> dict[str, Any]:
    accelerator = launch(method.training, out, options.report_to)
    main = accelerator.is_main_process  # one process locks OUT (and overwrites it)
    with run_folder.RunLock(out) if main else contextlib.nullcontext():
        if options.overwrite and main:
            run_folder.overwrite(out)
        with run_folder.forgotten_unless_saved(out) if main else contextlib.nullcontext():  # refused before a step
            started = start(accelerator, method, model, data, out, options)
            try:
                trainer = Trainer(accelerator, method, model, out, started, options)
            except BaseException:
                if options.reporting:  # started by start(); the run ends them once it runs
                    accelerator.end_training()
                raise
        return trainer.run(options.progress)


# ---- setup: OUT opened and the parts built, all the file work before a step -------------------------------------

@dataclass
class Started:
    """What :func:`start` found and built: the parts, the data's description, the saves and what to resume."""

    parts: TrainingSetup
    source: dict[str, Any]
    checkpoints: Checkpoints
    last: Path | None  # OUT/last, verified; None: nothing to resume
    counters: dict[str, Any] | None
    facts: dict[str, Any]  # the run's identity and provenance (OUT/run.json) and its data source: the model card's
    base_normalizes: bool = False  # the base model ends in Normalize: so does every checkpoint of the run


def start(accelerator: Accelerator, method: MethodConfig, model: str, data, out: Path, options: RunOptions
          ) -> Started:
    """Open ``out`` for a run of ``method`` from ``model`` on ``data`` as ``options`` say: the training rows read, the
    base model's length and weights checked, the run's identity checked against ``OUT`` (or written there, with the
    config), what a killed save left removed, ``OUT/last`` verified, the parts set up. A different run already there is
    refused before a model loads, and so is a tracker that cannot start."""
    data_dir, eval_limit, reporting = options.data_dir, options.eval_limit, options.reporting
    out.mkdir(parents=True, exist_ok=True)
    rows, source = training_rows(method, data, data_dir)
    check_max_length(str(model), method.training.max_length, "training.max_length")  # before OUT records the run
    for name, view in method.views.items():  # a token augment lengthens a row (word repetition)
        if view.tokens is not None:
            check_max_length(str(model), build_plugin("token_augment", view.tokens).longest(
                method.training.max_length), f"views.{name}.tokens (training.max_length, lengthened)")
    weights = weight_files(str(model))
    normalizes = base_normalizes(str(model))
    # a lever it cannot take, a method that cannot train sharded: refused
    execution = plan(method, accelerator.device.type, accelerator.num_processes, sharding.requested(),
                     config_refusal(auto_config(str(model))))
    mine = run_folder.run_identity(method, model, source, data_dir, eval_limit, weights)
    made = {**provenance(str(accelerator.device), weights), "execution": execution.describe()}
    run_folder.check_or_write(out, mine, method.to_dict(), write=accelerator.is_main_process, provenance=made)
    checkpoints = Checkpoints(out, accelerator)
    checkpoints.remove_partials()
    last, counters = (None, None) if options.restart_from == "best" else checkpoints.verified_last()
    if reporting:
        start_trackers(accelerator, method.to_dict(), mine, out)
    try:
        parts = setup(method, str(model), rows, source.get("path") or source.get("name"), accelerator.num_processes,
                      data_dir, eval_limit, execution, token_ids_of(accelerator, method, rows, source))
    except BaseException:
        if reporting:
            accelerator.end_training()
        raise
    return Started(parts, source, checkpoints, last, counters, {"identity": mine, "provenance": made, "source": source,
                                                               "base_license": base_license(model_folder(str(model)))},
                   normalizes)


def base_normalizes(model: str) -> bool:
    """Whether the base model's vectors are normalised after pooling (its sentence-transformers Normalize module,
    kept in the run's checkpoints: cosine is unchanged, a dot product sees unit vectors as with the base). Other
    modules after pooling (a Dense) are not trained or kept; a warning names them."""
    modules = after_pooling(model)
    dropped = [name for name in modules if name != "Normalize"]
    if dropped:
        logger.warning("%s: its module(s) after pooling (%s) are not part of cselab's training; the run's "
                       "checkpoints end at the pooler%s, so their vectors are not in the base model's output space",
                       model, ", ".join(dropped), " and Normalize" if "Normalize" in modules else "")
    return "Normalize" in modules


def token_ids_of(accelerator: Accelerator, method: MethodConfig, rows, source: dict[str, Any]) -> TokenIdsMaker:
    """How the run's token ids are made (:mod:`cselab.train.token_ids`): by the main process first, kept under
    the data's ids folder, which the others then read."""
    def make(encoder: TrainingEncoder, objective: Objective):
        with accelerator.main_process_first():
            return run_ids(encoder, objective.forward_keys, objective.texts, dict(method.texts or {}), rows,
                           ids_root(source))
    return make


class Trainer:
    """One run over ``OUT`` on the ``accelerator`` :func:`train` launched, from what :func:`start` opened (no file
    work here): the parts wrapped for the devices, resumed from ``OUT/last``, then stepped; after each step the
    callbacks decide (:mod:`cselab.train.run.callbacks`) and the trainer logs, evaluates, saves and stops. ``step``
    counts the optimizer steps taken (set by a resume)."""

    def __init__(self, accelerator: Accelerator, method: MethodConfig, model: str, out: Path, started: Started,
                 options: RunOptions):
        self.accelerator, self.method, self.out, self.options = accelerator, method, out, options
        self.main, self.cfg = accelerator.is_main_process, method.training
        self.parts, self.source, self.checkpoints = started.parts, started.source, started.checkpoints
        self.last, self.counters, self.facts = started.last, started.counters, started.facts
        self.sharded = self.parts.skeleton is not None  # FSDP2: setup() sharded the encoder (cselab.train.sharding)
        if self.sharded:  # accelerate prepares the optimizer and the batches, not the sharded encoder
            encoder, self.optimizer = self.parts.encoder, accelerator.prepare(self.parts.optimizer)
        else:
            encoder, self.optimizer = accelerator.prepare(self.parts.encoder, self.parts.optimizer)
        self.checkpoints.skeleton = self.parts.skeleton
        if accelerator.num_processes > 1:
            set_seed(self.cfg.seed + accelerator.process_index)  # distinct dropout masks on each process
        self.core = accelerator.unwrap_model(encoder)
        self.loader, self.step = accelerator.prepare(self.parts.loader), 0
        self.batches: Iterator[Batch] | None = None  # made at the first step
        self.take, self.divergence = self.parts.step(encoder, self.optimizer, accelerator), Divergence()
        # training cuts sentences at training.max_length; the checkpoint encodes them whole (up to the model's
        # limit, at most 512 tokens), as SimCSE evaluates
        self.info = CheckpointInfo.of(method.encoder.at_test(self.core.view.limit, started.base_normalizes),
                                      method=method.name, base_model=hub_name(str(model)),
                                      data=self.facts["identity"]["data"], config=method.to_dict())
        # scored as training encodes (PromptBERT's dev scoring denoises and tokenises in pieces), sentences whole
        self.dev_view = TransformerEncoder(self.core.backbone, self.core.tokenizer,
                                           method.encoder.training_encoding(self.info.max_length),
                                           head=self.core.view.head)
        early_stop = [EarlyStop(self.cfg.early_stop, self.cfg.early_stop_rule)] if self.cfg.early_stop else []
        self.callbacks = [Schedule(options.log_every, self.cfg.eval_steps, self.cfg.eval_at_end), *early_stop,
                          *options.callbacks]
        self.own_callbacks, self.stateful = bool(options.callbacks), stateful(self.callbacks)
        self.best, self.improved, self.dev_key = -math.inf, False, log_key(self.cfg.dev)
        self.dev: float | None = None
        self.shown: dict[str, str] = {}  # the progress bar's figures (the latest loss and dev score)
        self.doing: str | None = "the resume"  # what the run is doing besides a step (None: the next step)

    def resume(self) -> None:
        """Continue from the verified ``OUT/last``, if any; ``restart_from="best"``: from ``OUT/best``'s weights."""
        if self.options.restart_from == "best":
            saved = self.checkpoints.restore_best(self.core)
            self.step, self.best = saved["step"], saved["best"]
            set_schedule_step(self.parts.scheduler, self.step)
            set_seed(self.cfg.seed + self.step + self.accelerator.process_index)
            afresh = ["optimizer", *(["head"] if self.core.head is not None and not self.core.head_at_test else []),
                      *(f"auxiliary.{name}" for name in self.core.auxiliary),
                      *(["objective state"] if self.parts.objective.state_dict() else [])]
            self.record({"restarted_from": str(self.out / "best"), "at_step": self.step, "afresh": afresh})
        elif self.last is not None:
            assert self.counters is not None  # start() reads OUT/last's counters with it
            self.checkpoints.restore_last(self.last, self.core, self.optimizer, self.parts.scheduler,
                                          self.parts.objective)
            self.step, self.best = self.counters["step"], self.counters["best"]
            for name, callback in self.stateful.items():
                if name in self.counters["callbacks"]:
                    callback.load_state_dict(self.counters["callbacks"][name])
                else:
                    logger.warning("%s: no saved state for the callback %s; it starts afresh", self.last, name)

    # ---- the loop ------------------------------------------------------------------------------------------------

    def run(self, progress: bool = True) -> dict[str, Any]:
        """Train to the end, or until a callback ends the run; returns the run's summary. The trackers (started
        before the model loaded) end with the run, whatever ends it."""
        stopped_by = None
        try:
            self.resume()
            if self.cfg.eval_at_start and self.step == 0 and self.parts.dev is not None:
                # SG-BERT's fit() scores the model before the first step: the best to beat, not an early-stop count
                self.doing = "the evaluation before the first step"
                self._evaluate({}, None)
                self.record({self.dev_key: self.best, "best": self.best, "initial": True})
            self.doing = None
            self.clock = time.perf_counter()
            self.core.train()
            if self.main:
                print(self.parts.execution.line(), file=sys.stderr)
            with Progress(f"train {self.method.name}", self.parts.total, "step", self.step,
                          enabled=progress and self.main) as bar:
                while self.step < self.parts.total and not stopped_by:
                    stopped_by = self.after_step(self.train_step())
                    bar.update(1)
                    bar.set_postfix(**self.shown)
            self.divergence.check()  # steps after the last save: a loss that was not finite still ends the run
        except Diverged as err:
            raise TrainingError(f"{err}; the last good state is {self.out / 'last'} (best checkpoint "
                                f"{self.out / 'best'}); lower training.lr or check the data") from None
        except Exception as err:  # a plug-in's failure says when (cselab.boundary; the command line, what was kept)
            note(err, during=self.doing or f"step {self.step + 1}")
            raise
        finally:
            self.close()
            if self.options.reporting:
                self.accelerator.end_training()
        return self.finish(stopped_by)

    def train_step(self) -> StepLosses:
        """One optimizer step over ``grad_accum`` batches (:class:`~cselab.train.step.Step`); returns the loss and its
        parts (this process's) and the gradient norm before clipping, on the device. A loss that is not finite is
        watched for, not read."""
        if self.batches is None:
            depth, collate = self.parts.execution.prefetch, self.parts.collator
            self.batches = Ahead(self._batches(), depth, collate) if depth else map(collate, self._batches())
        batches = self.batches
        losses = self.take(next(batches) for _ in range(self.cfg.grad_accum))  # each drawn when its turn comes
        self.step += 1
        for loss in losses.per_batch():
            self.divergence.watch(self.step, loss)
        return losses

    def _batches(self) -> Iterator[dict[str, list[Any]]]:
        """This process's batches, epoch after epoch (each in the order its seed gives), from the current step on:
        on a resume the epoch's first batches are skipped, not drawn."""
        epoch, skip = divmod(self.step * self.cfg.grad_accum, self.parts.per_epoch)
        while True:
            self.loader.set_epoch(epoch)
            yield from self.accelerator.skip_first_batches(self.loader, skip) if skip else self.loader
            epoch, skip = epoch + 1, 0

    def close(self) -> None:
        """Stop the thread that tokenises ahead, if any."""
        if isinstance(self.batches, Ahead):
            self.batches.close()
        self.batches = None

    # ---- after each step: what the callbacks decide --------------------------------------------------------------

    def after_step(self, losses: Mapping[str, float]) -> str | None:
        """Carry out what the callbacks decided after the step just taken; returns the class name of the callback
        that ended the run, if one did (the run then ends evaluated and saved at this step). Before anything is
        logged, evaluated or saved, the steps so far are checked for a loss that was not finite."""
        self.doing, control = f"what followed step {self.step} (callbacks, logging, evaluation, saving)", \
            TrainerControl()
        stopped_by = self._call("on_step", losses, control)
        if control.should_log or control.should_evaluate or control.should_save or control.should_stop:
            self.divergence.check()
        if control.should_log:
            losses = self.mean_over_processes(losses)
            self.record({**losses, "lr": self.parts.scheduler.get_last_lr()[0],
                         "seconds": round(time.perf_counter() - self.clock, 2)})
            self.shown["loss"] = f"{losses['loss']:.4f}"
        control.should_evaluate |= control.should_stop
        if control.should_evaluate or control.should_save:
            stopped_at_evaluation = self.evaluate_and_save(losses, control)
            stopped_by = stopped_by or stopped_at_evaluation
        if stopped_by:
            self.record({"stopped_by": stopped_by, **({"reason": control.reason} if control.reason else {})})
        self.doing = None
        return stopped_by

    def state(self, losses: Mapping[str, float]) -> TrainerState:
        """What the callbacks see after the step just taken (the losses read from the device when a callback looks
        at them)."""
        return TrainerState(step=self.step, total=self.parts.total, epoch=self.step * self.cfg.grad_accum /
                            self.parts.per_epoch,
                            losses=losses if isinstance(losses, StepLosses) else MappingProxyType(dict(losses)),
                            dev=self.dev, best=None if self.best == -math.inf else self.best, improved=self.improved,
                            config=self.method, main=self.main)

    def _call(self, hook: str, losses: Mapping[str, float], control: TrainerControl) -> str | None:
        """Every callback's ``hook``; returns the class name of the one that ended the run, if one did."""
        state, stopped_by = self.state(losses), None
        for callback in self.callbacks:
            stopping = control.should_stop
            with calling(callback, hook, "callback"):
                getattr(callback, hook)(state, control)
            if control.should_stop and not stopping:
                stopped_by = type(callback).__name__
        if self.own_callbacks and self.accelerator.num_processes > 1:  # the main process's decisions hold
            main_control, stopped_by = broadcast_object_list([control, stopped_by])
            vars(control).update(vars(main_control))
        return stopped_by

    def mean_over_processes(self, losses: Mapping[str, float]) -> dict[str, float]:
        """Each process holds its share of the batch; their mean is the batch's loss."""
        if self.accelerator.num_processes == 1:
            return dict(losses)
        means = self.accelerator.reduce(torch.tensor(list(losses.values()), device=self.accelerator.device),
                                        reduction="mean")
        return dict(zip(losses, means.tolist(), strict=True))

    def record(self, values: dict[str, Any]) -> None:
        """A line of ``OUT/log.jsonl`` (the main process's) and the trackers' figures, at the current step."""
        if self.main:
            with open(self.out / "log.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps({"step": self.step, **values}) + "\n")
        self.accelerator.log({k: v for k, v in values.items() if k not in NOT_LOGGED}, step=self.step)

    # ---- evaluate and save ---------------------------------------------------------------------------------------

    def evaluate_and_save(self, losses: Mapping[str, float], control: TrainerControl) -> str | None:
        """Save ``OUT/last``; with ``control.should_evaluate`` first score the dev set, keep ``OUT/best`` (with
        ``training.dev: none`` every evaluation is the best) and call the callbacks' ``on_evaluate``; returns the
        class name of the callback that ended the run then, if one did."""
        stopped_by = None
        with self.checkpoints.disk_guard(self.core):
            self.checkpoints.begin(self.parts.objective)
            if control.should_evaluate:
                stopped_by = self._evaluate(losses, control)
            counters = {"step": self.step, "best": self.best,
                        "callbacks": {name: callback.state_dict() for name, callback in self.stateful.items()}}
            self.checkpoints.commit(self.core, self.optimizer, self.parts.scheduler, counters)
        if not control.should_evaluate:
            self.record({"saved": "last"})
        else:
            self.record({self.dev_key: self.dev, "best": self.best} if self.dev is not None else {"saved": "best"})
        return stopped_by

    def _evaluate(self, losses: Mapping[str, float], control: TrainerControl | None) -> str | None:
        score = None  # sharded, every process runs the scorer: each of its passes gathers the weights from all
        if (self.main or self.sharded) and self.parts.dev is not None:
            self.core.eval()
            score = self.parts.dev.score(self.dev_view)
            self.core.train()
        if self.accelerator.num_processes > 1:  # only the main process scores; every process's callbacks see it
            score = broadcast_object_list([score])[0]
        self.dev, self.improved = score, score is None or score > self.best
        if self.improved:
            self.best = self.best if score is None else score
            if self.main or self.sharded:  # sharded, every process takes part in gathering the weights
                card = model_card(self.method, self.info, self.facts, self.step, score) if self.main else ""
                self.checkpoints.save_best(self.core, self.info, self.step, self.best, card)
        if score is not None:
            self.shown.update(dev=f"{score:.2f}", **({"loss": f"{losses['loss']:.4f}"} if losses else {}))
        return None if control is None else self._call("on_evaluate", losses, control)

    # ---- finish --------------------------------------------------------------------------------------------------

    def finish(self, stopped_by: str | None) -> dict[str, Any]:
        """The process group closed (no gloo thread left at interpreter exit); the run's summary."""
        if self.accelerator.num_processes > 1 and torch.distributed.is_initialized():
            self.accelerator.wait_for_everyone()
            torch.distributed.destroy_process_group()
        best = None if self.cfg.dev == NONE else self.best
        return {"steps": self.step, "dev": self.cfg.dev, "best_dev": best, "best": str(self.out / "best"),
                "last": str(self.out / "last"), "stopped_early": stopped_by == EarlyStop.__name__,
                "stopped_by": stopped_by, "data": self.source}
