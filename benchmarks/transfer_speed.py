"""Transfer tasks: cselab's classifiers against SentEval's own loop on the same embeddings (accuracy and time).

Encodes the transfer sets of the plan once (all: SimCSE's seven; SST5 and SICKE by name) with the packaged MiniLM
(or ``--model``), then for each task x classifier setup of the plan scores the same feature matrix with
``cselab.probes.transfer.score_task`` and with ``senteval_reference`` (SentEval's classifier and validation loops,
one model at a time).
Both run with one torch thread and one process, so the ratio is the batching alone; cselab's
``--n-jobs`` adds processes on top. Prints a Markdown table and writes JSON.

    python benchmarks/transfer_speed.py --plan full:CR,TREC,MRPC,SST2 --plan fast:all --out results/transfer.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))

import senteval_reference as reference  # noqa: E402

from cselab.data.transfer import ALL_TRANSFER_TASKS, TRANSFER_TASKS, load_transfer  # noqa: E402
from cselab.encoders import load_encoder  # noqa: E402
from cselab.evaluation.transfer import NCLASSES, task_features  # noqa: E402
from cselab.probes.transfer import score_task  # noqa: E402
from cselab.evaluation.validation import classifier_setup  # noqa: E402


def senteval_score(task: str, X: np.ndarray, y: np.ndarray, rows: dict, setup_name: str) -> dict:
    setup = classifier_setup(setup_name)
    config = {"nhid": setup.classifier.nhid, "optim": setup.classifier.optim, "batch_size": setup.classifier.batch_size,
              "tenacity": setup.classifier.tenacity, "epoch_size": setup.classifier.epoch_size}
    n = NCLASSES[task]
    if list(rows) == ["all"]:
        return reference.inner_kfold(X, y, n, config, setup.kfold)
    if "dev" in rows:
        r = [rows[k] for k in ("train", "dev", "test")]
        return reference.split(X[r[0]], y[r[0]], X[r[1]], y[r[1]], X[r[2]], y[r[2]], n, config)
    tr, te = rows["train"], rows["test"]
    result = reference.kfold_then_test(X[tr], y[tr], X[te], y[te], n, config, setup.kfold)
    result.pop("predictions")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--plan", action="append", default=[], metavar="SETUP:TASKS",
                        help="e.g. full:CR,TREC or fast:all (repeatable)")
    parser.add_argument("--data-dir")
    parser.add_argument("--vectors", help="npz cache of the sentence vectors (written if missing)")
    parser.add_argument("--out", default="results/transfer_speed.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    plan = [(p, TRANSFER_TASKS if t == "all" else tuple(t.split(","))) for p, t in
            (item.split(":", 1) for item in args.plan or ["fast:all"])]
    tasks = sorted({t for _, ts in plan for t in ts}, key=ALL_TRANSFER_TASKS.index)
    data = {t: load_transfer(t, args.data_dir) for t in tasks}
    texts = list(dict.fromkeys(x for s in data.values() for p in s.values() for x in (*p.texts, *(p.texts2 or ()))))
    cache = Path(args.vectors) if args.vectors else None
    if cache and cache.exists():
        stored = np.load(cache, allow_pickle=False)
        vectors = dict(zip(stored["texts"].tolist(), stored["vectors"]))
    else:
        clock = time.perf_counter()
        vectors = dict(zip(texts, load_encoder(args.model).encode(texts)))
        print(f"encoded {len(texts)} sentences in {time.perf_counter() - clock:.1f} s", flush=True)
        if cache:
            np.savez(cache, texts=np.array(texts), vectors=np.stack([vectors[t] for t in texts]))
    rows_out = []
    for setup_name, task_list in plan:
        for task in task_list:
            X, y, rows = task_features(data[task], vectors)
            clock = time.perf_counter()
            ours = score_task(task, data[task], vectors, setup_name)
            ours_s = time.perf_counter() - clock
            clock = time.perf_counter()
            theirs = senteval_score(task, X, y, rows, setup_name)
            theirs_s = time.perf_counter() - clock
            row = {"task": task, "classifier": setup_name, "cselab_acc": ours["acc"], "senteval_acc": theirs["acc"],
                   "cselab_devacc": ours["devacc"], "senteval_devacc": theirs["devacc"], "cselab_s": round(ours_s, 1),
                   "senteval_s": round(theirs_s, 1), "speedup": round(theirs_s / ours_s, 2)}
            rows_out.append(row)
            print(json.dumps(row), flush=True)
    print("\n| Task | Classifier | cselab acc. | SentEval acc. | Δ | cselab (s) | SentEval loop (s) | Speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows_out:
        print(f"| {r['task']} | {r['classifier']} | {r['cselab_acc']:.2f} | {r['senteval_acc']:.2f} | "
              f"{r['cselab_acc'] - r['senteval_acc']:+.2f} | {r['cselab_s']} | {r['senteval_s']} | {r['speedup']}x |")
    total_ours = sum(r["cselab_s"] for r in rows_out)
    total_theirs = sum(r["senteval_s"] for r in rows_out)
    print(f"\ntotal: cselab {total_ours:.0f} s, SentEval loop {total_theirs:.0f} s, {total_theirs / total_ours:.1f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "date": date.today().isoformat(), "machine": platform.processor()
                               or platform.machine(), "torch_threads": 1, "rows": rows_out}, indent=2) + "\n")


if __name__ == "__main__":
    main()
