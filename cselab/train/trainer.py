"""The training loop: a method (see :mod:`cselab.train.methods`) over the augment cache.

Through accelerate: one CPU or GPU, or several GPUs with ``accelerate launch`` (DDP; each
batch split across the processes, in-batch negatives gathered from all of them with their
gradient, see :mod:`cselab.train.distributed`); bf16/fp16 with ``mixed_precision``; gradient
accumulation over ``grad_accum`` batches; a linear learning-rate decay; STS-B dev evaluation every
``eval_steps`` (the dev set tokenized once) keeping the best checkpoint in ``OUT/best``, and
the full training state (model, optimizer, scheduler, RNG states, step) in ``OUT/last`` at
each evaluation: a run started again on the same ``OUT`` resumes from there, the data order
being a function of the seed and the epoch. A NaN or infinite loss stops the run, naming the
step, with ``OUT/last`` left as the last good state. With ``training.early_stop`` (a patience counted in
evaluations) the run ends once that many evaluations in a row did not improve the best dev score
(SG/SG-OPT's "early stopping endurance"). The optimizer is AdamW with the config's ``weight_decay``
(0 in every preset, as SimCSE), ``adam_betas`` and ``adam_eps``. ``OUT/log.jsonl`` has one line per
logged step and per evaluation; with ``tensorboard=True`` the same figures go to
``OUT/tensorboard`` too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from cselab.encoders.checkpoint import CheckpointInfo
from cselab.encoders.transformer import TransformerEncoder
from cselab.train.data import training_rows
from cselab.train.hooks import perturb_weights, restore_weights
from cselab.train.objectives import batch_losses, build_generators, fgsm_view_names, total_loss
from cselab.train.model import TrainingEncoder, save_checkpoint

STATE_FILE = "trainer_state.json"


class TrainingError(RuntimeError):
    """Training cannot go on (a diverged loss, an unusable cache)."""


class DevSet:
    """STS-B dev pairs, tokenized once (whole, as the checkpoint will encode them), scored by Spearman x 100."""

    def __init__(self, view, data_dir=None, limit: int | None = None):
        from cselab.data import load_sts

        (pairs,) = load_sts("stsb", "dev", data_dir)
        self.first, self.second = pairs.sentences1[:limit], pairs.sentences2[:limit]
        self.scores = pairs.scores[:limit]
        self.sentences = list(dict.fromkeys(self.first + self.second))
        self.view = view
        self.ids = view.tokenize(self.sentences)

    def score(self, batch_size: int = 128) -> float:
        from cselab.probes.metrics import cosine_rows, spearman

        vectors = self.view.encode_ids(self.ids, batch_size)
        position = {text: i for i, text in enumerate(self.sentences)}
        sims = cosine_rows(vectors[[position[t] for t in self.first]], vectors[[position[t] for t in self.second]])
        return 100 * spearman(sims, self.scores)


def _replace_folder(temporary: Path, final: Path) -> None:
    """Put ``temporary`` at ``final``; at every moment one complete copy exists (``final`` or ``final.old``)."""
    old = final.with_name(final.name + ".old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    temporary.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def build_encoder(method: dict[str, Any], model: str) -> TrainingEncoder:
    """The method's training encoder over the backbone ``model`` (a folder or a hub name)."""
    enc = method["encoder"]
    return TrainingEncoder.from_pretrained(
        model, pooler=enc["pooler"], prompt=enc.get("prompt"), max_length=method["training"]["max_length"],
        head=enc.get("head"), frozen=enc.get("frozen"), freeze_embeddings=enc.get("freeze_embeddings", False))


def initial_weights(encoder: TrainingEncoder) -> list[torch.Tensor]:
    """The backbone's initial weights for ``recall``: the frozen copy's when it has full precision (no second
    copy), else a snapshot."""
    if encoder.frozen is not None and next(encoder.frozen.parameters()).dtype == torch.float32:
        return list(encoder.frozen.parameters())
    return [p.detach().clone() for p in encoder.backbone.parameters()]


def build_optimizer(parameters: list[torch.Tensor], cfg: dict[str, Any]) -> torch.optim.AdamW:
    """AdamW with every argument from the config: ``lr``, ``adam_betas``, ``adam_eps``, ``weight_decay`` (0 in every
    preset, as SimCSE's Hugging Face Trainer settings; torch's own default, 0.01, would pull the weights to 0)."""
    return torch.optim.AdamW(parameters, lr=cfg["lr"], betas=tuple(cfg.get("adam_betas", (0.9, 0.999))),
                             eps=cfg.get("adam_eps", 1e-8), weight_decay=cfg.get("weight_decay", 0.0))


