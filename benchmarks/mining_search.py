"""Mining's nearest-neighbour search, exact (cosine of every pair, in chunks of queries) against faiss
(``IndexFlatIP``), on random unit vectors of MiniLM's width: seconds per search and how often the two agree on a
query's candidate list, by corpus size. What ``search: auto`` switches at (``cselab.augment.mining.FAISS_FROM``).

    python benchmarks/mining_search.py --sizes 10000 100000 300000 --queries 2000 --out results/mining_search.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

from cselab.augment.mining import _nearest


def unit(rows: int, dim: int, seed: int) -> torch.Tensor:
    vectors = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return torch.nn.functional.normalize(torch.from_numpy(vectors), dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--candidates", type=int, default=32, help="range_max + positives + 1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="results/mining_search.json")
    args = parser.parse_args()
    queries = unit(args.queries, args.dim, 1)
    rows = []
    for size in args.sizes:
        corpus = unit(size, args.dim, 2)
        seconds, found = {}, {}
        for search in ("exact", "faiss"):
            times = []
            for _ in range(args.rounds):
                clock = time.perf_counter()
                found[search] = _nearest(queries, corpus, args.candidates, search)[1]
                times.append(time.perf_counter() - clock)
            seconds[search] = min(times)
        same = float((found["exact"] == found["faiss"]).all(dim=1).float().mean())
        row = {"corpus": size, "queries": args.queries, "exact_s": round(seconds["exact"], 3),
               "faiss_s": round(seconds["faiss"], 3), "faiss_speedup": round(seconds["exact"] / seconds["faiss"], 2),
               "same_candidates": round(same, 4)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| Corpus | Queries | exact (s) | faiss (s) | faiss speed-up | same candidate lists |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['corpus']:,} | {r['queries']:,} | {r['exact_s']} | {r['faiss_s']} | {r['faiss_speedup']}x | "
              f"{100 * r['same_candidates']:.1f}% |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": date.today().isoformat(), "machine": platform.processor() or platform.machine(),
                               "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "dim": args.dim,
                               "candidates": args.candidates, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
