"""The ceiling: the step of ``cselab train --method simcse`` in ``gpu_check.py``'s ``ceiling`` section (pooler
``cls_before_pooler``, no head: peer_trainer.SAME_WORK) as a plain PyTorch loop, with no cselab import. A random BERT
folder, its tokenizer; the corpus's sentences tokenised before the loop (``--length`` tokens a row) and put on the
device; the two dropout views in one pass of 2N rows; the last layer's [CLS]; InfoNCE at temperature 0.05; bf16
autocast; gradients clipped to norm 1; torch's fused AdamW (lr 3e-5); nothing read back inside the loop. The model
and the loss go through ``torch.compile`` (``--graphs``: CUDA graphs, ``mode="reduce-overhead"``).

    python benchmarks/ceiling.py MODEL_DIR CORPUS --batch 64 --steps 100 --warmup 20 [--graphs] [--device cuda]

Prints one JSON line: steps/s over the timed steps (the device synchronised before and after them), the peak
memory (MiB), the last loss.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer


def info_nce(vectors: torch.Tensor, rows: int, temperature: float = 0.05) -> torch.Tensor:
    """Row i of the first copy against every row of the second; its own is the positive."""
    first, second = F.normalize(vectors[:rows], dim=-1), F.normalize(vectors[rows:], dim=-1)
    logits = first @ second.T / temperature
    return F.cross_entropy(logits, torch.arange(rows, device=vectors.device))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("corpus", help="one sentence a line")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100, help="timed steps")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first (compilation, graph capture)")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--graphs", action="store_true", help="CUDA graphs (reduce-overhead)")
    parser.add_argument("--eager", action="store_true", help="no torch.compile")
    args = parser.parse_args()
    device, cuda = torch.device(args.device), args.device.startswith("cuda")
    torch.manual_seed(0)
    model = AutoModel.from_pretrained(args.model).to(device).train()
    texts = [line for line in open(args.corpus, encoding="utf-8").read().splitlines() if line]
    total = args.batch * (args.warmup + args.steps)
    texts = (texts * (total // len(texts) + 1))[:total]
    tokens = AutoTokenizer.from_pretrained(args.model)(texts, padding="max_length", truncation=True,
                                                       max_length=args.length, return_tensors="pt")
    ids, mask = tokens["input_ids"].to(device), tokens["attention_mask"].to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.0, fused=cuda)
    forward = model if args.eager else torch.compile(model, mode="reduce-overhead" if args.graphs else None)
    loss_of = info_nce if args.eager else torch.compile(info_nce)

    def step(number: int) -> torch.Tensor:
        rows = slice(number * args.batch, (number + 1) * args.batch)
        if args.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            states = forward(input_ids=ids[rows].repeat(2, 1), attention_mask=mask[rows].repeat(2, 1))
            loss = loss_of(states.last_hidden_state[:, 0].float(), args.batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    for number in range(args.warmup):
        step(number)
    if cuda:
        torch.cuda.synchronize()
    clock = time.perf_counter()
    for number in range(args.warmup, args.warmup + args.steps):
        loss = step(number)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - clock
    print(json.dumps({"trainer": "ceiling", "batch": args.batch, "steps": args.steps, "graphs": args.graphs,
                      "compiled": not args.eager, "steps_per_s": args.steps / seconds, "last_loss": float(loss),
                      "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}))


if __name__ == "__main__":
    main()