def backward_pass(model, method: dict[str, Any], rows: dict[str, list], backward, recall_terms=None,
                  generators=None, trainable: list[torch.Tensor] | None = None):
    """One batch's losses and their ``backward``; with ``hooks.weights`` (SAM/AWP) the gradient is taken again at
    the perturbed ``trainable`` weights, which are then restored. Returns the (first pass's) loss and its parts;
    a loss that is not finite is returned without a backward pass."""
    parts = batch_losses(model, method, rows, recall_terms, generators)
    loss = total_loss(method, parts)
    if not torch.isfinite(loss):
        return loss, parts
    backward(loss)
    hook = (method.get("hooks") or {}).get("weights")
    if hook:  # the gradient at the perturbed weights updates the original ones
        originals = perturb_weights(trainable, hook["kind"], hook["size"])
        for parameter in trainable:
            parameter.grad = None
        backward(total_loss(method, batch_losses(model, method, rows, recall_terms, generators)))
        restore_weights(trainable, originals)
    return loss, parts


def _local_rows(rows, order: torch.Tensor, batch: int, batch_size: int, accelerator):
    """This process's share of batch number ``batch`` of the epoch's ``order`` (the batch split in rank order)."""
    share = batch_size // accelerator.num_processes
    start = batch * batch_size + accelerator.process_index * share
    return rows[order[start:start + share].tolist()]


