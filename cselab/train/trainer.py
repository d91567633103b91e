"""The training loop: a method (see :mod:`cselab.train.methods`) over the augment cache.

One process on CPU or one GPU through accelerate (bf16/fp16 with ``mixed_precision``,
gradient accumulation), a linear learning-rate decay, STS-B dev evaluation every
``eval_steps`` (the dev set tokenized once) keeping the best checkpoint in ``OUT/best``, and
the full training state (model, optimizer, scheduler, RNG states, step) in ``OUT/last`` at
each evaluation: a run started again on the same ``OUT`` resumes from there, the data order
being a function of the seed and the epoch. A NaN or infinite loss stops the run, naming the
step, with ``OUT/last`` left as the last good state. ``OUT/log.jsonl`` has one line per
logged step and per evaluation.
"""

from __future__ import annotations

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
from cselab.train.methods import encode_views, method_losses, total_loss
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


def train(method: dict[str, Any], model: str, data: str | os.PathLike, out: str | os.PathLike,
          data_dir: str | os.PathLike | None = None, eval_limit: int | None = None, log_every: int = 10,
          progress: bool = True) -> dict[str, Any]:
    """Train ``model`` with ``method`` on the cache ``data``; returns the run's summary."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    from cselab.augment.cache import load_cache

    cfg = method["training"]
    accelerator = Accelerator(mixed_precision=cfg["mixed_precision"], gradient_accumulation_steps=cfg["grad_accum"])
    if accelerator.num_processes > 1:
        raise TrainingError("several processes are not supported yet: in-batch negatives are not gathered across "
                            "them; train on one device")
    set_seed(cfg["seed"])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = load_cache(data)
    batch_size = cfg["batch_size"]
    per_epoch = len(rows) // batch_size
    if per_epoch == 0:
        raise TrainingError(f"{data}: {len(rows)} rows, fewer than one batch of {batch_size}")
    total = per_epoch * cfg["epochs"] if cfg.get("max_steps") is None else min(cfg["max_steps"],
                                                                                per_epoch * cfg["epochs"])
    enc = method["encoder"]
    encoder = TrainingEncoder.from_pretrained(model, pooler=enc["pooler"], prompt=enc.get("prompt"),
                                              max_length=cfg["max_length"], mlp=enc.get("mlp", False))
    initial = [p.detach().clone() for p in encoder.backbone.parameters()] if "recall" in method["losses"] else None
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=cfg["lr"])
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, total)
    encoder, optimizer, scheduler = accelerator.prepare(encoder, optimizer, scheduler)
    core = accelerator.unwrap_model(encoder)

    step, best = 0, -math.inf
    last = out / "last"
    if not last.exists() and last.with_name("last.old").exists():
        last = last.with_name("last.old")  # a kill between the two renames of _replace_folder
    if last.exists():
        accelerator.load_state(str(last))
        state = json.loads((last / STATE_FILE).read_text())
        step, best = state["step"], state["best"]
    log = open(out / "log.jsonl", "a", encoding="utf-8")
    # training cuts sentences at training.max_length; the checkpoint encodes them whole (up to the tokenizer's
    # limit, at most 512 tokens), as SimCSE evaluates
    info = CheckpointInfo(pooler=enc["pooler"], prompt=enc.get("prompt"),
                          max_length=min(core.tokenizer.model_max_length, 512),
                          method=method["method"], base_model=str(model), config=method)
    dev = DevSet(TransformerEncoder(core.backbone, core.tokenizer, pooler=info.pooler, prompt=info.prompt,
                                    max_length=info.max_length), data_dir, eval_limit)

    def evaluate_and_save() -> float:
        nonlocal best
        core.eval()
        score = dev.score()
        core.train()
        if score > best:
            best = score
            save_checkpoint(out / "best.tmp", core, info)
            _replace_folder(out / "best.tmp", out / "best")
        accelerator.save_state(str(out / "last.tmp"))
        (out / "last.tmp" / STATE_FILE).write_text(json.dumps({"step": step, "best": best}))
        _replace_folder(out / "last.tmp", out / "last")
        log.write(json.dumps({"step": step, "stsb_dev": score, "best": best}) + "\n")
        log.flush()
        return score

    bar = tqdm(total=total, initial=step, desc=f"Training {method['method']}", unit="step", disable=not progress)
    clock = time.perf_counter()
    core.train()
    try:
        while step < total:
            epoch, position = divmod(step, per_epoch)
            order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(cfg["seed"] + epoch))
            batch = rows[order[position * batch_size:(position + 1) * batch_size].tolist()]
            with accelerator.accumulate(encoder):
                parts = method_losses(method, encode_views(core, method, batch),
                                      lambda: (list(core.backbone.parameters()), initial))
                loss = total_loss(method, parts)
                if not torch.isfinite(loss):
                    raise TrainingError(f"the loss became {loss.item()} at step {step + 1}; the last good state is "
                                        f"{out / 'last'} (best checkpoint {out / 'best'}); lower training.lr or check "
                                        "the data")
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            step += 1
            bar.update(1)
            if step % log_every == 0 or step == total:
                record = {"step": step, "loss": loss.item(), **{k: v.item() for k, v in parts.items()},
                          "lr": scheduler.get_last_lr()[0], "seconds": round(time.perf_counter() - clock, 2)}
                log.write(json.dumps(record) + "\n")
                bar.set_postfix(loss=f"{loss.item():.4f}")
            if step % cfg["eval_steps"] == 0 or step == total:
                bar.set_postfix(loss=f"{loss.item():.4f}", dev=f"{evaluate_and_save():.2f}")
    finally:
        bar.close()
        log.close()
    return {"steps": step, "best_stsb_dev": best, "best": str(out / "best"), "last": str(out / "last")}
