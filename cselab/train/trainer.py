"""The training loop: a method (see :mod:`cselab.train.methods`) over the augment cache.

Through accelerate: one CPU or GPU, or several GPUs with ``accelerate launch`` (DDP; each batch split across the
processes, in-batch negatives gathered from all of them with their gradient, see :mod:`cselab.train.distributed`);
bf16/fp16 with ``mixed_precision`` (refused where accelerate would fall back to fp32); gradient accumulation over
``grad_accum`` batches (``accelerator.accumulate``; a step's batches may span two epochs); the gradients' total norm
clipped to ``max_grad_norm``; the optimizer, its linear warm-up and decay from :mod:`cselab.train.optim`; an evaluation
every ``eval_steps`` (with ``eval_at_start`` also before the first step) scoring the dev probe ``training.dev`` names
(:mod:`cselab.evaluation.dev`: STS-B dev by default) and keeping the best checkpoint in ``OUT/best``, and the full
training state (model, optimizer, scheduler, RNG states, step) in ``OUT/last`` at each evaluation: a run started again
on the same ``OUT`` resumes from there, the data order being a function of the seed and the epoch. A NaN or infinite
loss stops the run, naming the step, with ``OUT/last`` left as the last good state. With ``training.early_stop`` the run
ends once the early-stop count reaches it: by default evaluations in a row without a better best dev score, with
``early_stop_rule: drops`` every evaluation that scored below the one before (SG-BERT's "early stopping endurance").
With ``training.dev: none`` there is no dev set: every evaluation step saves ``OUT/best`` (the latest weights) and the
data root is not needed. ``OUT/log.jsonl`` has one line per logged step (the loss, its parts, the gradient norm before
clipping, the learning rate) and per evaluation (the log and the evaluations are callbacks of the loop,
:mod:`cselab.train.callbacks`, beside a caller's own); ``OUT/config.yaml`` is the resolved method; with
``tensorboard=True`` the same figures go to ``OUT/tensorboard`` too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, broadcast_object_list, set_seed
from tqdm.auto import tqdm
from safetensors.torch import load_model

from cselab.atomic import disk_full, write_json_atomic
from cselab.encoders.checkpoint import CheckpointInfo
from cselab.encoders.pretrained import check_max_length, combined_sha256, weight_files
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import TrainingError
from cselab.evaluation.dev import NONE, dev_probe, log_key
from cselab.files import check_folder, clipped, read_json, remove_path
from cselab.provenance import provenance
from cselab.train import run_folder, state
from cselab.train.data import training_rows
from cselab.train.batches import Collator, training_loader
from cselab.train.callbacks import Callback, EvaluateAndSave, LogLosses
from cselab.train.config import TrainingConfig
from cselab.train.plugins.hooks import perturb_weights, restore_weights
from cselab.train.model import TrainingEncoder, save_checkpoint
from cselab.train.objective import Objective
from cselab.train.optim import build_optimizer, build_scheduler, clip_and_step, set_schedule_step

BEST_STATE = "training.json"  # in OUT/best: the step and score it was saved at
RESUME_HELP = (f"resume from the best checkpoint with --restart-from best (its weights, a fresh optimizer), or "
               f"{run_folder.AFRESH}")


def run_identity(method: dict[str, Any], model: str, source: dict[str, Any], data_dir=None,
                 eval_limit: int | None = None, weights: dict[str, str] | None = None) -> dict[str, Any]:
    """The identity a run of ``method`` from ``model`` (whose ``weights``, :func:`weight_files`, are read when not
    given) on the data ``source`` (:func:`training_rows`'s description) has
    (:func:`cselab.train.run_folder.identity`): what ``OUT/run.json`` records and a resumed run must match."""
    weights = weight_files(str(model)) if weights is None else weights
    return run_folder.identity(method, str(model), source, combined_sha256(weights),
                               dev_identity(method["training"]["dev"], data_dir, eval_limit))


def dev_identity(dev: str, data_dir, limit: int | None) -> dict[str, Any]:
    """The dev set a run picks ``best`` with, by content: its files' sha256 and the pair limit."""
    probe = dev_probe(dev, data_dir, limit)
    return {"set": NONE} if probe is None else probe.identity()


def early_stop_count(rule: str, count: int, score: float | None, previous: float, improved: bool) -> int:
    """The early-stop count after an evaluation that gave ``score`` (None without a dev set): with
    ``no_improvement``, evaluations in a row without a better best score (0 when ``improved``); with ``drops``
    (SG-BERT's rule), every evaluation so far that scored below the one before it (``previous``; 0 before the
    first), never reset."""
    if rule == "drops":
        return count + int(score is not None and score < previous)
    return 0 if improved else count + 1


def _replace_folder(temporary: Path, final: Path) -> None:
    """Put ``temporary`` at ``final``; at every moment one complete copy exists (``final`` or ``final.old``)."""
    old = final.with_name(final.name + ".old")
    if final.exists() or final.is_symlink():
        remove_path(old)
        final.rename(old)
    temporary.rename(final)
    remove_path(old)


def build_encoder(method: dict[str, Any], model: str) -> TrainingEncoder:
    """The method's training encoder over the backbone ``model`` (a folder or a hub name)."""
    return TrainingEncoder.from_pretrained(model, method["training"]["max_length"], **method["encoder"])


def initial_weights(encoder: TrainingEncoder) -> list[torch.Tensor]:
    """The backbone's initial weights for ``recall``: the frozen copy's when it has full precision (no second
    copy), else a snapshot."""
    if encoder.frozen is not None and next(encoder.frozen.parameters()).dtype == torch.float32:
        return list(encoder.frozen.parameters())
    return [p.detach().clone() for p in encoder.backbone.parameters()]


def backward_pass(model, objective: Objective, rows, backward, initial_weights=None,
                  trainable: list[torch.Tensor] | None = None):
    """One batch's losses and their ``backward``; with a weight hook (SAM/AWP) the gradient is taken again at
    the perturbed ``trainable`` weights, which are then restored. Returns the (first pass's) loss and its parts;
    a loss that is not finite is returned without a backward pass."""
    parts = objective(model, rows, initial_weights)
    if not parts:
        raise TrainingError(f"no loss of {objective.method} could be computed on a batch: none of its rows has all "
                            f"the columns a loss reads ({', '.join(objective.columns)})")
    loss = objective.total(parts)
    if not torch.isfinite(loss):
        return loss, parts
    backward(loss)
    if objective.weight_hook is not None:  # the gradient at the perturbed weights updates the original ones
        originals = perturb_weights(trainable, objective.weight_hook)
        for parameter in trainable:
            parameter.grad = None
        backward(objective.total(objective(model, rows, initial_weights)))
        restore_weights(trainable, originals)
    return loss, parts


def _launch(cfg: TrainingConfig, out: Path, tensorboard: bool) -> Accelerator:
    """The accelerator, once the launch adds up (processes, batch split, tensorboard installed)."""
    if tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise TrainingError("tensorboard=True needs the tensorboard package: pip install 'cselab[tensorboard]'")
    if cfg.mixed_precision == "fp16" and not torch.cuda.is_available():
        _refuse_precision(cfg, "cpu")
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, log_with="tensorboard" if tensorboard else None,
                              project_dir=str(out),  # each batch split across the processes in rank order
                              dataloader_config=DataLoaderConfiguration(split_batches=True),
                              # a step's batches may span two epochs: its end, not the loader's, synchronises
                              gradient_accumulation_plugin=GradientAccumulationPlugin(
                                  num_steps=cfg.grad_accum, sync_with_dataloader=False))
    if cfg.mixed_precision != "no" and not accelerator.native_amp:
        _refuse_precision(cfg, accelerator.device)
    processes = accelerator.num_processes
    launched = int(os.environ.get("WORLD_SIZE", 1))
    if launched != processes:  # each process would train alone, all writing to OUT
        raise TrainingError(f"{launched} processes were launched but accelerate set up {processes} (no GPU? on CPU, "
                            "set ACCELERATE_USE_CPU=1 for torchrun, the gloo backend is then used)")
    if cfg.batch_size % processes:
        raise TrainingError(f"training.batch_size {cfg.batch_size} does not split evenly across {processes} "
                            "processes")
    if processes == 1 and torch.cuda.device_count() > 1:
        accelerator.print(f"{torch.cuda.device_count()} GPUs visible, training on one: DataParallel is not used "
                          "(its replicas would each see a part of the in-batch negatives); to use them all, run "
                          "`accelerate launch --multi_gpu -m cselab.cli train ...`")
    return accelerator


