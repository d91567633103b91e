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

The sections live in modules of their own beside this one, which runs them and writes the one report:
``gpu_steps.py`` (steps, levers, cached, agreement, profile), ``gpu_trainers.py`` (ceiling, family, lora),
``gpu_pipeline.py`` (encode, run, augment, probes); ``gpu_stepper.py`` holds :class:`Stepper` (the trainer's own
step) and ``gpu_fixtures.py`` what they share.

Writes ``OUT/gpu-check.json`` and ``OUT/gpu-check.md``; a section that fails is reported there and the others
still run (exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_fixtures import DEADLINE, late, peak_tflops, save_bert  # noqa: E402
from gpu_pipeline import measure_augment, measure_encode, measure_probes, measure_run  # noqa: E402
from gpu_steps import measure_agreement, measure_cached, measure_levers, measure_profile, measure_steps  # noqa: E402
from gpu_trainers import measure_ceiling, measure_family, measure_lora  # noqa: E402
NEEDED = {"torch": "all", "transformers": "all", "accelerate": "all", "numpy": "all", "scipy": "probes",
          "sklearn": "probes", "yaml": "all", "safetensors": "run", "tqdm": "all", "rapidfuzz": "augment",
          "sentence_transformers": "ceiling", "datasets": "ceiling", "peft": "lora", "bitsandbytes": "lora"}

SECTIONS = ("steps", "agreement", "run", "augment", "probes", "profile", "levers", "cached", "ceiling", "family",
            "encode", "lora")

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

