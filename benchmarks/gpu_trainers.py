"""``gpu_check.py``'s sections that run ``cselab train`` beside its peers: ``ceiling`` (the plain loop and
sentence-transformers' trainer), ``family`` and ``lora`` (see ``gpu_check.py``'s docstring)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpu_fixtures import (ROOT, TINY_SETTINGS, late, left, reset_peak, row_error, run_json, save_bert,
                          save_tokenizer, sentences, simcse_flops, write_rows)
from gpu_stepper import Stepper
from stand_ins import LM_HEAD, stand_in_models, with_lm_head


def measure_ceiling(args, model_dir: Path, work: Path, peak: float | None) -> dict:
    """``cselab train --method simcse`` (the same work as sentence-transformers': ``peer_trainer.SAME_WORK``) beside
    the same step as a plain PyTorch loop (``benchmarks/ceiling.py``: compiled, CUDA graphs on CUDA) and beside
    ``SentenceTransformerTrainer``, at batch 512 and 64, each in a process of its own: steps/s, MFU and the ratios;
    then ``osscse`` as ``cselab train`` runs it at batch 64. First, that the work is the same: both libraries' loss of
    one batch, dropout off, in fp32."""
    import peer_trainer

    cuda = args.device.startswith("cuda")
    quiet = save_bert(work / "bert-no-dropout", args.tiny, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    first = Stepper("simcse", quiet, args.device, 8 if args.tiny else 64, peer_trainer.SAME_WORK)
    texts = first.rows(0)["text"]
    check = {"rows": len(texts), "log_rows": math.log(len(texts)), "cselab": first.loss(0, bf16=False)}
    try:  # log_rows: the loss were every similarity the same
        check["sentence_transformers"] = peer_trainer.st_first_batch_loss(quiet, args.device, texts, 32)
        check["relative_difference"] = abs(check["cselab"] - check["sentence_transformers"]) / abs(
            check["sentence_transformers"])
    except Exception:  # noqa: BLE001  (the timings still run)
        check["error"] = row_error()
    found: dict = {"same_work": check}
    del first
    speed = ["--set", "training.compile=false"] if args.no_compile else []
    rows = []
    plan = {512: (512, 40, 10), 64: (64, 100, 20)}
    for batch, steps, skip in ((16, 8, 3), (8, 12, 4)) if args.tiny else (
            plan[int(b)] for b in args.ceiling_batches.split(",") if b):
        corpus = work / f"ceiling-{batch}.txt"
        corpus.write_text("\n".join(sentences(batch * steps, seed=20 + batch)) + "\n", encoding="utf-8")
        flops = simcse_flops(model_dir, batch)
        commands = {
            "ceiling": [str(ROOT / "benchmarks" / "ceiling.py"), str(model_dir), str(corpus), "--batch", str(batch),
                        "--steps", str(steps - skip), "--warmup", str(skip), "--device", args.device,
                        *(["--graphs"] if cuda and not args.no_compile else []),
                        *(["--eager"] if args.no_compile else [])],
            "cselab": [str(ROOT / "benchmarks" / "peer_trainer.py"), "cselab", str(model_dir), str(corpus),
                       *_common(batch, steps, skip, args, work / f"cselab-{batch}"),
                       *(f"--set={value}" for value in peer_trainer.SAME_WORK), *speed],
            "sentence-transformers": [str(ROOT / "benchmarks" / "peer_trainer.py"), "sentence-transformers",
                                      str(model_dir), str(corpus), *_common(batch, steps, skip, args,
                                                                            work / f"st-{batch}")]}
        for trainer, command in commands.items():
            rows.append(_timed_row({"trainer": trainer, "method": "simcse", "batch": batch, "steps": steps,
                                    "timed_after": skip}, command, args, flops, peak))
            if trainer == "cselab" and "error" in rows[-1] and not speed:  # its figure without compilation, said so
                rows.append(_timed_row({"trainer": "cselab, compile false", "method": "simcse", "batch": batch,
                                        "steps": steps, "timed_after": skip},
                                       [*command, "--set", "training.compile=false"], args, flops, peak))
    batch, steps, skip = (8, 12, 4) if args.tiny else (64, 100, 20)
    table = write_rows(work / "osscse-rows.jsonl", batch * (steps + 5), seed=31)
    rows.append(_timed_row({"trainer": "cselab", "method": "osscse", "batch": batch, "steps": steps,
                            "timed_after": skip},
                           [str(ROOT / "benchmarks" / "peer_trainer.py"), "cselab", str(model_dir), str(table),
                            *_common(batch, steps, skip, args, work / "osscse"), "--method", "osscse", "--set",
                            "training.lr=1e-5", *speed, "--profile", "3" if args.tiny else "5"], args, None, peak))
    found["runs"] = rows
    found["ratios"] = _ratios(rows)
    return found


def _common(batch: int, steps: int, skip: int, args, out: Path) -> list[str]:
    return ["--batch", str(batch), "--steps", str(steps), "--skip", str(skip), "--device", args.device, "--out",
            str(out)]


def _timed_row(row: dict, command: list[str], args, flops: float | None, peak: float | None) -> dict:
    """One subprocess's figures (and the MFU of ``flops`` a step), or its error, or that the deadline passed."""
    if late():
        return {**row, "error": "skipped: past the deadline"}
    try:
        found = run_json(command, left(args))
        row.update({key: value for key, value in found.items() if key not in row})
        if flops:
            row["tflops"] = flops * row["steps_per_s"] / 1e12
            row["mfu"] = row["tflops"] / peak if peak else None
    except Exception:  # noqa: BLE001  (the row says why; the others still run)
        row["error"] = row_error()
    print(json.dumps(row), flush=True)
    return row


def _ratios(rows: list[dict]) -> dict:
    """cselab's steps/s over the ceiling's and over sentence-transformers', by batch."""
    rates = {(r["trainer"], r["batch"]): r["steps_per_s"] for r in rows if r["method"] == "simcse" and "error" not in r}
    ratios = {}
    for (trainer, batch), value in rates.items():
        for other in ("ceiling", "sentence-transformers"):
            if trainer == "cselab" and (other, batch) in rates:
                ratios[f"cselab/{other}@{batch}"] = value / rates[other, batch]
    return ratios


def measure_family(args, model_dir: Path, work: Path, peak: float | None) -> list[dict]:
    """The SimCSE family (``--family``) as ``cselab train`` runs each, at batch 64 in bf16 with the trainer's levers
    but compilation (each would compile anew): steps/s, one row each; the models their losses name are random
    stand-ins of the released ones' sizes (``benchmarks/stand_ins.py``)."""
    import peer_trainer

    batch, steps, skip = (8, 8, 3) if args.tiny else (64, 40, 10)
    table = write_rows(work / "family-rows.jsonl", batch * steps, seed=41)
    rows = []
    for method in [m for m in args.family.split(",") if m]:
        row = {"method": method, "batch": batch, "steps": steps, "timed_after": skip}
        if late():
            rows.append({**row, "error": "skipped: past the deadline"})
            continue
        reset_peak(args.device)
        try:
            base = with_lm_head(str(model_dir), model_dir.parent) if method in LM_HEAD else model_dir
            overrides = (*stand_in_models(method, str(model_dir), model_dir.parent, args.tiny),
                         *(TINY_SETTINGS.get(method, ()) if args.tiny else ()), "training.compile=false")
            found = peer_trainer.cselab_train(Path(base), args.device, table, batch, steps, skip,
                                              args.device.startswith("cuda"), work / f"family-{method}", method,
                                              overrides)
            row.update(found)
        except Exception:  # noqa: BLE001  (the row says why; the other rows still run)
            row["error"] = row_error()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def measure_lora(args, work: Path) -> list[dict]:
    """A decoder's LoRA step, with and without gradient checkpointing (see the module docstring)."""
    from lora_step import run_alone

    save_tokenizer(work / "lora-tokenizer")
    batch = 8 if args.tiny else 64
    (work / "lora-sentences.txt").write_text("\n".join(sentences(batch * (args.steps + 2), seed=3)), encoding="utf-8")
    rows = []
    for variant in ("lora", "lora-ckpt", "qlora-ckpt"):
        if late():
            rows.append({"variant": variant, "error": "skipped: past the deadline"})
            continue
        try:
            rows.append(run_alone(variant, "tiny" if args.tiny else "0.5b", batch, args.steps, 32, args.device,
                                  args.device.startswith("cuda"), str(work / "lora-tokenizer"),
                                  str(work / "lora-sentences.txt"), timeout=600))
        except Exception:  # noqa: BLE001  (one row's failure is reported in its cell)
            rows.append({"variant": variant, "error": row_error()})
    return rows
