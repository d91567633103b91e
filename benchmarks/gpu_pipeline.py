"""``gpu_check.py``'s sections on the other stages: ``encode``, ``run`` (a whole training killed and resumed),
``augment`` and ``probes`` (see ``gpu_check.py``'s docstring)."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

from gpu_fixtures import ROOT, cselab_train, save_bert, save_tokenizer, sentences, synchronize, write_dev_set
from gpu_stepper import Stepper


def measure_encode(args, model_dir: Path) -> dict:
    """``probe run``'s encoding (the encoder ``load_encoder`` gives, mean pooling, no embedding cache) beside
    sentence-transformers' own ``encode`` of the same model (its Transformer and mean Pooling): the same sentences
    (5-60 words), batch 128, bf16 on CUDA for both; sentences/s, and that both give the same vectors (their cosines,
    and the Spearman correlation of the two encoders' similarities of consecutive pairs)."""
    import numpy as np
    import torch
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer, models

    from cselab.encoders import load_encoder

    count, batch = (512, 64) if args.tiny else (40000, 128)
    texts = sentences(count, seed=9, words=(5, 60))
    cuda = args.device.startswith("cuda")
    cselab = load_encoder(str(model_dir), pooler="avg", device=args.device, cache=False)
    width = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    peer = SentenceTransformer(modules=[models.Transformer(str(model_dir)), models.Pooling(width, "mean")],
                               device=args.device)
    if cuda:
        peer = peer.to(torch.bfloat16)
    found, vectors = {"sentences": count, "batch": batch, "dtype": "bfloat16" if cuda else "float32"}, {}
    for name, encode in (("cselab", lambda: cselab.encode(texts, batch_size=batch)),
                         ("sentence_transformers", lambda: peer.encode(texts, batch_size=batch,
                                                                       convert_to_numpy=True))):
        (cselab.encode if name == "cselab" else peer.encode)(texts[:256], batch_size=batch)  # warm-up
        synchronize(args.device)
        clock = time.perf_counter()
        vectors[name] = np.asarray(encode(), dtype=np.float32)
        synchronize(args.device)
        found[f"{name}_sentences_per_s"] = count / (time.perf_counter() - clock)
    clock = time.perf_counter()
    cselab.tokenize(texts)
    found["cselab_tokenize_s"] = time.perf_counter() - clock  # the host's share of cselab's figure
    import peer_trainer

    profiled = peer_trainer.Profiled(args.device, 1)
    profiled.at(0)
    cselab.encode(texts[:4096], batch_size=batch)
    profiled.at(1)
    found["cselab_profile_4096"] = profiled.found
    a, b = vectors["cselab"], vectors["sentence_transformers"]
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    pairs = [(a[:-1] * a[1:]).sum(1) / np.linalg.norm(a[:-1], axis=1) / np.linalg.norm(a[1:], axis=1),
             (b[:-1] * b[1:]).sum(1) / np.linalg.norm(b[:-1], axis=1) / np.linalg.norm(b[1:], axis=1)]
    found.update({"speedup": found["cselab_sentences_per_s"] / found["sentence_transformers_sentences_per_s"],
                  "min_cosine": float(cosine.min()), "pair_similarity_spearman": float(spearmanr(*pairs)[0])})
    return found


def measure_run(args, model_dir: Path, work: Path) -> dict:
    from cselab.encoders import load_encoder

    steps, every = (6, 2) if args.tiny else (300, 100)
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(sentences(64 * (steps + 10), seed=7)) + "\n", encoding="utf-8")
    root = write_dev_set(work / "data", 200 if args.tiny else 1500)
    out = work / "run"
    arguments = ["--method", "simcse", "--model", str(model_dir), "--data", str(corpus), "--data-dir", str(root),
                 "--out", str(out), "--set", f"training.max_steps={steps}", "--set", f"training.eval_steps={every}",
                 "--set", f"training.mixed_precision={'bf16' if args.device.startswith('cuda') else 'no'}"]
    if args.tiny:
        arguments += ["--set", "training.batch_size=16"]
    clock = time.perf_counter()
    first = cselab_train(arguments)
    state = out / "last" / "trainer_state.json"
    while first.poll() is None and not state.exists():
        time.sleep(0.05)
    killed_at = json.loads(state.read_text())["step"] if state.exists() else None
    if first.poll() is None:
        first.send_signal(signal.SIGKILL)
    first.wait()
    resumed = cselab_train(arguments)
    _, errors = resumed.communicate()
    wall = time.perf_counter() - clock
    if resumed.returncode != 0:
        return {"ok": False, "resumed_rc": resumed.returncode, "stderr_tail": errors[-2000:]}
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    best = load_encoder(str(out / "best"), device=args.device)
    result = {"steps": steps, "eval_steps": every, "killed_after_step": killed_at, "resumed_rc": resumed.returncode,
              "final_step": json.loads(state.read_text())["step"], "evaluations": [r for r in log if "stsb_dev" in r],
              "wall_s": wall, "best_encodes": best.encode(["a check"]).shape[-1] == best.dim}
    result["ok"] = result["final_step"] == steps and result["best_encodes"]
    variants = {}
    for name, overrides in (("sam", ()), ("awp-fgsm", ()),
                            ("sg", ("encoder.frozen=bfloat16",) if args.device.startswith("cuda") else ())):
        stepper = Stepper(name, model_dir, args.device, 8 if args.tiny else 64, overrides)
        losses, clock = [], time.perf_counter()
        for step in range(3 if args.tiny else 10):
            losses.append(stepper.loss(step, bf16=args.device.startswith("cuda")))
        synchronize(args.device)
        variants[name] = {"step_s": (time.perf_counter() - clock) / len(losses), "losses": losses,
                          "finite": all(math.isfinite(v) for v in losses)}
    result["variants"] = variants
    return result


