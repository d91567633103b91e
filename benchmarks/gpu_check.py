"""GPU check: cselab's training, augment and probe paths on an accelerator, measured, in one call.

Nothing is downloaded: models are random-init transformers built from their configs (BERT-base, or a tiny
BERT with ``--tiny``), the tokenizer is a WordPiece vocabulary of synthetic words written here (30,522
entries, as bert-base-uncased), sentences are random words of that vocabulary (30-40 words, so that every
training sequence fills the 32-token length), and the STS-B dev file the trainer evaluates on is synthetic
too. Sections (``--only`` picks some):

- ``steps``: ``simcse`` and ``osscse`` (its prompts, so 32 + 10 tokens; ``--methods`` picks) training steps
  through the trainer's own ``Step`` at batch 64 and 512, length 32, in fp32, TF32 and bf16 autocast,
  and bf16 under ``torch.compile`` (``--compile-all``: every mode; ``--compile-only``: no eager rows): steps/s,
  sentences/s, tokens/s, peak memory, TFLOP/s and MFU against the device's dense bf16 peak. FLOPs per step =
  3 x forward, forward per sequence of S tokens = 2 N S + 4 L S^2 d (N: non-embedding parameters, L layers,
  width d), summed over the method's encoded views.
- ``levers``: ``simcse`` at batch 512 and 64 (bf16 on CUDA) as the trainer steps, then with one lever more per row:
  batches collated ahead, ``torch.compile``, CUDA graphs (batch 64), the trainer's fused update (LegacyAdamW's, one
  kernel); ``osscse`` at batch 64 with the first two (see :class:`Stepper`).
- ``cached``: cached InfoNCE, batch 4,096 by mini-batches of 256 against plain batch 256: peak memory and time
  per sentence.
- ``ceiling``: ``cselab train --method simcse`` as users run it (its defaults: compiled, CUDA graphs, batches
  tokenised ahead, nothing read back each step) beside the same step as a plain PyTorch loop
  (``benchmarks/ceiling.py``, no cselab import) and beside ``SentenceTransformerTrainer`` on the same work
  (``benchmarks/peer_trainer.py``), at batch 512 and 64, each in a process of its own: steps/s, MFU, the ratios; then
  ``osscse`` through ``cselab train`` at batch 64. First, both libraries' loss of one batch with dropout off.
- ``family``: the SimCSE family (``--family``: ``promptbert``, ``promptbert-sup``, ``sncse``, ``esimcse``,
  ``diffcse``, ``rankcse``, ``infocse`` by default) through ``cselab train`` at batch 64 in bf16, not compiled: one
  row each, the models their losses name being random stand-ins of the released ones' sizes
  (``benchmarks/stand_ins.py``; ``infocse`` reads a masked-LM head too).
- ``encode``: ``probe run``'s encoding beside sentence-transformers' ``encode`` of the same model: sentences/s and
  that the vectors agree.
- ``agreement``: 20 ``simcse`` steps from the same weights and data, dropout off, in fp32, in bf16 and (on CUDA,
  where the trainer takes it) in fp16 through the trainer's accelerator (its loss scaling; the official profiles'
  precision): each step's losses within 5% (relative) of fp32's, none NaN.
- ``run``: a whole ``cselab train`` (subprocess, bf16 on CUDA) with dev evaluation and best checkpoint, killed
  after its first evaluation and resumed to the end; then ``sam``, ``awp-fgsm`` and ``sg`` (frozen copy in
  bf16 on CUDA) for a few steps each.
- ``augment``: masked-LM substitution batched (``MaskedLMEditor``) against one forward pass per mask, on a
  random BERT-base masked LM; translation with length-sorted batches (``HFTranslator``) against input order, a
  random transformer-big seq2seq (WMT19's size: 6+6 layers, width 1024, FFN 8192) whose outputs are forced to
  the batch's input length; sentences/s and the projected hours for 1M sentences x 2 pivots (greedy, one
  candidate).
- ``probes``: sentence encoding (what the STS suite costs) on the device and on the CPU, and the transfer
  classifier (SentEval's full classifier setup, nested 10-fold CV) on an MR-sized problem, which runs on the CPU.
- ``lora``: a decoder LM's LoRA step (``benchmarks/lora_step.py``): a Qwen2 of Qwen2-0.5B's shape (``--tiny``: a
  2-layer Llama) over the synthetic vocabulary, batch 64 (8), length 32, bf16 autocast on CUDA, LoRA r 8 on q_proj and
  v_proj with and without gradient checkpointing, and QLoRA (the base in 4 bits, NF4) with it, each in a process of
  its own: seconds per step and peak memory.
- ``profile``: ``torch.profiler`` over the steps of each of ``--profile-methods`` (``simcse``) at each of
  ``--profile-batches`` (bf16 on CUDA): the step split into collation (tokenising), forward, backward and
  optimizer, the device's busy time per step, and the top operators.

``--deadline S`` skips what is left after S seconds (a lent device's time is short); the report is written after
each section, with the machine's state after it (load, child processes, threads).

    python benchmarks/gpu_check.py --device cuda --out benchmarks/gpu-check      # make gpu-check
    python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/gpu-check       # the CPU test's run

Writes ``OUT/gpu-check.json`` and ``OUT/gpu-check.md``; a section that fails is reported there and the others
still run (exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from stand_ins import LM_HEAD, stand_in_models, with_lm_head  # noqa: E402  (benchmarks/ is not a package)
NEEDED = {"torch": "all", "transformers": "all", "accelerate": "all", "numpy": "all", "scipy": "probes",
          "sklearn": "probes", "yaml": "all", "safetensors": "run", "tqdm": "all", "rapidfuzz": "augment",
          "sentence_transformers": "ceiling", "datasets": "ceiling", "peft": "lora", "bitsandbytes": "lora"}
SECTIONS = ("steps", "agreement", "run", "augment", "probes", "profile", "levers", "cached", "ceiling", "family",
            "encode", "lora")
DEADLINE = [math.inf]  # time.monotonic() past which what is left is skipped (--deadline)
TINY_SETTINGS = {"infocse": ("losses.aggregation_mlm.layers=1",)}  # what the 2-layer tiny model needs changed
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def missing_packages(sections: list[str]) -> list[str]:
    """``package (needed by: section)`` for each package the chosen sections need and the machine lacks."""
    absent = []
    for package, needed_by in NEEDED.items():
        if needed_by != "all" and needed_by not in sections:
            continue
        try:
            importlib.import_module(package)
        except ImportError:
            absent.append(f"{package} (needed by: {needed_by})")
    return absent


@cache
def synthetic_words(count: int = 3000) -> list[str]:
    """Distinct lower-case pseudo-words (2 to 4 of 12 syllables: 22,464 possible), each one WordPiece token of the
    synthetic vocabulary."""
    rng, syllables = random.Random(0), ["ka", "lo", "mi", "tes", "ra", "nu", "po", "sel", "di", "van", "be", "or"]
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


def save_tokenizer(folder: Path):
    """A bert-base-uncased-sized WordPiece tokenizer (30,522 entries) over the synthetic words and the prompts'."""
    from transformers import BertTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    prompt_words = ["this", "sentence", "of", "means", ":", '"', ".", "not"]
    vocab = special + prompt_words + synthetic_words()
    vocab += [f"[unused{i}]" for i in range(30522 - len(vocab))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # transformers 4 names the file vocab_file, transformers 5 vocab
    key = "vocab_file" if "vocab_file" in inspect.signature(BertTokenizerFast.__init__).parameters else "vocab"
    tokenizer = BertTokenizerFast(**{key: str(folder / "vocab.txt")}, do_lower_case=True)
    if len(tokenizer) != len(vocab):
        raise RuntimeError(f"the synthetic tokenizer has {len(tokenizer)} entries, not {len(vocab)}")
    tokenizer.save_pretrained(folder)
    return tokenizer


def sentences(count: int, seed: int = 0, words: tuple[int, int] = (30, 40)) -> list[str]:
    rng, vocabulary = random.Random(seed), synthetic_words()
    return [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(*words))) for _ in range(count)]


