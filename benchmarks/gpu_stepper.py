"""A method's steps as the trainer takes them, for ``gpu_check.py``'s step sections (:class:`Stepper`), and their
timing."""

from __future__ import annotations

import time
from pathlib import Path

from gpu_fixtures import peak_memory_mib, sentences, synchronize


class Stepper:
    """One method's training steps as the trainer takes them: the parts from ``cselab.train.run.setup`` and the
    trainer's own :class:`~cselab.train.step.Step` (nothing read back in a step), on synthetic rows, with a constant
    learning rate of 1e-5; fp16 through the trainer's accelerator (its loss scaling; CUDA only, as the trainer).

    Levers, each measured on its own (the ``levers`` section): ``ahead`` (the 4 batches the steps cycle through are
    collated before the timing, as the trainer's loader threads keep ahead of the step), ``fused()`` (the trainer's
    fused update, ``execution.fused_update``: LegacyAdamW's own update in torch's fused kernel) and
    ``compile(mode)`` (the backbone through ``torch.compile``)."""

    def __init__(self, method_name: str, model_dir: Path, device: str, batch_size: int, overrides=()):
        import torch

        from cselab.train.config.methods import load_method
        from cselab.train.run.setup import setup

        self.method = load_method(method_name, ["training.max_length=32", "training.lr=1e-5", "training.warmup=0",
                                                f"training.batch_size={batch_size}", "training.dev=none", *overrides])
        self.device, self.batch_size = device, batch_size
        self.pool = sentences(batch_size * 4, seed=batch_size)
        # the setup's loader is not iterated: each step's batch comes from rows(), collated by the loader's collator
        self.parts = setup(self.method, str(model_dir), self.pool, "synthetic rows")
        self.encoder = self.parts.encoder
        self.encoder.to(device)
        if self.encoder.frozen is not None:
            self.encoder.frozen.to(device)
        self.collate = self.parts.collator
        self.torch = torch
        self.collated, self.fp16 = None, None
        self._steps(self.parts.optimizer)

    def _steps(self, optimizer) -> None:
        torch = self.torch
        self.optimizer = optimizer
        self.take = self.parts.step(optimizer=optimizer,
                                    scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0))

    def ahead(self, on: bool = True) -> None:
        """Collate the batches the steps cycle through once, now (``on``), or in each step again."""
        self.collated = [self.collate(self.rows(step)) for step in range(4)] if on else None

    def fused(self) -> None:
        """The trainer's fused update (``build_optimizer(..., fused=True)``: LegacyAdamW's update, one kernel)."""
        from cselab.train.run.optim import build_optimizer

        named = [(n, p) for n, p in self.encoder.named_parameters() if p.requires_grad]
        self._steps(build_optimizer(named, self.method.training, True))

    def compile(self, mode: str = "default") -> None:
        """The backbone through ``torch.compile`` (in place: its weights' names unchanged); ``reduce-overhead``
        replays CUDA graphs, so each step is marked as a new one."""
        self.encoder.backbone.compile(mode=mode)
        self.take.cuda_graphs = mode == "reduce-overhead"

    def _fp16_step(self):
        """The step under float16 as the trainer runs it: its accelerator (the loss scaled for backward, the
        gradients unscaled before clipping, a step skipped on overflow), built once."""
        if self.fp16 is None:
            from accelerate import Accelerator
            from accelerate.state import AcceleratorState

            if not self.device.startswith("cuda"):
                raise RuntimeError("fp16 needs a CUDA device (the trainer refuses it on the CPU)")
            AcceleratorState._reset_state(reset_partial_state=False)
            accelerator = Accelerator(mixed_precision="fp16")
            model, optimizer = accelerator.prepare(self.encoder, self.optimizer)
            self.fp16 = self.parts.step(model, optimizer, accelerator,
                                        self.torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0))
        return self.fp16

    def rows(self, step: int) -> dict[str, list[str]]:
        start = (step % 4) * self.batch_size
        batch = self.pool[start:start + self.batch_size]
        other, negated = [" ".join(reversed(s.split())) for s in batch], ["not " + s for s in batch]
        return {"text": batch, "paraphrase": other, "negation": negated, "positive": other, "hard_negative": negated}

    def step(self, step: int, bf16: bool, fp16: bool = False):
        """One training step as the trainer takes it: the batch collated (a ``collate`` profiler range), then the
        trainer's :class:`~cselab.train.step.Step` (its ``forward``, ``backward`` and ``optimizer`` ranges), under
        bfloat16 autocast with ``bf16`` (as accelerate's ``mixed_precision: bf16``). Returns the step's losses,
        on the device."""
        from torch.profiler import record_function

        torch = self.torch
        with record_function("collate"):
            batch = self.collate(self.rows(step)) if self.collated is None else self.collated[step % 4]
        if fp16:
            return self._fp16_step()([batch])
        with torch.autocast("cuda" if self.device.startswith("cuda") else "cpu", dtype=torch.bfloat16,
                            enabled=bf16):
            return self.take([batch])

    def loss(self, step: int, bf16: bool, fp16: bool = False) -> float:
        """:meth:`step`'s loss, read back."""
        return float(self.step(step, bf16, fp16)["loss"])

    def flops_per_step(self) -> float:
        """3 x forward FLOPs of every forward pass of a step (see the module docstring)."""
        config = self.encoder.backbone.config
        embedding = sum(p.numel() for p in self.encoder.backbone.get_input_embeddings().parameters())
        non_embedding = sum(p.numel() for p in self.encoder.backbone.parameters()) - embedding
        total = 0.0
        for view in self.method.views.values():
            if view.column is None:
                continue
            ids, _ = self.encoder.tokenize(self.rows(0)[view.column][:1], prompt=view.prompt)
            length = ids.shape[1]
            forward = 2 * non_embedding * length + 4 * config.num_hidden_layers * length ** 2 * config.hidden_size
            total += 3 * forward * self.batch_size
        return total

    def tokens_per_step(self) -> int:
        return sum(int(self.encoder.tokenize(self.rows(0)[v.column], prompt=v.prompt)[1].sum())
                   for v in self.method.views.values() if v.column is not None)


def timed(stepper: Stepper, bf16: bool, args, peak: float | None, warmup: int | None = None,
          steps: int | None = None) -> dict:
    """``steps`` (default ``args.steps``) steps of ``stepper`` after ``warmup`` (default ``args.warmup``) untimed
    ones: steps/s, sentences/s, tokens/s, TFLOP/s, MFU and the peak memory since the last :func:`reset_peak`."""
    steps = args.steps if steps is None else steps
    for warm in range(args.warmup if warmup is None else warmup):
        stepper.step(warm, bf16)
    synchronize(args.device)
    clock = time.perf_counter()
    for step in range(steps):
        stepper.step(step, bf16)
    synchronize(args.device)
    seconds = (time.perf_counter() - clock) / steps
    flops = stepper.flops_per_step()
    return {"steps_per_s": 1 / seconds, "sentences_per_s": stepper.batch_size / seconds,
            "tokens_per_s": stepper.tokens_per_step() / seconds, "tflops": flops / seconds / 1e12,
            "mfu": flops / seconds / 1e12 / peak if peak else None, "peak_mib": peak_memory_mib(args.device)}
