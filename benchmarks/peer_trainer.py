"""cselab's trainer beside sentence-transformers' on the same work, for ``gpu_check.py``'s ``ceiling`` section.

The same work: the same random BERT folder, [CLS] vectors with no head (``encoder.pooler=cls_before_pooler``,
``encoder.head=null`` in cselab; a ``Pooling`` of mode ``cls`` in sentence-transformers), each sentence paired with
itself, InfoNCE at temperature 0.05 (``MultipleNegativesRankingLoss(scale=20)``), the same batch, 32 tokens, bf16
autocast on CUDA and no evaluation. Each library's own entry point runs it: ``SentenceTransformerTrainer.train`` and
``cselab``'s ``train`` (as ``cselab train`` runs it: its defaults decide compilation, CUDA graphs and the rest), each
with a callback that reads the clock after step ``skip`` and after the last step, the device synchronised first (a
read at every step would stop the host from running ahead of the device). That it is the same work is shown on a
first batch with dropout off: both libraries' losses of it, in fp32.

    python benchmarks/peer_trainer.py cselab MODEL DATA --batch 64 --steps 100 --skip 20 [--method osscse]
        [--set KEY=VALUE ...] [--profile 5] --out DIR
    python benchmarks/peer_trainer.py sentence-transformers MODEL CORPUS --batch 64 --steps 100 --skip 20 --out DIR

prints one JSON line: steps/s over steps ``skip + 1`` to the last, and the peak memory (MiB).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

# simcse's objective on sentence-transformers' model: the last layer's [CLS] state, no head (cselab's ``cls`` would
# add BERT's pooler layer, as SimCSE's code names it)
SAME_WORK = ("encoder.pooler=cls_before_pooler", "encoder.head=null")


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_mib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None


def st_model(model_dir: Path, device: str, max_length: int, own_modules: bool = False):
    """A SentenceTransformer of ``model_dir``'s transformer and [CLS] pooling; with ``own_modules``, the folder's
    own modules (a sentence-transformers model's pooling), its length cut at ``max_length``."""
    from sentence_transformers import SentenceTransformer, models

    if own_modules:
        model = SentenceTransformer(str(model_dir), device=device)
        model.max_seq_length = max_length
        return model
    width = json.loads((Path(model_dir) / "config.json").read_text())["hidden_size"]
    transformer = models.Transformer(str(model_dir), max_seq_length=max_length)
    return SentenceTransformer(modules=[transformer, models.Pooling(width, pooling_mode="cls")], device=device)


def st_first_batch_loss(model_dir: Path, device: str, texts: list[str], max_length: int) -> float:
    """sentence-transformers' MultipleNegativesRankingLoss(scale=20) of ``texts`` paired with themselves, in fp32."""
    import torch
    from sentence_transformers import losses

    model = st_model(model_dir, device, max_length)
    loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
    features = {key: value.to(device) if hasattr(value, "to") else value  # 6.x adds a few plain values
                for key, value in model.tokenize(texts).items()}
    with torch.no_grad():
        return float(loss([features, dict(features)], None))


def rate(marks: list[float], steps: int, skip: int) -> float:
    """Steps per second between the clock's two readings: after step ``skip`` and after step ``steps``."""
    return (steps - skip) / (marks[1] - marks[0])


def st_train(model_dir: Path, device: str, texts: list[str], batch: int, steps: int, skip: int, bf16: bool,
             work: Path, clock: Callable[[], float] = time.perf_counter, own_modules: bool = False) -> dict:
    """``SentenceTransformerTrainer`` for ``steps`` steps on (s, s) pairs (``own_modules``: :func:`st_model`'s);
    ``clock``: what is read after step ``skip`` and the last (the process's CPU time: ``time.process_time``)."""
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformerTrainer, SentenceTransformerTrainingArguments,
                                       losses)
    from transformers import TrainerCallback

    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (skip, steps):
                synchronize(device)
                marks.append(clock())

    model = st_model(model_dir, device, 32, own_modules)
    arguments = SentenceTransformerTrainingArguments(
        output_dir=str(work), per_device_train_batch_size=batch, max_steps=steps, learning_rate=3e-5, warmup_steps=0,
        bf16=bf16, eval_strategy="no", save_strategy="no", logging_strategy="no", report_to="none",
        dataloader_drop_last=True, seed=42, disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=model, args=arguments, loss=losses.MultipleNegativesRankingLoss(
        model, scale=20.0), train_dataset=Dataset.from_dict({"anchor": texts, "positive": texts}), callbacks=[Clock()])
    trainer.train()
    return {"steps_per_s": rate(marks, steps, skip), "peak_mib": peak_mib(device)}


