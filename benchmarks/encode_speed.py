"""Encoding speed on the CPU: cselab's ``encode`` beside sentence-transformers' ``SentenceTransformer.encode`` of the
same model on the same sentences, one torch thread, one process, the two timed in turn.

Models: ``tiny`` (a random BERT, hidden size 32, 2 layers, with the packaged MiniLM's tokenizer, written to a
folder that both load) and ``minilm`` (the packaged all-MiniLM-L6-v2). cselab encodes with mean pooling and no
embedding cache (normalised where the folder says so, as MiniLM's does); sentence-transformers with its Transformer,
mean Pooling (and Normalize) modules at cselab's token budget. The sentences are wiki1m's distinct ones (the data
root's prefix), the first ``--sentences``. Each model prints one JSON line: the best and median seconds of each,
sentences/s, the speed-up (cselab's best over sentence-transformers'), the tokens each one's batches are padded to
(cselab sorts the sentences by token count, sentence-transformers by characters, which its ``_input_length`` counts),
and the largest difference of the two libraries' vectors. ``--profile`` prints each one's cProfile (internal time).

    python benchmarks/encode_speed.py [--models tiny,minilm] [--sentences 20000] [--repeats 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from cselab.data.root import data_root
from cselab.encoders import load_encoder
from cselab.encoders.specs import packaged_minilm

WIKI = "wiki/wiki1m_for_simcse.prefix11913.txt"


def tiny_bert(folder: Path) -> Path:
    """A random 2-layer BERT of hidden size 32 (seed 0) with the packaged MiniLM's tokenizer, saved in ``folder``."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(packaged_minilm()).save_pretrained(folder)
    return folder


def padded_tokens(lengths: np.ndarray, order: np.ndarray, batch_size: int) -> int:
    """The tokens the forward passes read (padding included) when batches of ``order`` are padded to their longest."""
    return int(sum(lengths[order[start:start + batch_size]].max() * len(order[start:start + batch_size])
                   for start in range(0, len(order), batch_size)))


def measure(name: str, folder: Path, sentences: list[str], batch_size: int, repeats: int, profile: bool) -> dict:
    """Both libraries on ``folder``'s model, timed in turn ``repeats`` times after a warm-up."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    cselab = load_encoder(str(folder), pooler="avg", cache=False, device="cpu")
    modules = [Transformer(str(folder), max_seq_length=cselab.max_length), Pooling(cselab.dim, "mean")]
    peer = SentenceTransformer(modules=modules + ([Normalize()] if cselab.normalize else []), device="cpu")
    encoders = {"cselab": lambda: cselab.encode(sentences, batch_size=batch_size, show_progress_bar=False),
                "sentence_transformers": lambda: peer.encode(sentences, batch_size=batch_size, convert_to_numpy=True)}
    for encode in encoders.values():  # warm-up
        encode()
    seconds: dict[str, list[float]] = {key: [] for key in encoders}
    vectors = {}
    for repeat in range(repeats):
        for key in sorted(encoders, reverse=repeat % 2 == 1):  # in turn, each first every other time
            clock = time.perf_counter()
            vectors[key] = np.asarray(encoders[key](), dtype=np.float32)
            seconds[key].append(time.perf_counter() - clock)
    if profile:
        for key, encode in encoders.items():
            profiler = cProfile.Profile()
            profiler.runcall(encode)
            print(f"--- {name}: {key}", file=sys.stderr)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(15)
    best = {key: min(times) for key, times in seconds.items()}
    lengths = np.array([len(row) for row in cselab.tokenize(sentences, warn=False)])
    orders = {"cselab": np.argsort(-lengths, kind="stable"),
              "sentence_transformers": np.argsort([-len(sentence) for sentence in sentences], kind="stable")}
    return {"model": name, "sentences": len(sentences), "batch_size": batch_size, "torch_threads": 1,
            "tokenizers_parallelism": os.environ.get("TOKENIZERS_PARALLELISM", "default"), "repeats": repeats,
            **{f"{key}_best_s": round(best[key], 3) for key in encoders},
            **{f"{key}_median_s": round(statistics.median(seconds[key]), 3) for key in encoders},
            **{f"{key}_sentences_per_s": round(len(sentences) / best[key], 1) for key in encoders},
            "speedup": round(best["sentence_transformers"] / best["cselab"], 3), "tokens": int(lengths.sum()),
            **{f"{key}_padded_tokens": padded_tokens(lengths, orders[key], batch_size) for key in encoders},
            "max_abs_difference": float(np.abs(vectors["cselab"] - vectors["sentence_transformers"]).max()),
            "machine": platform.processor() or platform.machine()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny,minilm")
    parser.add_argument("--sentences", type=int, default=20000, help="at most this many (wiki1m's distinct ones)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="each library's cProfile on stderr")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = (data_root() / WIKI).read_text(encoding="utf-8").splitlines()
    sentences = list(dict.fromkeys(lines))[:args.sentences]
    with tempfile.TemporaryDirectory(prefix="cselab-encode-speed-") as work:
        folders = {"tiny": lambda: tiny_bert(Path(work) / "tiny"), "minilm": packaged_minilm}
        for name in args.models.split(","):
            row = measure(name, folders[name](), sentences, args.batch_size, args.repeats, args.profile)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
