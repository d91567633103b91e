"""Duplicate texts inside training batches (false in-batch negatives), with training.sampler random against
no_duplicates, over one epoch of a corpus: the figures of docs/train.md.

    python benchmarks/batch_duplicates.py [--corpus wiki1m] [--batch-size 64] [--seed 42]

A duplicate negative is a pair of rows of one batch with the same text: each is the other's negative although it is
the same sentence (SimCSE's views read one column, so one text per row).
"""

import argparse
import json
from collections import Counter

from cselab.data import load_corpus
from cselab.train.batches import EpochOrder, NoDuplicateBatches, row_texts
from cselab.train.run.data import ColumnRows


def duplicate_pairs(batches: list[list[int]], texts: list[str]) -> tuple[int, int]:
    """Pairs of rows with the same text within a batch, and the batches holding one."""
    pairs = held = 0
    for batch in batches:
        counts = Counter(texts[i] for i in batch)
        found = sum(n * (n - 1) // 2 for n in counts.values())
        pairs, held = pairs + found, held + bool(found)
    return pairs, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="wiki1m")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    texts = load_corpus(args.corpus)
    order = list(EpochOrder(len(texts), args.seed))
    plain = [order[k:k + args.batch_size] for k in range(0, len(order) - args.batch_size + 1, args.batch_size)]
    no_dup = list(NoDuplicateBatches(EpochOrder(len(texts), args.seed), args.batch_size,
                                     row_texts(ColumnRows({"text": texts}), [("text", None)])))
    report = {"corpus": args.corpus, "rows": len(texts), "distinct": len(set(texts)), "batch_size": args.batch_size,
              "seed": args.seed, "batches": len(plain)}
    for name, batches in (("random", plain), ("no_duplicates", no_dup)):
        pairs, held = duplicate_pairs(batches, texts)
        report[name] = {"batches": len(batches), "duplicate_pairs": pairs, "batches_with_duplicates": held}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