def _refuse_precision(cfg: TrainingConfig, device) -> None:
    """accelerate trains in fp32, without a word, where the asked precision is not available: refuse instead."""
    raise TrainingError(f"training.mixed_precision {cfg.mixed_precision} is not available on {device} (fp16 needs "
                        "a CUDA device); set training.mixed_precision=no")


def _check_hooks(objective: Objective, grad_accum: int, processes: int) -> None:
    if (objective.weight_hook is not None or objective.gradient_views) and processes > 1:
        raise TrainingError("FGSM views and SAM/AWP take a second pass per step that is not synchronised across "
                            "processes yet: train them on one device")
    if objective.weight_hook is not None and grad_accum > 1:
        raise TrainingError("hooks.weights (SAM/AWP) perturbs the weights once per step: set training.grad_accum=1")


class Run:
    """One training run over ``OUT`` on the ``accelerator`` :func:`train` launched: set up (data, encoder,
    optimizer), resumed from ``OUT/last``, then stepped; every ``eval_steps`` it is evaluated and saved."""

    def __init__(self, accelerator: Accelerator, method: dict[str, Any], model: str, data, out: str | os.PathLike,
                 data_dir=None, eval_limit: int | None = None, tensorboard: bool = False,
                 restart_from: str | None = None):
        self.accelerator, self.method, self.out, self.tensorboard = accelerator, method, Path(out), tensorboard
        self.cfg = TrainingConfig(**method["training"])
        self.restart_from, self.objective = restart_from, Objective(method)
        self.main = self.accelerator.is_main_process
        _check_hooks(self.objective, self.cfg.grad_accum, self.accelerator.num_processes)
        set_seed(self.cfg.seed)
        self.out.mkdir(parents=True, exist_ok=True)
        self.rows, self.source = training_rows(method, data, data_dir)
        check_max_length(str(model), self.cfg.max_length, "training.max_length")  # before OUT records the run
        weights = weight_files(str(model))
        mine = run_identity(method, model, self.source, data_dir, eval_limit, weights)
        run_folder.check_or_write(self.out, mine, method, write=self.main,  # before a model loads
                                  provenance=provenance(str(self.accelerator.device), weights))
        if self.main:  # what a run killed (or stopped by a full disk) mid-save left
            for partial in ("last.tmp", "best.tmp"):
                remove_path(self.out / partial)
        self.last, self.counters = self._verified_last()
        self.per_epoch = len(self.rows) // self.cfg.batch_size
        if self.per_epoch < self.cfg.grad_accum:
            raise TrainingError(f"{self.source.get('path') or self.source.get('name')}: {len(self.rows)} rows, fewer "
                                f"than one step of {self.cfg.grad_accum} batch(es) of {self.cfg.batch_size}")
        total = self.per_epoch * self.cfg.epochs // self.cfg.grad_accum
        self.total = total if self.cfg.max_steps is None else min(self.cfg.max_steps, total)
        self._build_model(model)
        # stale: the early-stop count (training.early_stop_rule); previous: the last dev score (0 before the first)
        self.step, self.best, self.stale, self.previous = 0, -math.inf, 0, 0.0
        self.shown: dict[str, str] = {}  # the progress bar's figures (the latest loss and dev score)
        self.info = CheckpointInfo(pooler=method["encoder"]["pooler"], prompt=method["encoder"].get("prompt"),
                                   max_length=self.core.view.limit,
                                   method=method["method"], base_model=str(model), config=method)
        # training cuts sentences at training.max_length; the checkpoint encodes them whole (up to the model's
        # limit, at most 512 tokens), as SimCSE evaluates
        self.dev = dev_probe(self.cfg.dev, data_dir, eval_limit) if self.main else None
        self.dev_key = log_key(self.cfg.dev)
        self.dev_view = TransformerEncoder(self.core.backbone, self.core.tokenizer, pooler=self.info.pooler,
                                           prompt=self.info.prompt, max_length=self.info.max_length)

    def _build_model(self, model: str) -> None:
        encoder = build_encoder(self.method, model)
        initial = initial_weights(encoder) if self.objective.needs_initial_weights else None
        optimizer = build_optimizer([(n, p) for n, p in encoder.named_parameters() if p.requires_grad], self.cfg)
        self.scheduler = build_scheduler(optimizer, self.cfg, self.total)
        self.encoder, self.optimizer = self.accelerator.prepare(encoder, optimizer)
        if self.accelerator.num_processes > 1:
            set_seed(self.cfg.seed + self.accelerator.process_index)  # distinct dropout masks on each process
        self.core = self.accelerator.unwrap_model(self.encoder)
        collator = Collator(self.core, self.objective.forward_keys)
        self.loader = self.accelerator.prepare(training_loader(self.rows, collator, self.cfg))
        self.batches = None  # this process's batches from the (resumed) step on, made at the first step
        self.trainable = [p for p in self.core.parameters() if p.requires_grad]
        self.initial_weights = lambda: (list(self.core.backbone.parameters()), initial)

    def _verified_last(self) -> tuple[Path | None, dict[str, Any] | None]:
        """``OUT/last`` (or the ``last.old`` a kill between two renames left) once every file there is checked
        against its manifest, and the counters it holds; None when there is nothing to resume."""
        last = self.out / "last"
        if not last.exists() and last.with_name("last.old").exists():
            last = last.with_name("last.old")
        if self.restart_from == "best" or not last.exists():
            return None, None
        try:
            return last, state.verify(last)
        except state.StateError as err:
            raise state.StateError(f"{err}; {RESUME_HELP}") from None

    def resume(self) -> None:
        """Continue from the verified ``OUT/last`` when a previous run left it; with ``restart_from="best"``, from
        the best checkpoint's weights instead."""
        if self.restart_from == "best":
            self._restart_from_best()
            return
        if self.last is None:
            return
        try:
            state.load_state(self.last, self.accelerator.process_index, self.core, self.optimizer, self.scheduler,
                             self.accelerator.scaler, self.objective)
        except state.StateError as err:
            raise state.StateError(f"{err}; {RESUME_HELP}") from None
        self.step, self.best, self.stale = self.counters["step"], self.counters["best"], self.counters["stale"]
        self.previous = self.counters["previous"]

    def _restart_from_best(self) -> None:
        best = self.out / "best"
        try:
            if best.is_symlink():
                raise state.StateError(f"{best}: a link, not the run's own folder")
            saved = read_json(best / BEST_STATE, state.StateError)
            if not isinstance(saved.get("step"), int) or not isinstance(saved.get("best"), (int, float)):
                raise state.StateError(f"{best / BEST_STATE}: expected the numbers step and best")
            load_model(self.core.backbone, str(best / "model.safetensors"))
        except Exception as err:
            raise state.StateError(f"{best}: cannot restart from it ({clipped(err, 200)}); "
                                   f"{run_folder.AFRESH}") from None
        for name in ("last", "last.tmp", "last.old"):
            shutil.rmtree(self.out / name, ignore_errors=True)
        self.step, self.best, self.stale = saved["step"], saved["best"], 0
        set_schedule_step(self.scheduler, self.step)
        set_seed(self.cfg.seed + self.step + self.accelerator.process_index)
        self.record({"restarted_from": str(best), "at_step": self.step})

    def _batches(self):
        """This process's batches, epoch after epoch (each in the order its seed gives), from the current step on:
        on a resume the epoch's first batches are skipped, not drawn."""
        epoch, skip = divmod(self.step * self.cfg.grad_accum, self.per_epoch)
        while True:
            self.loader.set_epoch(epoch)
            yield from self.accelerator.skip_first_batches(self.loader, skip) if skip else self.loader
            epoch, skip = epoch + 1, 0

    def train_step(self) -> dict[str, float]:
        """One optimizer step over ``grad_accum`` batches; returns the loss and its parts (this process's)."""
        accum, parts_sum = self.cfg.grad_accum, {}
        if self.batches is None:
            self.batches = self._batches()
        for _ in range(accum):
            local = next(self.batches)
            self.objective.new_batch()
            with self.accelerator.accumulate(self.encoder):  # gradients synchronised at the step's last batch
                loss, parts = backward_pass(self.encoder, self.objective, local, self.accelerator.backward,
                                            self.initial_weights, self.trainable)
            if not torch.isfinite(loss):
                raise TrainingError(f"the loss became {loss.item()} at step {self.step + 1}; the last good state is "
                                    f"{self.out / 'last'} (best checkpoint {self.out / 'best'}); lower training.lr "
                                    "or check the data")
            for key, value in {"loss": loss, **parts}.items():
                parts_sum[key] = parts_sum.get(key, 0.0) + value.item() / accum
        norm = clip_and_step(self.optimizer, self.scheduler, self.trainable, self.cfg.max_grad_norm,
                             self.accelerator.clip_grad_norm_)
        if norm is not None:
            parts_sum["grad_norm"] = norm  # before clipping
        self.step += 1
        return parts_sum

    def mean_over_processes(self, parts: dict[str, float]) -> dict[str, float]:
        """Each process holds its share of the batch; their mean is the batch's loss."""
        if self.accelerator.num_processes == 1:
            return parts
        means = self.accelerator.reduce(torch.tensor(list(parts.values()), device=self.accelerator.device),
                                        reduction="mean")
        return dict(zip(parts, means.tolist(), strict=True))

    def evaluate_and_save(self) -> float | None:
        """Save the state to ``OUT/last``; score STS-B dev and keep ``OUT/best`` (with ``training.dev: none``, every
        save is the best). Returns the dev score (None without one, or off the main process). A disk that fills up
        meanwhile ends the run with one line naming the folder and the space a save takes, the half-written
        ``last.tmp``/``best.tmp`` removed (``OUT/last`` and ``OUT/best`` stay as they were)."""
        need = 3 * sum(p.numel() * p.element_size() for p in self.core.parameters())
        try:
            return self._evaluate_and_save()
        except Exception as err:  # torch.save and safetensors say "disk full" in errors of their own
            if not disk_full(err, self.out, need):
                raise
            for partial in ("last.tmp", "best.tmp") if self.main else ():
                remove_path(self.out / partial)
            free = shutil.disk_usage(self.out).free / 2**20
            raise TrainingError(f"{self.out}: no space left on the device to save the run (a save takes about "
                                f"{need / 2**20:.0f} MiB: weights and the optimizer's two moments; {free:.0f} MiB "
                                f"free); free some space and run the same command again: it resumes from "
                                f"{self.out / 'last'}") from None

    def _evaluate_and_save(self) -> float | None:
        score, tmp = None, self.out / "last.tmp"
        if self.main:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a killed run
        self.accelerator.wait_for_everyone()
        state.save_process_state(tmp, self.accelerator.process_index)
        self.accelerator.wait_for_everyone()  # every process's RNG state is in last.tmp before it is renamed
        if self.main:
            score = self._score()
            improved = score is None or score > self.best
            self.stale = early_stop_count(self.cfg.early_stop_rule, self.stale, score, self.previous, improved)
            self.previous = self.previous if score is None else score
            if improved:
                self.best = self.best if score is None else score
                self._save_best()
            counters = {"step": self.step, "best": self.best, "stale": self.stale, "previous": self.previous}
            state.save_shared_state(tmp, self.core, self.optimizer, self.scheduler, self.accelerator.scaler,
                                    self.objective, counters)
            state.write_manifest(tmp)
            _replace_folder(tmp, self.out / "last")
            self.record({self.dev_key: score, "best": self.best} if score is not None else {"saved": "best"})
        self.accelerator.wait_for_everyone()
        if self.accelerator.num_processes > 1:  # only the main process evaluates; all stop early at the same step
            self.stale = broadcast_object_list([self.stale])[0]
        return score

    def _save_best(self) -> None:
        save_checkpoint(self.out / "best.tmp", self.core, self.info)
        write_json_atomic(self.out / "best.tmp" / BEST_STATE, {"step": self.step, "best": self.best})
        _replace_folder(self.out / "best.tmp", self.out / "best")

    def evaluate_start(self) -> None:
        """``training.eval_at_start``: score the initial weights, which become the best to beat and ``OUT/best``
        until something beats them (SG-BERT's ``fit()`` scores the model before the first step); the early-stop
        count does not include it."""
        if self.main and self.dev is not None:
            self.best = self._score()
            self._save_best()
            self.record({self.dev_key: self.best, "best": self.best, "initial": True})

    def _score(self) -> float | None:
        if self.dev is None:
            return None
        self.core.eval()
        score = self.dev.run(self.dev_view).headline
        self.core.train()
        return score

    def record(self, values: dict[str, Any]) -> None:
        if self.main:
            with open(self.out / "log.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps({"step": self.step, **values}) + "\n")
        self.accelerator.log({k: v for k, v in values.items() if k not in ("seconds", "saved")}, step=self.step)

    def steps(self) -> Iterator[dict[str, float]]:
        """Optimizer steps to the end of training, each step's loss parts (this process's) as it is taken."""
        while self.step < self.total:
            yield self.train_step()

    def run(self, log_every: int = 10, progress: bool = True, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
        """Train to the end, or until a callback ends the run (:mod:`cselab.train.callbacks`: the log, the
        evaluations and the early stop, then ``callbacks``); returns the run's summary."""
        self.resume()
        if self.tensorboard:
            self.accelerator.init_trackers("tensorboard")
        if self.cfg.eval_at_start and self.step == 0:
            self.evaluate_start()
        every = [LogLosses(log_every), EvaluateAndSave(), *callbacks]
        bar = tqdm(total=self.total, initial=self.step, desc=f"Training {self.method['method']}", unit="step",
                   disable=not (progress and self.main))
        stopped_by = None
        self.core.train()
        try:
            for parts in self.steps():
                ends = [callback(self, parts) for callback in every]
                bar.update(1)
                bar.set_postfix(self.shown)
                if callbacks and self.accelerator.num_processes > 1:  # the main process's decision holds
                    ends = broadcast_object_list(ends)
                if any(ends):
                    stopped_by = type(next(c for c, end in zip(every, ends, strict=True) if end)).__name__
                    if stopped_by != EvaluateAndSave.__name__:
                        self.record({"stopped_by": stopped_by})
                        if not EvaluateAndSave.due(self):  # the run ends evaluated and saved at its last step
                            self.evaluate_and_save()
                    break
        finally:
            bar.close()
            if self.tensorboard:
                self.accelerator.end_training()
        return self._finish(stopped_by)

    def _finish(self, stopped_by: str | None) -> dict[str, Any]:
        if self.accelerator.num_processes > 1 and torch.distributed.is_initialized():
            self.accelerator.wait_for_everyone()
            torch.distributed.destroy_process_group()  # no gloo thread left running at interpreter exit
        best = None if self.cfg.dev == NONE else self.best
        return {"steps": self.step, "dev": self.cfg.dev, "best_dev": best, "best": str(self.out / "best"),
                "last": str(self.out / "last"), "stopped_early": stopped_by == EvaluateAndSave.__name__,
                "stopped_by": stopped_by, "data": self.source}


def train(method: dict[str, Any], model: str, data: str | os.PathLike | None, out: str | os.PathLike,
          data_dir: str | os.PathLike | None = None, eval_limit: int | None = None, log_every: int = 10,
          progress: bool = True, tensorboard: bool = False, overwrite: bool = False,
          restart_from: str | None = None, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Train ``model`` with ``method`` on ``data`` (see :func:`cselab.train.data.training_rows`; None: the
    method's own ``data``, else ``cache/augment``); returns the run's summary. ``OUT/config.yaml`` is the resolved
    method, so ``cselab train --method OUT/config.yaml`` repeats the run.

    ``training.batch_size`` rows make one contrastive batch (its in-batch negatives), split across processes
    when there are several; ``training.grad_accum`` batches make one optimizer step. ``max_steps``,
    ``eval_steps`` and the learning-rate schedule count optimizer steps.

    ``OUT`` is locked while the run writes it; on an existing ``OUT`` the run continues only the same run (same
    config, data, base model, cselab version; :mod:`cselab.train.run_folder`), from ``OUT/last`` once every file
    there is verified (:mod:`cselab.train.state`). ``overwrite`` deletes the run's files first; ``restart_from=
    "best"`` continues from the best checkpoint's weights with a fresh optimizer when ``OUT/last`` is damaged.
    ``callbacks`` are called after every step, after the log and the evaluation (:mod:`cselab.train.callbacks`);
    one that returns True ends the run (the summary's ``stopped_by`` names its class)."""
    if restart_from not in (None, *run_folder.RESTARTS):
        raise TrainingError(f"--restart-from {restart_from!r}: expected one of {', '.join(run_folder.RESTARTS)}")
    out = check_folder(out, inputs=(model, data))  # never the model's or the data's own folder
    accelerator = _launch(TrainingConfig(**method["training"]), out, tensorboard)
    main = accelerator.is_main_process  # one process locks OUT (and overwrites it)
    with run_folder.RunLock(out) if main else contextlib.nullcontext():
        if overwrite and main:
            run_folder.overwrite(out)
        run = Run(accelerator, method, model, data, out, data_dir, eval_limit, tensorboard, restart_from)
        return run.run(log_every, progress, callbacks)