def cselab_train(model_dir: Path, device: str, data: Path, batch: int, steps: int, skip: int, bf16: bool, out: Path,
                 method: str = "simcse", overrides: tuple[str, ...] = SAME_WORK, profiled: int = 0,
                 clock: Callable[[], float] = time.perf_counter, profile: str | None = None) -> dict:
    """``cselab``'s ``train`` of ``method`` (by default simcse, the same work; its ``profile`` of settings) for
    ``steps`` steps on ``data``, and what it decided for its steps (compilation, CUDA graphs ...); with ``profiled``,
    that many steps more under ``torch.profiler`` (after the timed ones): the device's busy time and kernels a step,
    and the top operators. ``clock`` as in :func:`st_train`."""
    from cselab.train.config.methods import load_method
    from cselab.train.run.callbacks import Callback
    from cselab.train.run.options import RunOptions
    from cselab.train.recipe import train

    marks: list[float] = []
    profiler = Profiled(device, profiled)

    class Clock(Callback):
        def on_step(self, state, control):
            if state.step in (skip, steps):
                synchronize(device)
                marks.append(clock())
            profiler.at(state.step - steps)

    total = steps + profiled
    config = load_method(method, [*overrides, f"training.batch_size={batch}", f"training.max_steps={total}",
                                  "training.max_length=32", "training.dev=none", f"training.eval_steps={total}",
                                  f"training.mixed_precision={'bf16' if bf16 else 'no'}"], profile)
    train(config, str(model_dir), str(data), out, RunOptions(progress=False, callbacks=[Clock()]))
    execution = json.loads((out / "run.json").read_text())["provenance"]["execution"]
    return {"steps_per_s": rate(marks, steps, skip), "peak_mib": peak_mib(device), "execution": execution,
            **({"profile": profiler.found} if profiled else {})}


class Profiled:
    """``torch.profiler`` over ``steps`` optimizer steps: started at step 0 of them (:meth:`at`), stopped after the
    last; ``found`` holds the device's busy milliseconds and kernels a step, and the top operators."""

    def __init__(self, device: str, steps: int):
        self.device, self.steps, self.profile, self.found = device, steps, None, {}

    def at(self, step: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        if not self.steps:
            return
        if step == 0:
            cuda = self.device.startswith("cuda")
            self.profile = profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])])
            self.profile.__enter__()
        elif step == self.steps:
            synchronize(self.device)
            self.profile.__exit__(None, None, None)
            self.found = self.summary()

    def summary(self) -> dict:
        from torch.autograd import DeviceType

        events = self.profile.events()
        kernels = [e for e in events if e.device_type != DeviceType.CPU and not e.is_user_annotation]
        averages = self.profile.key_averages()
        cuda = self.device.startswith("cuda")
        return {"steps": self.steps, "device_busy_ms": sum(e.self_device_time_total for e in kernels) / self.steps
                / 1000 if cuda else None, "kernels_per_step": len(kernels) / self.steps,
                "by_cpu": averages.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=50),
                **({"by_device": averages.table(sort_by="self_device_time_total", row_limit=15,
                                                max_name_column_width=50)} if cuda else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trainer", choices=("cselab", "sentence-transformers"))
    parser.add_argument("model", type=Path)
    parser.add_argument("data", type=Path, help="cselab: a corpus or table; sentence-transformers: a corpus")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--skip", type=int, default=20, help="steps before the clock starts")
    parser.add_argument("--method", default="simcse", help="cselab: the method (default: simcse, the same work)")
    parser.add_argument("--set", action="append", default=None, help="cselab: settings (default: SAME_WORK's)")
    parser.add_argument("--profile", type=int, default=0, help="cselab: steps profiled after the timed ones")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    bf16 = args.device.startswith("cuda")
    if args.trainer == "cselab":
        found = cselab_train(args.model, args.device, args.data, args.batch, args.steps, args.skip, bf16, args.out,
                             args.method, tuple(SAME_WORK if args.set is None else args.set), args.profile)
    else:
        texts = [line for line in args.data.read_text(encoding="utf-8").splitlines() if line]
        found = st_train(args.model, args.device, texts, args.batch, args.steps, args.skip, bf16, args.out)
    print(json.dumps({"trainer": args.trainer, "method": args.method, "batch": args.batch, "steps": args.steps,
                      "timed_after": args.skip, **found}))


if __name__ == "__main__":
    main()
