"""Training step time: cselab's method presets against a plain two-forward-pass SimCSE loop.

The reference is the textbook SimCSE step written here from scratch: tokenize the batch,
two forward passes (two dropout masks), [CLS] through an MLP head, InfoNCE, backward, AdamW
step. cselab's steps are the presets through the trainer's own step (`cselab.train.step.Step`). Same model,
batch and length; each variant runs in its own process so that its peak memory (max RSS on CPU,
peak allocated on CUDA) is its own. A method whose losses name models (DiffCSE's generator, RankCSE's teachers)
gets random-weight stand-ins of the released models' sizes (benchmarks/stand_ins.py), and an embedding cache of its
own, so that no teacher's vector is served from an earlier run; InfoCSE, which reads the model's masked-LM head, gets
the model with a random head of its size where it has none (the packaged MiniLM).

    python benchmarks/train_speed.py [--model minilm] [--batch-size 64] [--steps 10] [--methods all]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stand_ins import LM_HEAD, stand_in_models, with_lm_head  # noqa: E402  (benchmarks/ is not a package)
from timing import time_steps  # noqa: E402


def run(variant: str, model: str, batch_size: int, steps: int, max_length: int) -> dict:
    from cselab.data import load_corpus
    from cselab.encoders.loading import ALIASES
    from cselab.train.plugins.functional import info_nce
    from cselab.train.config.methods import load_method
    from cselab.train.objective import Objective
    from cselab.train.run.setup import attach_auxiliary, build_encoder, initial_weights
    from cselab.train.step import Step

    torch.manual_seed(0)
    path = str(ALIASES[model]()) if model in ALIASES else model
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sentences = load_corpus("wiki1m")[: batch_size * (steps + 2)]
    batches = [sentences[i * batch_size:(i + 1) * batch_size] for i in range(steps + 2)]
    folder = Path(tempfile.mkdtemp(prefix="train-speed-"))
    os.environ["CSELAB_CACHE_DIR"] = str(folder / "embeddings")
    models = [] if variant == "reference" else stand_in_models(variant, path, folder)
    path = with_lm_head(path, folder) if variant in LM_HEAD else path
    method = load_method("simcse" if variant == "reference" else variant, [f"training.max_length={max_length}",
                                                                           *models])
    objective = Objective(method)
    encoder = build_encoder(method, path)
    attach_auxiliary(encoder, objective)
    encoder.to(device)
    optimizer = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=1e-5)
    initial = initial_weights(encoder)
    tokenizer = encoder.tokenizer

    take = Step(encoder, objective, optimizer, initial_weights=lambda: (list(encoder.backbone.parameters()), initial))

    def ours(batch):  # the trainer's own step: views, losses, FGSM/SAM/AWP passes, generated negatives
        other, negated = [s[::-1] for s in batch], ["not " + s for s in batch]  # every column a preset reads
        take([{"text": batch, "paraphrase": other, "negation": negated, "positive": other, "hard_negative": negated}])

    def reference(batch):  # the plain PyTorch step the presets are compared with
        tokens = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt").to(device)
        first = encoder.head(encoder.backbone(**tokens).last_hidden_state[:, 0])
        second = encoder.head(encoder.backbone(**tokens).last_hidden_state[:, 0])
        info_nce(first, second, 0.05).backward()
        optimizer.step()
        optimizer.zero_grad()

    step_fn = reference if variant == "reference" else ours
    step_s, peak = time_steps(lambda i: step_fn(batches[i]), len(batches), device)
    return {"variant": variant, "device": device, "step_s": step_s, "peak_mib": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--methods", default="simcse,osscse",
                        help="comma-separated presets timed after the reference loop (all: every preset)")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run(args.variant, args.model, args.batch_size, args.steps, args.max_length)))
        return
    print(f"model {args.model}, batch {args.batch_size}, max length {args.max_length}, {args.steps} timed steps")
    from cselab.train.config.methods import preset_names

    methods = preset_names() if args.methods == "all" else args.methods.split(",")
    results = {}
    for variant in ["reference", "simcse"] + [m for m in methods if m != "simcse"]:
        output = subprocess.run([sys.executable, __file__, "--variant", variant, "--model", args.model,
                                 "--batch-size", str(args.batch_size), "--steps", str(args.steps),
                                 "--max-length", str(args.max_length)], capture_output=True, text=True, check=True)
        results[variant] = json.loads(output.stdout.strip().splitlines()[-1])
        r = results[variant]
        relative = f"{r['step_s'] / results['simcse']['step_s']:.2f}x simcse" if "simcse" in results else ""
        print(f"{variant:12} {r['step_s']:.3f} s/step  {relative:13} peak {r['peak_mib']:.0f} MiB  ({r['device']})")
    print(f"simcse / reference: {results['simcse']['step_s'] / results['reference']['step_s']:.2f}")


if __name__ == "__main__":
    main()
