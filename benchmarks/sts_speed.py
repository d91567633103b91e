"""STS suite speed: cselab's encoder against the naive way, same model, same scores.

Naive: per subset, batches in file order (no length sorting, so every batch pads to its
longest sentence), every sentence encoded as often as it occurs, both sides of a pair
encoded separately. Ours: ``run_sts`` (one call per task, each distinct sentence once,
length-sorted batches with dynamic padding). Both use the same model object, batch size
and threads.

Speed is timed in fp32, as the probe runs. There the two ways' vectors differ by float32
rounding (other batch shapes), which breaks the ties of repeated and identical pairs
(STS12 has 201 and 79) at random in the naive way; ours gives a repeated pair one
similarity. So equality is checked a second time with the model in float64, where both
ways give the same float32 vectors: then the scores must agree to |delta| < 1e-6.

    python benchmarks/sts_speed.py [--model minilm] [--batch-size 64] [--check-tasks sts12,sts15,stsb]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch
from cselab.metrics import cosine_rows, spearman

from cselab.data import load_sts
from cselab.encoders import load_encoder
from cselab.encoders.transformer import TransformerEncoder
from cselab.probes.sts import SHORT_NAMES, STS_SUITE, run_sts


def naive_encode(encoder: TransformerEncoder, sentences: list[str], batch_size: int) -> np.ndarray:
    """Batches in input order, padded to their longest member, duplicates included."""
    rows = []
    with torch.inference_mode():
        for start in range(0, len(sentences), batch_size):
            batch = encoder.tokenizer(sentences[start:start + batch_size], padding=True, truncation=True,
                                      max_length=encoder.max_length, return_tensors="pt")
            vectors = encoder.forward_batch(batch["input_ids"], batch["attention_mask"])
            if encoder.normalize:
                vectors = torch.nn.functional.normalize(vectors.float(), dim=-1)
            rows.append(vectors.float().numpy())
    return np.concatenate(rows)


def naive_sts(encoder: TransformerEncoder, tasks, batch_size: int) -> dict[str, float]:
    scores = {}
    for key in tasks:
        sims, golds = [], []
        for subset in load_sts(key):
            a = naive_encode(encoder, subset.sentences1, batch_size)
            b = naive_encode(encoder, subset.sentences2, batch_size)
            sims.append(cosine_rows(a, b))
            golds.append(subset.scores)
        scores[SHORT_NAMES[key]] = 100 * spearman(np.concatenate(sims), np.concatenate(golds))
    return scores


def compare(encoder: TransformerEncoder, tasks, batch_size: int) -> tuple[float, float, float]:
    """Seconds for ours and the naive way, and the largest score difference, printed per task."""
    clock = time.perf_counter()
    ours, _ = run_sts(encoder, tasks, batch_size=batch_size)
    ours_s = time.perf_counter() - clock
    clock = time.perf_counter()
    naive = naive_sts(encoder, tasks, batch_size)
    naive_s = time.perf_counter() - clock
    print(f"{'task':8} {'cselab':>12} {'naive':>12} {'|delta|':>9}")
    for name in naive:
        print(f"{name:8} {ours[name]['all']:12.6f} {naive[name]:12.6f} {abs(ours[name]['all'] - naive[name]):9.2e}")
    return ours_s, naive_s, max(abs(ours[name]["all"] - naive[name]) for name in naive)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--check-tasks", default="sts12,sts15,stsb", help="tasks for the float64 equality check")
    args = parser.parse_args()
    encoder = load_encoder(args.model, device="cpu")
    print(f"model {args.model}, batch {args.batch_size}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}")

    print("\n1. speed, fp32, all seven tasks")
    ours_s, naive_s, delta = compare(encoder, STS_SUITE, args.batch_size)
    print(f"cselab {ours_s:.1f} s, naive {naive_s:.1f} s, speed-up {naive_s / ours_s:.2f}x, max |delta| {delta:.2e}")

    print(f"\n2. equality, float64 model, {args.check_tasks}")
    encoder.model.double()
    _, _, delta = compare(encoder, args.check_tasks.split(","), args.batch_size)
    print(f"max |delta| = {delta:.2e} ({'identical' if delta < 1e-6 else 'DIFFERENT'})")


if __name__ == "__main__":
    main()