def bert_config(tiny: bool, **overrides):
    from transformers import BertConfig

    size = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64} if tiny \
        else {}
    return BertConfig(vocab_size=30522, **size, **overrides)


def save_bert(folder: Path, tiny: bool, masked_lm: bool = False, **config) -> Path:
    import torch
    from transformers import BertForMaskedLM, BertModel

    torch.manual_seed(0)
    (BertForMaskedLM if masked_lm else BertModel)(bert_config(tiny, **config)).save_pretrained(folder)
    save_tokenizer(folder)
    return folder


def write_dev_set(root: Path, pairs: int) -> Path:
    """A synthetic STS-B dev file in SentEval's layout, for the trainer's evaluation."""
    folder = root / "senteval" / "downstream" / "STS" / "STSBenchmark"
    folder.mkdir(parents=True, exist_ok=True)
    first, second = sentences(pairs, 1, (8, 20)), sentences(pairs, 2, (8, 20))
    rng = random.Random(3)
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{rng.uniform(0, 5):.3f}\t{a}\t{b}"
             for i, (a, b) in enumerate(zip(first, second))]
    (folder / "sts-dev.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_memory_mib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None


def reset_peak(device: str) -> None:
    """The peak since now: the memory of what went before (a previous row's model) freed first."""
    import gc

    import torch

    if device.startswith("cuda"):
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_tflops(device: str, override: float | None) -> float | None:
    import torch

    if override:
        return override
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return next((value for key, value in PEAK_BF16_TFLOPS.items() if key in name), None)


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


def set_mode(mode: str) -> bool:
    """TF32 on or off for the matmuls; returns whether the mode autocasts to bf16."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    return mode == "bf16"


def late() -> bool:
    """Whether the run is past its ``--deadline``: what is left is skipped, and said to be."""
    return time.monotonic() > DEADLINE[0]


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


def measure_steps(args, model_dir: Path, peak: float | None) -> list[dict]:
    batches = (8, 16) if args.tiny else tuple(int(b) for b in args.batches.split(","))
    modes = args.modes.split(",") if args.modes else ["fp32", "bf16"] + (["tf32"] if args.device.startswith("cuda")
                                                                         else [])
    methods = [m for m in args.methods.split(",") if m]
    plan = [(m, b, mode, False) for m in methods for b in batches for mode in modes if not args.compile_only]
    if not args.no_compile:
        plan += [(m, b, mode, True) for m in methods for b in batches
                 for mode in (modes if args.compile_all else ["bf16"])]
    rows = []
    for method, batch, mode, compiled in plan:
        import torch

        row = {"method": method, "batch": batch, "mode": mode, "compile": compiled}
        if late():
            rows.append({**row, "error": "skipped: past the deadline"})
            continue
        reset_peak(args.device)
        try:
            stepper = Stepper(method, model_dir, args.device, batch)
            if compiled:
                stepper.compile()
            row.update(timed(stepper, set_mode(mode), args, peak))
        except torch.cuda.OutOfMemoryError:
            row["error"] = "out of memory"
        except Exception:  # noqa: BLE001  (the row says why; the other rows still run)
            row["error"] = row_error()
        finally:
            set_mode("fp32")
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


# The levers, cumulative: each row adds one to the row before (name, what it sets)
LEVERS = (("as the trainer steps", {}), ("+ collated ahead", {"ahead": True}),
          ("+ torch.compile", {"compile": "default"}), ("+ CUDA graphs", {"compile": "reduce-overhead"}),
          ("+ fused update", {"fused": True}))


def measure_levers(args, model_dir: Path, peak: float | None) -> list[dict]:
    """``osscse`` at the smallest batch as the trainer steps and with the first two of :data:`LEVERS`, then
    ``simcse`` (bf16 on CUDA) at each batch with the levers added one at a time on one model (CUDA graphs at the
    smallest batch, on CUDA only; no compilation with ``--no-compile``)."""
    import torch

    batches = (8, 16) if args.tiny else (512, 64)
    cuda = args.device.startswith("cuda")
    plan = [("osscse", min(batches), LEVERS[:2])] + [("simcse", batch, LEVERS) for batch in batches]
    rows = []
    for method, batch, levers in plan:
        stepper = None
        for name, change in levers:
            row = {"method": method, "batch": batch, "lever": name}
            if "compile" in change and (args.no_compile or (change["compile"] == "reduce-overhead"
                                                            and (not cuda or batch != min(batches)))):
                continue
            if late():
                rows.append({**row, "error": "skipped: past the deadline"})
                continue
            reset_peak(args.device)
            try:
                stepper = stepper or Stepper(method, model_dir, args.device, batch)
                stepper.ahead(change.get("ahead", stepper.collated is not None))
                if "compile" in change:
                    stepper.compile(change["compile"])
                if change.get("fused"):
                    stepper.fused()
                row.update(timed(stepper, cuda, args, peak, max(args.warmup, 3)))
            except torch.cuda.OutOfMemoryError:
                row["error"] = "out of memory"
            except Exception:  # noqa: BLE001  (the row says why; the other rows still run)
                row["error"] = row_error()
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def measure_cached(args, model_dir: Path, peak: float | None) -> dict:
    """Cached InfoNCE (``training.mini_batch_size``): ``simcse`` (bf16 on CUDA, batches collated ahead) at a big
    batch by mini-batches against the plain mini-batch size: peak memory and time per sentence."""
    big, small = (64, 16) if args.tiny else (4096, 256)
    cuda, found = args.device.startswith("cuda"), {}
    for name, batch, overrides, steps in (("plain", small, (), args.steps),
                                          ("cached", big, (f"training.mini_batch_size={small}",), 3)):
        reset_peak(args.device)
        stepper = Stepper("simcse", model_dir, args.device, batch, overrides)
        stepper.ahead()
        found[name] = {"batch": batch, **timed(stepper, cuda, args, peak, 2, steps)}
        del stepper
    plain, cached = found["plain"], found["cached"]
    found["mini_batch_size"] = small
    found["memory_ratio"] = cached["peak_mib"] / plain["peak_mib"] if plain["peak_mib"] else None
    found["time_per_sentence_ratio"] = plain["sentences_per_s"] / cached["sentences_per_s"]
    return found


def run_json(command: list[str], timeout: float) -> dict:
    """The last JSON line a benchmark subprocess (the same process tree, a fresh process: its own compilation caches
    and CUDA context) prints; its stderr's tail in the error where it fails."""
    run = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if run.returncode != 0:
        print(run.stderr[-5000:], file=sys.stderr, flush=True)
        raise RuntimeError(f"{Path(command[0]).name} exited {run.returncode}: {run.stderr.strip().splitlines()[-1:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def left(args) -> float:
    """Seconds a subprocess may take: what is left before the deadline (10 minutes without one)."""
    return max(DEADLINE[0] - time.monotonic(), 30.0) if math.isfinite(DEADLINE[0]) else 600.0


def simcse_flops(model_dir: Path, batch: int, length: int = 32) -> float:
    """A simcse step's FLOPs (the module docstring's formula): two views of ``batch`` rows of ``length`` tokens."""
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModel.from_config(config)
    embedding = sum(p.numel() for p in model.get_input_embeddings().parameters())
    non_embedding = sum(p.numel() for p in model.parameters()) - embedding
    forward = 2 * non_embedding * length + 4 * config.num_hidden_layers * length ** 2 * config.hidden_size
    return 3 * forward * 2 * batch


def write_rows(path: Path, count: int, seed: int) -> Path:
    """A JSON-lines table of ``count`` rows with every column a preset reads (text, paraphrase, negation, positive,
    hard_negative), each text filling the 32 tokens."""
    rows = []
    for text in sentences(count, seed=seed):
        other, negated = " ".join(reversed(text.split())), "not " + text
        rows.append({"text": text, "paraphrase": other, "negation": negated, "positive": other,
                     "hard_negative": negated})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def measure_ceiling(args, model_dir: Path, work: Path, peak: float | None) -> dict:
    """``cselab train --method simcse`` (the same work as sentence-transformers': ``peer_trainer.SAME_WORK``) beside
    the same step as a plain PyTorch loop (``benchmarks/ceiling.py``: compiled, CUDA graphs on CUDA) and beside
    ``SentenceTransformerTrainer``, at batch 512 and 64, each in a process of its own: steps/s, MFU and the ratios;
    then ``osscse`` as ``cselab train`` runs it at batch 64. First, that the work is the same: both libraries' loss of
    one batch, dropout off, in fp32."""
    import peer_trainer

    cuda = args.device.startswith("cuda")
    quiet = save_bert(work / "bert-no-dropout", args.tiny, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    first = Stepper("simcse", quiet, args.device, 8 if args.tiny else 64, peer_trainer.SAME_WORK)
    texts = first.rows(0)["text"]
    check = {"rows": len(texts), "log_rows": math.log(len(texts)), "cselab": first.loss(0, bf16=False)}
    try:  # log_rows: the loss were every similarity the same
        check["sentence_transformers"] = peer_trainer.st_first_batch_loss(quiet, args.device, texts, 32)
        check["relative_difference"] = abs(check["cselab"] - check["sentence_transformers"]) / abs(
            check["sentence_transformers"])
    except Exception:  # noqa: BLE001  (the timings still run)
        check["error"] = row_error()
    found: dict = {"same_work": check}
    del first
    speed = ["--set", "training.compile=false"] if args.no_compile else []
    rows = []
    plan = {512: (512, 40, 10), 64: (64, 100, 20)}
    for batch, steps, skip in ((16, 8, 3), (8, 12, 4)) if args.tiny else (
            plan[int(b)] for b in args.ceiling_batches.split(",") if b):
        corpus = work / f"ceiling-{batch}.txt"
        corpus.write_text("\n".join(sentences(batch * steps, seed=20 + batch)) + "\n", encoding="utf-8")
        flops = simcse_flops(model_dir, batch)
        commands = {
            "ceiling": [str(ROOT / "benchmarks" / "ceiling.py"), str(model_dir), str(corpus), "--batch", str(batch),
                        "--steps", str(steps - skip), "--warmup", str(skip), "--device", args.device,
                        *(["--graphs"] if cuda and not args.no_compile else []),
                        *(["--eager"] if args.no_compile else [])],
            "cselab": [str(ROOT / "benchmarks" / "peer_trainer.py"), "cselab", str(model_dir), str(corpus),
                       *_common(batch, steps, skip, args, work / f"cselab-{batch}"),
                       *(f"--set={value}" for value in peer_trainer.SAME_WORK), *speed],
            "sentence-transformers": [str(ROOT / "benchmarks" / "peer_trainer.py"), "sentence-transformers",
                                      str(model_dir), str(corpus), *_common(batch, steps, skip, args,
                                                                            work / f"st-{batch}")]}
        for trainer, command in commands.items():
            rows.append(_timed_row({"trainer": trainer, "method": "simcse", "batch": batch, "steps": steps,
                                    "timed_after": skip}, command, args, flops, peak))
            if trainer == "cselab" and "error" in rows[-1] and not speed:  # its figure without compilation, said so
                rows.append(_timed_row({"trainer": "cselab, compile false", "method": "simcse", "batch": batch,
                                        "steps": steps, "timed_after": skip},
                                       [*command, "--set", "training.compile=false"], args, flops, peak))
    batch, steps, skip = (8, 12, 4) if args.tiny else (64, 100, 20)
    table = write_rows(work / "osscse-rows.jsonl", batch * (steps + 5), seed=31)
    rows.append(_timed_row({"trainer": "cselab", "method": "osscse", "batch": batch, "steps": steps,
                            "timed_after": skip},
                           [str(ROOT / "benchmarks" / "peer_trainer.py"), "cselab", str(model_dir), str(table),
                            *_common(batch, steps, skip, args, work / "osscse"), "--method", "osscse", "--set",
                            "training.lr=1e-5", *speed, "--profile", "3" if args.tiny else "5"], args, None, peak))
    found["runs"] = rows
    found["ratios"] = _ratios(rows)
    return found


def _common(batch: int, steps: int, skip: int, args, out: Path) -> list[str]:
    return ["--batch", str(batch), "--steps", str(steps), "--skip", str(skip), "--device", args.device, "--out",
            str(out)]


def _timed_row(row: dict, command: list[str], args, flops: float | None, peak: float | None) -> dict:
    """One subprocess's figures (and the MFU of ``flops`` a step), or its error, or that the deadline passed."""
    if late():
        return {**row, "error": "skipped: past the deadline"}
    try:
        found = run_json(command, left(args))
        row.update({key: value for key, value in found.items() if key not in row})
        if flops:
            row["tflops"] = flops * row["steps_per_s"] / 1e12
            row["mfu"] = row["tflops"] / peak if peak else None
    except Exception:  # noqa: BLE001  (the row says why; the others still run)
        row["error"] = row_error()
    print(json.dumps(row), flush=True)
    return row


def _ratios(rows: list[dict]) -> dict:
    """cselab's steps/s over the ceiling's and over sentence-transformers', by batch."""
    rates = {(r["trainer"], r["batch"]): r["steps_per_s"] for r in rows if r["method"] == "simcse" and "error" not in r}
    ratios = {}
    for (trainer, batch), value in rates.items():
        for other in ("ceiling", "sentence-transformers"):
            if trainer == "cselab" and (other, batch) in rates:
                ratios[f"cselab/{other}@{batch}"] = value / rates[other, batch]
    return ratios


def measure_family(args, model_dir: Path, work: Path, peak: float | None) -> list[dict]:
    """The SimCSE family (``--family``) as ``cselab train`` runs each, at batch 64 in bf16 with the trainer's levers
    but compilation (each would compile anew): steps/s, one row each; the models their losses name are random
    stand-ins of the released ones' sizes (``benchmarks/stand_ins.py``)."""
    import peer_trainer

    batch, steps, skip = (8, 8, 3) if args.tiny else (64, 40, 10)
    table = write_rows(work / "family-rows.jsonl", batch * steps, seed=41)
    rows = []
    for method in [m for m in args.family.split(",") if m]:
        row = {"method": method, "batch": batch, "steps": steps, "timed_after": skip}
        if late():
            rows.append({**row, "error": "skipped: past the deadline"})
            continue
        reset_peak(args.device)
        try:
            base = with_lm_head(str(model_dir), model_dir.parent) if method in LM_HEAD else model_dir
            overrides = (*stand_in_models(method, str(model_dir), model_dir.parent, args.tiny),
                         *(TINY_SETTINGS.get(method, ()) if args.tiny else ()), "training.compile=false")
            found = peer_trainer.cselab_train(Path(base), args.device, table, batch, steps, skip,
                                              args.device.startswith("cuda"), work / f"family-{method}", method,
                                              overrides)
            row.update(found)
        except Exception:  # noqa: BLE001  (the row says why; the other rows still run)
            row["error"] = row_error()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def measure_encode(args, model_dir: Path) -> dict:
    """``probe run``'s encoding (the encoder ``load_encoder`` gives, mean pooling, no embedding cache) beside
    sentence-transformers' own ``encode`` of the same model (its Transformer and mean Pooling): the same sentences
    (5-60 words), batch 128, bf16 on CUDA for both; sentences/s, and that both give the same vectors (their cosines,
    and the Spearman correlation of the two encoders' similarities of consecutive pairs)."""
    import numpy as np
    import torch
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer, models

    from cselab.encoders import load_encoder

    count, batch = (512, 64) if args.tiny else (40000, 128)
    texts = sentences(count, seed=9, words=(5, 60))
    cuda = args.device.startswith("cuda")
    cselab = load_encoder(str(model_dir), pooler="avg", device=args.device, cache=False)
    width = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    peer = SentenceTransformer(modules=[models.Transformer(str(model_dir)), models.Pooling(width, "mean")],
                               device=args.device)
    if cuda:
        peer = peer.to(torch.bfloat16)
    found, vectors = {"sentences": count, "batch": batch, "dtype": "bfloat16" if cuda else "float32"}, {}
    for name, encode in (("cselab", lambda: cselab.encode(texts, batch_size=batch)),
                         ("sentence_transformers", lambda: peer.encode(texts, batch_size=batch,
                                                                       convert_to_numpy=True))):
        (cselab.encode if name == "cselab" else peer.encode)(texts[:256], batch_size=batch)  # warm-up
        synchronize(args.device)
        clock = time.perf_counter()
        vectors[name] = np.asarray(encode(), dtype=np.float32)
        synchronize(args.device)
        found[f"{name}_sentences_per_s"] = count / (time.perf_counter() - clock)
    clock = time.perf_counter()
    cselab.tokenize(texts)
    found["cselab_tokenize_s"] = time.perf_counter() - clock  # the host's share of cselab's figure
    import peer_trainer

    profiled = peer_trainer.Profiled(args.device, 1)
    profiled.at(0)
    cselab.encode(texts[:4096], batch_size=batch)
    profiled.at(1)
    found["cselab_profile_4096"] = profiled.found
    a, b = vectors["cselab"], vectors["sentence_transformers"]
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    pairs = [(a[:-1] * a[1:]).sum(1) / np.linalg.norm(a[:-1], axis=1) / np.linalg.norm(a[1:], axis=1),
             (b[:-1] * b[1:]).sum(1) / np.linalg.norm(b[:-1], axis=1) / np.linalg.norm(b[1:], axis=1)]
    found.update({"speedup": found["cselab_sentences_per_s"] / found["sentence_transformers_sentences_per_s"],
                  "min_cosine": float(cosine.min()), "pair_similarity_spearman": float(spearmanr(*pairs)[0])})
    return found


def measure_lora(args, work: Path) -> list[dict]:
    """A decoder's LoRA step, with and without gradient checkpointing (see the module docstring)."""
    from lora_step import run_alone

    save_tokenizer(work / "lora-tokenizer")
    batch = 8 if args.tiny else 64
    (work / "lora-sentences.txt").write_text("\n".join(sentences(batch * (args.steps + 2), seed=3)), encoding="utf-8")
    rows = []
    for variant in ("lora", "lora-ckpt", "qlora-ckpt"):
        if late():
            rows.append({"variant": variant, "error": "skipped: past the deadline"})
            continue
        try:
            rows.append(run_alone(variant, "tiny" if args.tiny else "0.5b", batch, args.steps, 32, args.device,
                                  args.device.startswith("cuda"), str(work / "lora-tokenizer"),
                                  str(work / "lora-sentences.txt"), timeout=600))
        except Exception:  # noqa: BLE001  (one row's failure is reported in its cell)
            rows.append({"variant": variant, "error": row_error()})
    return rows


def measure_agreement(args, work: Path) -> dict:
    """``simcse`` steps in fp32 and in bf16 from the same weights and data, with dropout off: the same masks cannot
    be drawn in both (the attention kernels differ by precision), and dropout's own spread would hide precision's."""
    import torch

    model_dir = save_bert(work / "bert-no-dropout", args.tiny, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)
    steps = 5 if args.tiny else 20
    losses = {}
    modes = ("bf16", "fp16") if args.device.startswith("cuda") else ("bf16",)  # fp16: the trainer's only on CUDA
    for mode in ("fp32", *modes):
        torch.manual_seed(0)
        stepper = Stepper("simcse", model_dir, args.device, 16 if args.tiny else 64)
        bf16 = set_mode(mode)
        losses[mode] = [stepper.loss(step, bf16, fp16=mode == "fp16") for step in range(steps)]
    set_mode("fp32")
    found = {"steps": steps, "dropout": 0.0, "losses": losses, "tolerance": 0.05}
    for mode in modes:  # bf16: what the GPU runs use; fp16: the official profiles' precision
        relative = [abs(a - b) / max(abs(a), 1e-8) for a, b in zip(losses["fp32"], losses[mode])]
        finite = all(math.isfinite(v) for v in losses["fp32"] + losses[mode])
        found[mode] = {"first_step_relative_difference": relative[0], "max_relative_difference": max(relative),
                       "finite": finite, "agree": finite and max(relative) <= 0.05}
    found["agree"] = all(found[mode]["agree"] for mode in modes)
    found["finite"] = all(found[mode]["finite"] for mode in modes)
    return found


def measure_profile(args, model_dir: Path) -> list[dict]:
    """:func:`profile_batch` of each of ``--profile-methods`` at each of ``--profile-batches`` (16 with ``--tiny``)."""
    batches = [16] if args.tiny else [int(b) for b in args.profile_batches.split(",")]
    return [profile_batch(args, model_dir, method, batch) for method in args.profile_methods.split(",")
            for batch in batches if not late()]


def profile_batch(args, model_dir: Path, method: str, batch: int) -> dict:
    """``torch.profiler`` over ``method``'s steps at ``batch`` (bf16 on CUDA) as the trainer takes them: the step's
    wall time split into its phases (CPU time of each ``record_function`` range), the device's busy time, and the
    top operators."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = args.device.startswith("cuda")
    steps = 3 if args.tiny else 10
    stepper = Stepper(method, model_dir, args.device, batch)
    for warm in range(args.warmup):
        stepper.step(warm, cuda)
    synchronize(args.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    clock = time.perf_counter()
    with profile(activities=activities) as profiler:
        for step in range(steps):
            stepper.step(step, cuda)
        synchronize(args.device)
    wall = (time.perf_counter() - clock) / steps
    averages = profiler.key_averages()
    ranges = {}  # each range's CPU time (its device-side twin, a user annotation, has none)
    for e in averages:
        if e.key in ("collate", "forward", "backward", "optimizer"):
            ranges[e.key] = max(ranges.get(e.key, 0.0), e.cpu_time_total / steps / 1000)
    phases = {"collate_ms": ranges.get("collate"), "forward_ms": ranges.get("forward"),
              "backward_ms": ranges.get("backward"), "optimizer_ms": ranges.get("optimizer")}
    kernels = [e for e in profiler.events() if e.device_type != DeviceType.CPU and not e.is_user_annotation]
    busy = sum(e.self_device_time_total for e in kernels) / steps / 1000 if cuda else None
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    return {"method": method, "batch": batch, "bf16": cuda, "steps": steps, "step_ms_profiled": wall * 1000,
            **phases, "device_busy_ms": busy, "kernels_per_step": len(kernels) / steps if cuda else None,
            "by_cpu": averages.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60),
            **({"by_device": averages.table(sort_by=sort, row_limit=20, max_name_column_width=60)} if cuda else {})}


def cselab_train(arguments: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cselab.cli", "train", *arguments], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def measure_run(args, model_dir: Path, work: Path) -> dict:
    from cselab.encoders import load_encoder

    steps, every = (6, 2) if args.tiny else (300, 100)
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(sentences(64 * (steps + 10), seed=7)) + "\n", encoding="utf-8")
    root = write_dev_set(work / "data", 200 if args.tiny else 1500)
    out = work / "run"
    arguments = ["--method", "simcse", "--model", str(model_dir), "--data", str(corpus), "--data-dir", str(root),
                 "--out", str(out), "--set", f"training.max_steps={steps}", "--set", f"training.eval_steps={every}",
                 "--set", f"training.mixed_precision={'bf16' if args.device.startswith('cuda') else 'no'}"]
    if args.tiny:
        arguments += ["--set", "training.batch_size=16"]
    clock = time.perf_counter()
    first = cselab_train(arguments)
    state = out / "last" / "trainer_state.json"
    while first.poll() is None and not state.exists():
        time.sleep(0.05)
    killed_at = json.loads(state.read_text())["step"] if state.exists() else None
    if first.poll() is None:
        first.send_signal(signal.SIGKILL)
    first.wait()
    resumed = cselab_train(arguments)
    _, errors = resumed.communicate()
    wall = time.perf_counter() - clock
    if resumed.returncode != 0:
        return {"ok": False, "resumed_rc": resumed.returncode, "stderr_tail": errors[-2000:]}
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    best = load_encoder(str(out / "best"), device=args.device)
    result = {"steps": steps, "eval_steps": every, "killed_after_step": killed_at, "resumed_rc": resumed.returncode,
              "final_step": json.loads(state.read_text())["step"], "evaluations": [r for r in log if "stsb_dev" in r],
              "wall_s": wall, "best_encodes": best.encode(["a check"]).shape[-1] == best.dim}
    result["ok"] = result["final_step"] == steps and result["best_encodes"]
    variants = {}
    for name, overrides in (("sam", ()), ("awp-fgsm", ()),
                            ("sg", ("encoder.frozen=bfloat16",) if args.device.startswith("cuda") else ())):
        stepper = Stepper(name, model_dir, args.device, 8 if args.tiny else 64, overrides)
        losses, clock = [], time.perf_counter()
        for step in range(3 if args.tiny else 10):
            losses.append(stepper.loss(step, bf16=args.device.startswith("cuda")))
        synchronize(args.device)
        variants[name] = {"step_s": (time.perf_counter() - clock) / len(losses), "losses": losses,
                          "finite": all(math.isfinite(v) for v in losses)}
    result["variants"] = variants
    return result


def measure_augment(args, work: Path) -> dict:
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from augment_speed import one_mask_per_pass, unsorted_translate

    from cselab.augment.backtranslate import HFTranslator
    from cselab.augment.decoding import Decoding
    from cselab.augment.edits import MaskedLMEditor

    count = 64 if args.tiny else 1024
    texts = sentences(count, seed=11, words=(5, 40))
    editor = MaskedLMEditor(str(save_bert(work / "mlm", args.tiny, masked_lm=True)), batch_size=32,
                            device=args.device)
    editor.substitute(texts[:32])  # warm-up
    synchronize(args.device)
    clock = time.perf_counter()
    editor.substitute(texts)
    synchronize(args.device)
    batched = time.perf_counter() - clock
    clock = time.perf_counter()
    passes = one_mask_per_pass(editor, texts)
    synchronize(args.device)
    per_mask = time.perf_counter() - clock

    size = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                encoder_ffn_dim=64, decoder_ffn_dim=64) if args.tiny else \
        dict(d_model=1024, encoder_layers=6, decoder_layers=6, encoder_attention_heads=16,
             decoder_attention_heads=16, encoder_ffn_dim=8192, decoder_ffn_dim=8192)
    torch.manual_seed(0)
    mt = work / "mt"
    BartForConditionalGeneration(BartConfig(vocab_size=30522, max_position_embeddings=256, pad_token_id=0,
                                            bos_token_id=2, eos_token_id=3, decoder_start_token_id=2,
                                            forced_eos_token_id=None, **size)).save_pretrained(mt)
    save_tokenizer(mt)
    translator = HFTranslator([(str(mt), str(mt))], Decoding(num_candidates=1, num_beams=1, batch_sentences=32,
                                                             max_length=64), device=args.device)
    tokenizer, model = translator.pairs[0][0]
    generate = model.generate

    def length_following(**kwargs):  # random weights: make each output as long as the batch's input
        width = kwargs["input_ids"].shape[1]
        return generate(**{**kwargs, "max_new_tokens": width, "min_new_tokens": width})

    model.generate = length_following
    translator.translate((tokenizer, model), texts[:64])  # warm-up: the first generate calls set up the kernels
    timings = {}
    for _ in range(2):  # each order twice, interleaved; the faster of each kept
        for name, run in (("sorted", lambda: translator.translate((tokenizer, model), texts)),
                          ("input_order", lambda: unsorted_translate(translator, tokenizer, model, texts))):
            synchronize(args.device)
            clock = time.perf_counter()
            run()
            synchronize(args.device)
            timings[name] = min(timings.get(name, math.inf), time.perf_counter() - clock)
    per_sentence = timings["sorted"] / count  # one direction
    return {"sentences": count, "masks": passes, "mlm_batched_s": batched, "mlm_per_mask_s": per_mask,
            "mlm_speedup": per_mask / batched, "translate_sorted_s": timings["sorted"],
            "translate_input_order_s": timings["input_order"],
            "translate_speedup": timings["input_order"] / timings["sorted"],
            "translate_sentences_per_s": count / timings["sorted"],
            "projected_hours_1m_x2_pivots": per_sentence * 1_000_000 * 2 * 2 / 3600}


def measure_probes(args, model_dir: Path) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from cselab.encoders import TransformerEncoder
    from cselab.evaluation.validation import classifier_setup, inner_kfold

    result = {}
    where = [("device", args.device, 512 if args.tiny else 20000)] if args.device != "cpu" else []
    for name, device, count in where + [("cpu", "cpu", 256 if args.tiny else 2000)]:
        encoder = TransformerEncoder(AutoModel.from_pretrained(model_dir).to(device),
                                     AutoTokenizer.from_pretrained(model_dir), pooler="avg")
        texts = sentences(count, seed=5, words=(5, 30))
        encoder.encode(texts[:64], batch_size=64)
        synchronize(device)
        clock = time.perf_counter()
        encoder.encode(texts, batch_size=128)
        synchronize(device)
        result[f"encode_{name}_sentences_per_s"] = count / (time.perf_counter() - clock)
    rows = 1000 if args.tiny else 10662  # MR
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, rows)
    features = rng.normal(size=(rows, 32 if args.tiny else 768)).astype(np.float32) + labels[:, None] * 0.1
    torch.set_num_threads(os.cpu_count() or 1)
    clock = time.perf_counter()
    scores = inner_kfold(features, labels, 2, classifier_setup("fast" if args.tiny else "full"))
    result.update({"classifier_rows": rows, "classifier_cpu_s": time.perf_counter() - clock,
                   "classifier_accuracy": scores["acc"], "classifier_device": "cpu (no device option yet)"})
    return result


def step_table(title: str, rows: list[dict], first: tuple[str, ...]) -> list[str]:
    """A Markdown table of step figures: each row's ``first`` columns, then its rates (or its error)."""
    figures = ("steps/s", "sentences/s", "tokens/s", "TFLOP/s", "MFU", "peak MiB")
    lines = [title, "", f"| {' | '.join((*first, *figures))} |", "|" + "---|" * (len(first) + len(figures))]
    for r in rows:
        head = " | ".join(str(r[key]) for key in first)
        if "error" in r:
            lines.append(f"| {head} | {r['error']} |" + " |" * (len(figures) - 1))
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
        memory = f"{r['peak_mib']:.0f}" if r.get("peak_mib") is not None else "n/a"
        lines.append(f"| {head} | {r['steps_per_s']:.2f} | {r['sentences_per_s']:.0f} | {r['tokens_per_s']:.0f} | "
                     f"{r['tflops']:.2f} | {mfu} | {memory} |")
    return [*lines, ""]


def rate_table(title: str, rows: list[dict], first: tuple[str, ...]) -> list[str]:
    """A Markdown table of whole trainers' figures: each row's ``first`` columns, steps/s, TFLOP/s, MFU and peak
    memory (or its error)."""
    lines = [title, "", f"| {' | '.join((*first, 'steps/s', 'TFLOP/s', 'MFU', 'peak MiB'))} |",
             "|" + "---|" * (len(first) + 4)]
    for r in rows:
        head = " | ".join(str(r[key]) for key in first)
        if "error" in r:
            lines.append(f"| {head} | {r['error']} | | | |")
            continue
        tflops = f"{r['tflops']:.1f}" if r.get("tflops") is not None else "n/a"
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
        memory = f"{r['peak_mib']:.0f}" if r.get("peak_mib") is not None else "n/a"
        lines.append(f"| {head} | {r['steps_per_s']:.2f} | {tflops} | {mfu} | {memory} |")
    return [*lines, ""]


def markdown(report: dict) -> str:
    lines = [f"# GPU check: {report['device_name']}", "",
             f"{report['date']}, torch {report['torch']}, transformers {report.get('transformers')}, CUDA "
             f"{report['cuda']}, driver {report['driver']}, "
             f"{'tiny models' if report['tiny'] else 'BERT-base size'}; command: `{report['command']}`", ""]
    if report.get("skipped"):
        lines += [f"Skipped, past the deadline: {', '.join(report['skipped'])}.", ""]
    if "steps" in report:
        lines += step_table("## Training steps (length 32)", report["steps"], ("method", "batch", "mode", "compile"))
    if "levers" in report:
        lines += step_table("## Levers (simcse and osscse, length 32, bf16 on CUDA; each row adds one to the row "
                            "before)", report["levers"], ("method", "batch", "lever"))
    for profile in report.get("profile", []):
        lines += [f"## profile, {profile['method']}, batch {profile['batch']}", "", "```json",
                  json.dumps({k: v for k, v in profile.items() if not k.startswith("by_")}, indent=1), "```", ""]
        for key in ("by_cpu", "by_device"):
            if key in profile:
                lines += [f"### {key}", "", "```", profile[key], "```", ""]
    if "ceiling" in report:
        lines += rate_table("## cselab train beside the ceiling loop and SentenceTransformerTrainer (length 32, bf16 "
                            "on CUDA)", report["ceiling"]["runs"], ("trainer", "method", "batch"))
        lines += [f"- {name}: {value:.2f}x" for name, value in report["ceiling"]["ratios"].items()] + [""]
        lines += ["Same work, one batch, dropout off, fp32:", "", "```json",
                  json.dumps(report["ceiling"]["same_work"], indent=1), "```", ""]
        for row in report["ceiling"]["runs"]:
            for key, table in row.get("profile", {}).items():
                if key.startswith("by_"):
                    lines += [f"### {row['method']}, batch {row['batch']}, profile {key}", "", "```", table, "```", ""]
    if "family" in report:
        lines += rate_table("## The SimCSE family through cselab train (batch 64, bf16 on CUDA, not compiled)",
                            report["family"], ("method", "batch"))
    for section, text in report.get("failed", {}).items():
        lines += [f"## {section}: failed", "", "```", text, "```", ""]
    for section in ("encode", "lora", "cached", "agreement", "run", "augment", "probes"):
        if section in report:
            lines += [f"## {section}", "", "```json", json.dumps(report[section], indent=1, default=str)[:4000],
                      "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:1 or cpu (default: cuda)")
    parser.add_argument("--tiny", action="store_true", help="tiny models and few steps (the CPU test)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    parser.add_argument("--out", default="benchmarks/gpu-check", help="folder for gpu-check.json and .md")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration (default: 20)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (default: 5)")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--compile-only", action="store_true", help="steps: only the torch.compile rows")
    parser.add_argument("--methods", default="simcse,osscse", help="steps: the methods timed (default: simcse,osscse)")
    parser.add_argument("--batches", default="64,512", help="steps: the batch sizes (default: 64,512)")
    parser.add_argument("--modes", default="", help="steps: of fp32, tf32, bf16 (default: all three on CUDA, else the "
                                                    "first and the last)")
    parser.add_argument("--profile-batches", default="64", help="profile: the batch sizes (default: 64)")
    parser.add_argument("--ceiling-batches", default="512,64", help="ceiling: the simcse batch sizes, of 512 and 64 "
                                                                      "(default: both)")
    parser.add_argument("--profile-methods", default="simcse", help="profile: the methods (default: simcse)")
    parser.add_argument("--deadline", type=float, help="seconds after which what is left is skipped (and said to be): "
                                                       "a lent device's time is short")
    parser.add_argument("--family", default="promptbert,promptbert-sup,sncse,esimcse,diffcse,rankcse,infocse",
                        help="family: methods timed once each through cselab train at batch 64 (empty: none)")
    parser.add_argument("--compile-all", action="store_true", help="torch.compile in every mode, not only bf16")
    parser.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak, for MFU (default: "
                                                          "known for H100, H200, A100, L40S, A10)")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",")]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    absent = missing_packages(sections)
    if absent:
        print(f"missing on this machine: {'; '.join(absent)}. Carry wheels and `pip install --no-index` them, or "
              f"leave those sections out with --only", file=sys.stderr)
        return 2
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {args.device}: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2
    cuda = args.device.startswith("cuda")
    import transformers

    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "tiny": args.tiny,
              "transformers": transformers.__version__,
              "device": args.device, "device_name": torch.cuda.get_device_name(args.device) if cuda
              else platform.processor() or "cpu", "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": _driver() if cuda else None, "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
              "peak_bf16_tflops": peak_tflops(args.device, args.peak_tflops)}
    if args.deadline is not None:
        DEADLINE[0] = time.monotonic() + args.deadline
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        model_dir = save_bert(work / "bert", args.tiny)
        clock = time.perf_counter()
        peak = report["peak_bf16_tflops"]
        measures = {"steps": lambda: measure_steps(args, model_dir, peak), "agreement": lambda: measure_agreement(
            args, work), "run": lambda: measure_run(args, model_dir, work), "augment": lambda: measure_augment(
            args, work), "probes": lambda: measure_probes(args, model_dir), "profile": lambda: measure_profile(
            args, model_dir), "levers": lambda: measure_levers(args, model_dir, peak), "cached": lambda: measure_cached(
            args, model_dir, peak), "ceiling": lambda: measure_ceiling(args, model_dir, work, peak),
            "family": lambda: measure_family(args, model_dir, work, peak), "encode": lambda: measure_encode(
            args, model_dir),
            "lora": lambda: measure_lora(args, work)}
        for section in sections:
            started = time.perf_counter()
            if late():
                report.setdefault("skipped", []).append(section)
            else:
                try:
                    report[section] = measures[section]()
                except Exception:  # noqa: BLE001  (one section's failure is reported; the others still run)
                    report.setdefault("failed", {})[section] = traceback.format_exc()[-3000:]
                    print(report["failed"][section], file=sys.stderr, flush=True)
                print(f"{section}: {time.perf_counter() - started:.1f} s", flush=True)
                report.setdefault("after", {})[section] = machine_state()
            report["wall_s"] = time.perf_counter() - clock
            write_report(report, out)  # after each section: a run cut short keeps what it measured
    print(f"wrote {out / 'gpu-check.json'} and {out / 'gpu-check.md'} ({report['wall_s']:.0f} s)")
    return 1 if report.get("failed") or failed_rows(report) else 0


def machine_state() -> dict:
    """What a section may leave behind that slows the next: load, child processes, threads, the tokenizers'
    parallelism setting."""
    import multiprocessing

    import torch

    return {"load_1m": os.getloadavg()[0], "children": len(multiprocessing.active_children()),
            "torch_threads": torch.get_num_threads(), "tokenizers_parallelism": os.environ.get(
                "TOKENIZERS_PARALLELISM")}


def row_error() -> str:
    """The failing row's error, for its cell: the exception's last line (the whole traceback on stderr)."""
    text = traceback.format_exc()
    print(text, file=sys.stderr, flush=True)
    return text.strip().splitlines()[-1][:300]


def failed_rows(report: dict) -> int:
    """Rows that failed (not those skipped past the deadline), in every section that has rows."""
    rows = [*report.get("steps", []), *report.get("levers", []), *report.get("ceiling", {}).get("runs", []),
            report.get("ceiling", {}).get("same_work", {}), *report.get("family", []), *report.get("lora", [])]
    return sum("error" in row and not row["error"].startswith("skipped") for row in rows)


def write_report(report: dict, out: Path) -> None:
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "gpu-check.md").write_text(markdown(report), encoding="utf-8")


def _driver() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    sys.exit(main())
