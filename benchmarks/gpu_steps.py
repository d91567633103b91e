"""``gpu_check.py``'s sections on the trainer's own step: ``steps``, ``levers``, ``cached``, ``agreement`` and
``profile`` (see ``gpu_check.py``'s docstring)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from gpu_fixtures import late, reset_peak, row_error, save_bert, set_mode, synchronize
from gpu_stepper import Stepper, timed


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
