"""A training run: a method (:mod:`cselab.train.config.methods`) trained on the augment cache, written to ``OUT``.

Through accelerate (:mod:`~cselab.train.run.launch`): one CPU or GPU, or several GPUs with ``accelerate launch`` (DDP;
each batch split across the processes, in-batch negatives gathered from all of them with their gradient,
:mod:`~cselab.train.distributed`); bf16/fp16 with ``mixed_precision``; gradient accumulation over ``grad_accum``
batches. The parts, one module each: :mod:`~cselab.train.run.start` opens ``OUT`` (:mod:`~cselab.train.run.folder`:
is it this run?) and sets up (:mod:`~cselab.train.run.setup`) the encoder, objective, optimizer, batches and dev
scorer; :mod:`~cselab.train.run.loop` takes the steps; :mod:`~cselab.train.run.callbacks` decide after each step
(log, evaluate, save, stop); :mod:`~cselab.train.run.checkpoint` saves and restores. :class:`Trainer` joins them.

An evaluation (every ``eval_steps``; with ``eval_at_start`` also before the first step) runs the dev scorer
``training.dev`` names (:mod:`cselab.evaluation.dev`; with ``none`` every evaluation is the best), keeps the best
checkpoint in ``OUT/best`` (with its model card) and the full state in ``OUT/last``, which a run started again on
``OUT`` resumes from. A NaN or infinite loss stops the run, naming the step. ``OUT/log.jsonl`` (and a tracker) has a
line per logged step (the loss, its parts, the gradient norm before clipping, the learning rate), evaluation, stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, set_seed

from cselab.boundary import calling, note
from cselab.encoders.checkpoint import CheckpointInfo
from cselab.encoders.specs import hub_name
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import TrainingError
from cselab.evaluation.dev import NONE, log_key
from cselab.files import check_folder, kept_only_if_written
from cselab.progress import Progress
from cselab.train.config.method import MethodConfig, with_data
from cselab.train.run import folder as run_folder
from cselab.train.run.card import model_card
from cselab.train.run.callbacks import EarlyStop, Schedule, TrainerControl, TrainerState, stateful
from cselab.train.run.launch import launch
from cselab.train.run.loop import Diverged, Loop
from cselab.train.step import StepLosses
from cselab.train.run.optim import set_schedule_step
from cselab.train.run.options import RunOptions
from cselab.train.run.start import Started, start

logger = logging.getLogger(__name__)
NOT_LOGGED = ("seconds", "saved", "reason")  # log.jsonl's words and timings, not a tracker's figures


class Trainer:
    """One run over ``OUT`` on the ``accelerator`` :func:`train` launched, from what :func:`~cselab.train.run.start.
    start` opened (no file work here): resumed from ``OUT/last``, then stepped; after each step the callbacks decide
    (:mod:`cselab.train.run.callbacks`) and the trainer logs, evaluates, saves and stops."""

    def __init__(self, accelerator: Accelerator, method: MethodConfig, model: str, out: Path, started: Started,
                 options: RunOptions):
        self.accelerator, self.method, self.out, self.options = accelerator, method, out, options
        self.main, self.cfg = accelerator.is_main_process, method.training
        self.parts, self.source, self.checkpoints = started.parts, started.source, started.checkpoints
        self.last, self.counters, self.facts = started.last, started.counters, started.facts
        self.sharded = self.parts.skeleton is not None  # FSDP2: setup() sharded the encoder (run.sharding)
        if self.sharded:  # accelerate prepares the optimizer and the batches, not the sharded encoder
            encoder, optimizer = self.parts.encoder, accelerator.prepare(self.parts.optimizer)
        else:
            encoder, optimizer = accelerator.prepare(self.parts.encoder, self.parts.optimizer)
        self.checkpoints.skeleton = self.parts.skeleton
        if accelerator.num_processes > 1:
            set_seed(self.cfg.seed + accelerator.process_index)  # distinct dropout masks on each process
        self.core = accelerator.unwrap_model(encoder)
        self.loop = Loop(accelerator, self.parts, encoder, optimizer, accelerator.prepare(self.parts.loader))
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
            self.loop.step, self.best = saved["step"], saved["best"]
            set_schedule_step(self.parts.scheduler, self.loop.step)
            set_seed(self.cfg.seed + self.loop.step + self.accelerator.process_index)
            afresh = ["optimizer", *(["head"] if self.core.head is not None and not self.core.head_at_test else []),
                      *(f"auxiliary.{name}" for name in self.core.auxiliary),
                      *(["objective state"] if self.parts.objective.state_dict() else [])]
            self.record({"restarted_from": str(self.out / "best"), "at_step": self.loop.step, "afresh": afresh})
        elif self.last is not None:
            assert self.counters is not None  # start() reads OUT/last's counters with it
            self.checkpoints.restore_last(self.last, self.core, self.loop.optimizer, self.parts.scheduler,
                                          self.parts.objective)
            self.loop.step, self.best = self.counters["step"], self.counters["best"]
            for name, callback in self.stateful.items():
                if name in self.counters["callbacks"]:
                    callback.load_state_dict(self.counters["callbacks"][name])
                else:
                    logger.warning("%s: no saved state for the callback %s; it starts afresh", self.last, name)

    def state(self, losses: Mapping[str, float]) -> TrainerState:
        """What the callbacks see after the step just taken (the losses read from the device when a callback looks
        at them)."""
        return TrainerState(step=self.loop.step, total=self.parts.total, epoch=self.loop.epoch,
                            losses=losses if isinstance(losses, StepLosses) else MappingProxyType(dict(losses)),
                            dev=self.dev,
                            best=None if self.best == -math.inf else self.best, improved=self.improved,
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

    def after_step(self, losses: Mapping[str, float]) -> str | None:
        """Carry out what the callbacks decided after the step just taken; returns the class name of the callback
        that ended the run, if one did (the run then ends evaluated and saved at this step). Before anything is
        logged, evaluated or saved, the steps so far are checked for a loss that was not finite."""
        self.doing, control = f"what followed step {self.loop.step} (callbacks, logging, evaluation, saving)", \
            TrainerControl()
        stopped_by = self._call("on_step", losses, control)
        if control.should_log or control.should_evaluate or control.should_save or control.should_stop:
            self.loop.check()
        if control.should_log:
            losses = self.loop.mean_over_processes(losses)
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

    def evaluate_and_save(self, losses: Mapping[str, float], control: TrainerControl) -> str | None:
        """Save ``OUT/last``; with ``control.should_evaluate`` first run the dev scorer, keep ``OUT/best`` (with
        ``training.dev: none`` every evaluation is the best) and call the callbacks' ``on_evaluate``; returns the
        class name of the callback that ended the run then, if one did."""
        stopped_by = None
        with self.checkpoints.disk_guard(self.core):
            self.checkpoints.begin(self.parts.objective)
            if control.should_evaluate:
                stopped_by = self._evaluate(losses, control)
            counters = {"step": self.loop.step, "best": self.best,
                        "callbacks": {name: callback.state_dict() for name, callback in self.stateful.items()}}
            self.checkpoints.commit(self.core, self.loop.optimizer, self.parts.scheduler, counters)
        if not control.should_evaluate:
            self.record({"saved": "last"})
        else:
            self.record({self.dev_key: self.dev, "best": self.best} if self.dev is not None else {"saved": "best"})
        return stopped_by

    def _evaluate(self, losses: Mapping[str, float], control: TrainerControl | None) -> str | None:
        score = None  # sharded, every process runs the scorer: each of its passes gathers the weights from all
        if (self.main or self.sharded) and self.parts.dev is not None:
            self.core.eval()
            score = self.parts.dev.run(self.dev_view).headline
            self.core.train()
        if self.accelerator.num_processes > 1:  # only the main process scores; every process's callbacks see it
            score = broadcast_object_list([score])[0]
        self.dev, self.improved = score, score is None or score > self.best
        if self.improved:
            self.best = self.best if score is None else score
            if self.main or self.sharded:  # sharded, every process takes part in gathering the weights
                card = model_card(self.method, self.info, self.facts, self.loop.step, score) if self.main else ""
                self.checkpoints.save_best(self.core, self.info, self.loop.step, self.best, card)
        if score is not None:
            self.shown.update(dev=f"{score:.2f}", **({"loss": f"{losses['loss']:.4f}"} if losses else {}))
        return None if control is None else self._call("on_evaluate", losses, control)

    def record(self, values: dict[str, Any]) -> None:
        if self.main:
            with open(self.out / "log.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps({"step": self.loop.step, **values}) + "\n")
        self.accelerator.log({k: v for k, v in values.items() if k not in NOT_LOGGED}, step=self.loop.step)

    def run(self, progress: bool = True) -> dict[str, Any]:
        """Train to the end, or until a callback ends the run; returns the run's summary. The trackers (started
        before the model loaded) end with the run, whatever ends it."""
        stopped_by = None
        try:
            self.resume()
            if self.cfg.eval_at_start and self.loop.step == 0 and self.parts.dev is not None:
                # SG-BERT's fit() scores the model before the first step: the best to beat, not an early-stop count
                self.doing = "the evaluation before the first step"
                self._evaluate({}, None)
                self.record({self.dev_key: self.best, "best": self.best, "initial": True})
            self.doing = None
            self.clock = time.perf_counter()
            self.core.train()
            if self.main:
                print(self.parts.execution.line(), file=sys.stderr)
            with Progress(f"train {self.method.name}", self.parts.total, "step", self.loop.step,
                          enabled=progress and self.main) as bar:
                for losses in self.loop.steps():
                    stopped_by = self.after_step(losses)
                    bar.update(1)
                    bar.set_postfix(**self.shown)
                    if stopped_by:
                        break
            self.loop.check()  # steps after the last save: a loss that was not finite still ends the run in error
        except Diverged as err:
            raise TrainingError(f"{err}; the last good state is {self.out / 'last'} (best checkpoint "
                                f"{self.out / 'best'}); lower training.lr or check the data") from None
        except Exception as err:  # a plug-in's failure says when (cselab.boundary; the command line, what was kept)
            note(err, during=self.doing or f"step {self.loop.step + 1}")
            raise
        finally:
            self.loop.close()
            if self.options.reporting:
                self.accelerator.end_training()
        return self._finish(stopped_by)

    def _finish(self, stopped_by: str | None) -> dict[str, Any]:
        if self.accelerator.num_processes > 1 and torch.distributed.is_initialized():
            self.accelerator.wait_for_everyone()
            torch.distributed.destroy_process_group()  # no gloo thread left running at interpreter exit
        best = None if self.cfg.dev == NONE else self.best
        return {"steps": self.loop.step, "dev": self.cfg.dev, "best_dev": best, "best": str(self.out / "best"),
                "last": str(self.out / "last"), "stopped_early": stopped_by == EarlyStop.__name__,
                "stopped_by": stopped_by, "data": self.source}


def train(method: MethodConfig, model: str, data: str | os.PathLike | None, out: str | os.PathLike,
          options: RunOptions | None = None) -> dict[str, Any]:
    """Train ``model`` with ``method`` on ``data`` (see :func:`cselab.train.run.data.training_rows`; None: the
    method's own ``data``, else ``cache/augment``); returns its summary. ``--method OUT/config.yaml`` repeats it.

    ``training.batch_size`` rows make one contrastive batch (its in-batch negatives), split across processes when
    there are several; ``grad_accum`` batches make one optimizer step, which ``max_steps``, ``eval_steps`` and the
    learning-rate schedule count.

    ``OUT`` is locked while the run writes it; on an existing ``OUT`` the run continues only the same run (same
    config, data, base model, cselab version; :mod:`cselab.train.run.folder`), from ``OUT/last`` once every file
    there is verified (:mod:`cselab.train.run.state`). How the run is carried out (the data root, the dev pairs,
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
