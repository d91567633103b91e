"""Cached InfoNCE (training.mini_batch_size): peak memory and time per sample of a batch of 512 encoded 64 rows at a
time, against plain batches of 64 and 512 (issue 37's target: batch 512's memory within 1.5x of batch 64's, at no
more than 1.6x its time per sample).

Each configuration runs in its own process (SimCSE, the packaged MiniLM with its minilm profile, wiki1m sentences,
max length 32, the trainer's own Step with AdamW). Memory is the peak allocated on CUDA, else the
process's peak resident set; ``activations_mib`` is that peak less the one after the model and a warm-up step of
batch 1 (the weights, the optimizer's state and the libraries), i.e. what the step's batch itself costs.

    python benchmarks/cached_infonce.py [--steps 3] [--model minilm]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

CONFIGURATIONS = {"plain 64": (64, None), "plain 512": (512, None), "cached 512 / 64": (512, 64)}


def peak_mib(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(batch_size: int, mini: int | None, model: str, steps: int) -> dict:
    from cselab.data import load_corpus
    from cselab.encoders.loading import resolve_backbone
    from cselab.train.config.methods import load_method
    from cselab.train.objective import Objective
    from cselab.train.run.setup import build_encoder
    from cselab.train.step import Step

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sentences = load_corpus("wiki1m")
    method = load_method("simcse", ["training.max_length=32"], profile="minilm")
    encoder = build_encoder(method, resolve_backbone(model)).to(device)
    objective = Objective(method)
    optimizer = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=1e-5)

    def step(rows: list[str], size: int | None) -> None:
        Step(encoder, objective, optimizer, mini_batch_size=size)([{"text": rows}])

    step(sentences[:2], None)  # weights, optimizer state and kernels in place
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = peak_mib(device)
    times = []
    for i in range(steps):
        clock = time.perf_counter()
        step(sentences[i * batch_size:(i + 1) * batch_size], mini)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - clock)
    peak = peak_mib(device)
    return {"device": device, "batch_size": batch_size, "mini_batch_size": mini, "steps": steps,
            "s_per_sample": sum(times) / (steps * batch_size), "peak_mib": peak,
            "activations_mib": peak - (0.0 if device == "cuda" else base)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--configuration", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.configuration:
        print(json.dumps(run(*CONFIGURATIONS[args.configuration], args.model, args.steps)))
        return
    results = {}
    for name in CONFIGURATIONS:
        output = subprocess.run([sys.executable, __file__, "--configuration", name, "--steps", str(args.steps),
                                 "--model", args.model], capture_output=True, text=True, check=True)
        results[name] = json.loads(output.stdout.strip().splitlines()[-1])
        r = results[name]
        print(f"{name:16} {1000 * r['s_per_sample']:.1f} ms/sample  peak {r['peak_mib']:.0f} MiB  "
              f"batch's own {r['activations_mib']:.0f} MiB  ({r['device']})")
    small, cached = results["plain 64"], results["cached 512 / 64"]
    print(f"cached 512 / plain 64: memory {cached['activations_mib'] / small['activations_mib']:.2f}x (batch's own), "
          f"{cached['peak_mib'] / small['peak_mib']:.2f}x (peak); time per sample "
          f"{cached['s_per_sample'] / small['s_per_sample']:.2f}x")


if __name__ == "__main__":
    main()
