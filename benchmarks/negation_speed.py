"""Negation throughput on the wiki1m sample: spaCy's parse alone, then parse + negation rules.

    python benchmarks/negation_speed.py [--n-process 1] [--batch-size 256] [--limit N]
"""

from __future__ import annotations

import argparse
import time

from cselab.augment.negation import Negator, reason_counts
from cselab.data import load_corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-process", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    sentences = load_corpus("wiki1m")[: args.limit]
    negator = Negator(batch_size=args.batch_size, n_process=args.n_process)
    print(f"{len(sentences)} wiki1m sentences, pipeline {negator.nlp.pipe_names}, n_process {args.n_process}, "
          f"batch {args.batch_size}")

    clock = time.perf_counter()
    for _ in negator.nlp.pipe(sentences, batch_size=args.batch_size, n_process=args.n_process):
        pass
    parse_s = time.perf_counter() - clock
    clock = time.perf_counter()
    results = list(negator(sentences))
    negate_s = time.perf_counter() - clock
    print(f"parse only:       {len(sentences) / parse_s:,.0f} sentences/s ({parse_s:.1f} s)")
    print(f"parse + negation: {len(sentences) / negate_s:,.0f} sentences/s ({negate_s:.1f} s)")
    for key, count in sorted(reason_counts(results).items(), key=lambda kv: -kv[1]):
        print(f"  {key:24} {count:6} ({100 * count / len(results):.1f}%)")


if __name__ == "__main__":
    main()