def train(method: dict[str, Any], model: str, data: str | os.PathLike | None, out: str | os.PathLike,
          data_dir: str | os.PathLike | None = None, eval_limit: int | None = None, log_every: int = 10,
          progress: bool = True, tensorboard: bool = False) -> dict[str, Any]:
    """Train ``model`` with ``method`` on ``data`` (see :func:`cselab.train.data.training_rows`; None: the
    method's own ``data``, else ``cache/augment``); returns the run's summary.

    ``training.batch_size`` rows make one contrastive batch (its in-batch negatives), split across processes
    when there are several; ``training.grad_accum`` batches make one optimizer step. ``max_steps``,
    ``eval_steps`` and the learning-rate schedule count optimizer steps."""
    from accelerate import Accelerator
    from accelerate.utils import broadcast_object_list, set_seed
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    cfg = method["training"]
    out = Path(out)
    if tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise TrainingError("tensorboard=True needs the tensorboard package: pip install 'cselab[tensorboard]'")
    accelerator = Accelerator(mixed_precision=cfg["mixed_precision"], log_with="tensorboard" if tensorboard else None,
                              project_dir=str(out))
    batch_size, accum, processes = cfg["batch_size"], cfg["grad_accum"], accelerator.num_processes
    launched = int(os.environ.get("WORLD_SIZE", 1))
    if launched != processes:  # each process would train alone, all writing to OUT
        raise TrainingError(f"{launched} processes were launched but accelerate set up {processes} (no GPU? on CPU, "
                            "set ACCELERATE_USE_CPU=1 for torchrun, the gloo backend is then used)")
    if batch_size % processes:
        raise TrainingError(f"training.batch_size {batch_size} does not split evenly across {processes} processes")
    if processes == 1 and torch.cuda.device_count() > 1:
        accelerator.print(f"{torch.cuda.device_count()} GPUs visible, training on one: DataParallel is not used "
                          "(its replicas would each see a part of the in-batch negatives); to use them all, run "
                          "`accelerate launch --multi_gpu -m cselab.cli train ...`")
    set_seed(cfg["seed"])
    out.mkdir(parents=True, exist_ok=True)
    rows, source = training_rows(method, data, data_dir)
    per_epoch = len(rows) // batch_size
    if per_epoch < accum:
        raise TrainingError(f"{source.get('path') or source.get('name')}: {len(rows)} rows, fewer than one step of "
                            f"{accum} batch(es) of {batch_size}")
    total = per_epoch * cfg["epochs"] // accum
    total = total if cfg.get("max_steps") is None else min(cfg["max_steps"], total)
    enc = method["encoder"]
    encoder = build_encoder(method, model)
    initial = initial_weights(encoder) if any(p.get("type", n) == "recall" for n, p in method["losses"].items()) \
        else None
    optimizer = build_optimizer([p for p in encoder.parameters() if p.requires_grad], cfg)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, total)
    weights_hook = (method.get("hooks") or {}).get("weights")
    if (weights_hook or fgsm_view_names(method)) and processes > 1:
        raise TrainingError("FGSM views and SAM/AWP take a second pass per step that is not synchronised across "
                            "processes yet: train them on one device")
    if weights_hook and accum > 1:
        raise TrainingError("hooks.weights (SAM/AWP) perturbs the weights once per step: set training.grad_accum=1")
    encoder, optimizer = accelerator.prepare(encoder, optimizer)
    accelerator.register_for_checkpointing(scheduler)  # stepped here once per optimizer step, whatever the processes
    generators = build_generators(method)
    for name in sorted(generators):  # their queues and histories resume with the run
        accelerator.register_for_checkpointing(generators[name])
    if processes > 1:
        set_seed(cfg["seed"] + accelerator.process_index)  # distinct dropout masks on each process
    core = accelerator.unwrap_model(encoder)
    trainable = [p for p in core.parameters() if p.requires_grad]

    def recall_terms():
        return list(core.backbone.parameters()), initial

    step, best, stale = 0, -math.inf, 0  # stale: evaluations in a row without a better dev score
    last = out / "last"
    if not last.exists() and last.with_name("last.old").exists():
        last = last.with_name("last.old")  # a kill between the two renames of _replace_folder
    if last.exists():
        accelerator.load_state(str(last))
        state = json.loads((last / STATE_FILE).read_text())
        step, best, stale = state["step"], state["best"], state.get("stale", 0)
    main = accelerator.is_main_process
    log = open(out / "log.jsonl", "a", encoding="utf-8") if main else None
    if tensorboard:
        accelerator.init_trackers("tensorboard")
    # training cuts sentences at training.max_length; the checkpoint encodes them whole (up to the tokenizer's
    # limit, at most 512 tokens), as SimCSE evaluates
    info = CheckpointInfo(pooler=enc["pooler"], prompt=enc.get("prompt"),
                          max_length=min(core.tokenizer.model_max_length, 512),
                          method=method["method"], base_model=str(model), config=method)
    dev = DevSet(TransformerEncoder(core.backbone, core.tokenizer, pooler=info.pooler, prompt=info.prompt,
                                    max_length=info.max_length), data_dir, eval_limit) if main else None

    def record(values: dict[str, Any]) -> None:
        if main:
            log.write(json.dumps({"step": step, **values}) + "\n")
            log.flush()
        accelerator.log({k: v for k, v in values.items() if k != "seconds"}, step=step)

    def evaluate_and_save() -> float | None:
        nonlocal best, stale
        score = None
        accelerator.save_state(str(out / "last.tmp"))
        accelerator.wait_for_everyone()  # every process's RNG state is in last.tmp before it is renamed
        if main:
            core.eval()
            score = dev.score()
            core.train()
            if score > best:
                best, stale = score, 0
                save_checkpoint(out / "best.tmp", core, info)
                _replace_folder(out / "best.tmp", out / "best")
            else:
                stale += 1
            (out / "last.tmp" / STATE_FILE).write_text(json.dumps({"step": step, "best": best, "stale": stale}))
            _replace_folder(out / "last.tmp", out / "last")
            record({"stsb_dev": score, "best": best})
        accelerator.wait_for_everyone()
        if processes > 1:  # only the main process evaluates; every process stops early at the same step
            stale = broadcast_object_list([stale])[0]
        return score

    patience = cfg.get("early_stop")
    bar = tqdm(total=total, initial=step, desc=f"Training {method['method']}", unit="step",
               disable=not (progress and main))
    clock = time.perf_counter()
    core.train()
    orders: dict[int, torch.Tensor] = {}  # the epoch's data order, a function of the seed and the epoch
    try:
        while step < total:
            parts_sum: dict[str, float] = {}
            for micro in range(accum):
                epoch, batch = divmod(step * accum + micro, per_epoch)
                if epoch not in orders:
                    orders = {epoch: torch.randperm(len(rows),
                                                    generator=torch.Generator().manual_seed(cfg["seed"] + epoch))}
                order = orders[epoch]
                local = _local_rows(rows, order, batch, batch_size, accelerator)
                for generator in generators.values():
                    generator.new_batch()
                with accelerator.no_sync(encoder) if micro < accum - 1 else contextlib.nullcontext():
                    loss, parts = backward_pass(encoder, method, local,
                                                lambda value: accelerator.backward(value / accum), recall_terms,
                                                generators, trainable)
                if not torch.isfinite(loss):
                    raise TrainingError(f"the loss became {loss.item()} at step {step + 1}; the last good state "
                                        f"is {out / 'last'} (best checkpoint {out / 'best'}); lower training.lr "
                                        "or check the data")
                for key, value in {"loss": loss, **parts}.items():
                    parts_sum[key] = parts_sum.get(key, 0.0) + value.item() / accum
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            bar.update(1)
            if step % log_every == 0 or step == total:
                if processes > 1:  # each process holds its share; their mean is the batch's loss
                    means = accelerator.reduce(torch.tensor(list(parts_sum.values()), device=accelerator.device),
                                               reduction="mean")
                    parts_sum = dict(zip(parts_sum, means.tolist(), strict=True))
                record({**parts_sum, "lr": scheduler.get_last_lr()[0],
                        "seconds": round(time.perf_counter() - clock, 2)})
                bar.set_postfix(loss=f"{parts_sum['loss']:.4f}")
            if step % cfg["eval_steps"] == 0 or step == total:
                score = evaluate_and_save()
                if main:
                    bar.set_postfix(loss=f"{parts_sum['loss']:.4f}", dev=f"{score:.2f}")
                if patience is not None and stale >= patience:
                    record({"early_stop": f"{stale} evaluations without a better dev score"})
                    break
    finally:
        bar.close()
        if log is not None:
            log.close()
        if tensorboard:
            accelerator.end_training()
    if processes > 1 and torch.distributed.is_initialized():
        accelerator.wait_for_everyone()
        torch.distributed.destroy_process_group()  # no gloo thread left running at interpreter exit
    return {"steps": step, "best_stsb_dev": best, "best": str(out / "best"), "last": str(out / "last"),
            "stopped_early": patience is not None and stale >= patience, "data": source}