def measure_augment(args, work: Path) -> dict:
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from augment_speed import one_mask_per_pass, unsorted_translate

    from cselab.augment.backtranslate import HFTranslator
    from cselab.augment.decoding import Decoding
    from cselab.augment.edits import MaskedLMEditor

    count = 64 if args.tiny else 1024
    texts = sentences(count, seed=11, words=(5, 40))
    editor = MaskedLMEditor(str(save_bert(work / "mlm", args.tiny, masked_lm=True)), batch_size=32,
                            device=args.device)
    editor.substitute(texts[:32])  # warm-up
    synchronize(args.device)
    clock = time.perf_counter()
    editor.substitute(texts)
    synchronize(args.device)
    batched = time.perf_counter() - clock
    clock = time.perf_counter()
    passes = one_mask_per_pass(editor, texts)
    synchronize(args.device)
    per_mask = time.perf_counter() - clock

    size = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                encoder_ffn_dim=64, decoder_ffn_dim=64) if args.tiny else \
        dict(d_model=1024, encoder_layers=6, decoder_layers=6, encoder_attention_heads=16,
             decoder_attention_heads=16, encoder_ffn_dim=8192, decoder_ffn_dim=8192)
    torch.manual_seed(0)
    mt = work / "mt"
    BartForConditionalGeneration(BartConfig(vocab_size=30522, max_position_embeddings=256, pad_token_id=0,
                                            bos_token_id=2, eos_token_id=3, decoder_start_token_id=2,
                                            forced_eos_token_id=None, **size)).save_pretrained(mt)
    save_tokenizer(mt)
    translator = HFTranslator([(str(mt), str(mt))], Decoding(num_candidates=1, num_beams=1, batch_sentences=32,
                                                             max_length=64), device=args.device)
    tokenizer, model = translator.pairs[0][0]
    generate = model.generate

    def length_following(**kwargs):  # random weights: make each output as long as the batch's input
        width = kwargs["input_ids"].shape[1]
        return generate(**{**kwargs, "max_new_tokens": width, "min_new_tokens": width})

    model.generate = length_following
    translator.translate((tokenizer, model), texts[:64])  # warm-up: the first generate calls set up the kernels
    timings = {}
    for _ in range(2):  # each order twice, interleaved; the faster of each kept
        for name, run in (("sorted", lambda: translator.translate((tokenizer, model), texts)),
                          ("input_order", lambda: unsorted_translate(translator, tokenizer, model, texts))):
            synchronize(args.device)
            clock = time.perf_counter()
            run()
            synchronize(args.device)
            timings[name] = min(timings.get(name, math.inf), time.perf_counter() - clock)
    per_sentence = timings["sorted"] / count  # one direction
    return {"sentences": count, "masks": passes, "mlm_batched_s": batched, "mlm_per_mask_s": per_mask,
            "mlm_speedup": per_mask / batched, "translate_sorted_s": timings["sorted"],
            "translate_input_order_s": timings["input_order"],
            "translate_speedup": timings["input_order"] / timings["sorted"],
            "translate_sentences_per_s": count / timings["sorted"],
            "projected_hours_1m_x2_pivots": per_sentence * 1_000_000 * 2 * 2 / 3600}


def measure_probes(args, model_dir: Path) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from cselab.encoders import TransformerEncoder
    from cselab.evaluation.validation import classifier_setup, inner_kfold

    result = {}
    where = [("device", args.device, 512 if args.tiny else 20000)] if args.device != "cpu" else []
    for name, device, count in where + [("cpu", "cpu", 256 if args.tiny else 2000)]:
        encoder = TransformerEncoder(AutoModel.from_pretrained(model_dir).to(device),
                                     AutoTokenizer.from_pretrained(model_dir), pooler="avg")
        texts = sentences(count, seed=5, words=(5, 30))
        encoder.encode(texts[:64], batch_size=64)
        synchronize(device)
        clock = time.perf_counter()
        encoder.encode(texts, batch_size=128)
        synchronize(device)
        result[f"encode_{name}_sentences_per_s"] = count / (time.perf_counter() - clock)
    rows = 1000 if args.tiny else 10662  # MR
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, rows)
    features = rng.normal(size=(rows, 32 if args.tiny else 768)).astype(np.float32) + labels[:, None] * 0.1
    torch.set_num_threads(os.cpu_count() or 1)
    clock = time.perf_counter()
    scores = inner_kfold(features, labels, 2, classifier_setup("fast" if args.tiny else "full"))
    result.update({"classifier_rows": rows, "classifier_cpu_s": time.perf_counter() - clock,
                   "classifier_accuracy": scores["acc"], "classifier_device": "cpu (no device option yet)"})
    return result
