"""MER throughput on short sentence pairs, one core: ``cselab.mer.mer_pairs`` against ``jiwer.mer`` per pair.

The pairs are STS-B train's (5,749 pairs, 10 words a sentence on average), repeated to
``--pairs``. Both compute the same values (checked here on every pair timed for jiwer).

    python benchmarks/mer_speed.py [--pairs 200000]
"""

from __future__ import annotations

import argparse
import time

import jiwer
import numpy as np

from cselab.data import load_sts
from cselab.mer import mer_pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=200_000)
    args = parser.parse_args()
    (train,) = load_sts("stsb", "train")
    repeat = -(-args.pairs // len(train))
    first = (train.sentences1 * repeat)[: args.pairs]
    second = (train.sentences2 * repeat)[: args.pairs]
    words = np.mean([len(s.split()) for s in train.sentences1 + train.sentences2])
    print(f"{args.pairs} pairs from STS-B train, {words:.1f} words a sentence on average")

    clock = time.perf_counter()
    ours = mer_pairs(first, second)
    ours_s = time.perf_counter() - clock
    sample = min(args.pairs, 20_000)
    clock = time.perf_counter()
    theirs = [jiwer.mer(a.lower(), b.lower()) for a, b in zip(first[:sample], second[:sample])]
    jiwer_s = time.perf_counter() - clock
    assert np.allclose(ours[:sample], theirs), "cselab and jiwer disagree"
    print(f"cselab.mer.mer_pairs: {args.pairs / ours_s:,.0f} pairs/s ({ours_s:.2f} s)")
    print(f"jiwer.mer per pair:   {sample / jiwer_s:,.0f} pairs/s ({sample} pairs, {jiwer_s:.2f} s), same values")


if __name__ == "__main__":
    main()
