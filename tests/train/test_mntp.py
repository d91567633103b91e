"""LLM2Vec's masked next-token prediction (the ``mntp`` loss) and the encoder's ``model_config``, on a tiny random Llama
causal LM. The reference is llm2vec's ``LlamaBiForMNTP`` (McGill-NLP/llm2vec ``bidirectional_llama.py`` at 312adcf,
191-211): transformers' ``LlamaForCausalLM`` over a model whose attention modules are not causal, its loss
transformers' own shifted cross-entropy over the masked tokens' labels."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.plugins import functional as L
from cselab.train.run.setup import attach_auxiliary, build_encoder
from cselab.train.objective import Objective

SENTENCES = ["a quick brown fox jumps over the lazy dog", "dogs run fast over the lazy fox", "never trust a sentence"]


def test_masked_next_token_predicts_each_masked_token_from_the_position_before_it():
    logits = torch.zeros(1, 3, 2)
    logits[0, 0, 1] = math.log(3.0)  # position 0 predicts token 1 with p = 3/4
    logits[0, 1, 0] = 5.0  # position 1's logits would be read by a loss without the shift
    labels = torch.tensor([[-100, 1, -100]])
    assert L.masked_next_token(logits, labels).item() == pytest.approx(-math.log(0.75))
    assert L.masked_next_token(logits, torch.tensor([[1, -100, -100]])).item() == 0.0  # the first token: no predictor


def test_every_picked_token_reads_the_mask_token_with_mask_share_one():
    ids = torch.arange(10, 1010).view(10, 100)
    masked, labels = L.mask_tokens(ids, torch.ones_like(ids, dtype=torch.bool), 0.5, 7, 2000,
                                   torch.Generator().manual_seed(0), mask_share=1.0)
    picked = labels != -100
    assert 400 < picked.sum() < 600 and (masked[picked] == 7).all() and (masked[~picked] == ids[~picked]).all()


def test_the_mntp_loss_is_llm2vecs_on_the_bidirectional_model(tiny_causal_llama):
    method = load_method("llm2vec-mntp", ["training.max_length=24"])
    encoder = build_encoder(method, str(tiny_causal_llama)).eval()  # eval: no dropout, LoRA's B still 0
    attach_auxiliary(encoder, Objective(method))
    ids, mask = encoder.tokenize(SENTENCES[:1])
    labels = torch.full_like(ids, -100)
    masked = ids.clone()
    for position in (2, 5, 6):
        labels[0, position], masked[0, position] = ids[0, position], encoder.tokenizer.convert_tokens_to_ids("_")
    ours = L.masked_next_token(encoder(masked, mask, mlm=True), labels)
    reference = AutoModelForCausalLM.from_pretrained(tiny_causal_llama, attn_implementation="sdpa").eval()
    for module in reference.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = False
    theirs = reference(input_ids=masked, labels=labels).loss
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_mntp_and_model_config_are_refused_where_they_cannot_hold(tiny_causal_llama, tiny_decoders):
    with pytest.raises(ConfigError, match="has no next-token head weights .* give the folder of the whole causal LM"):
        build_encoder(load_method("llm2vec-mntp"), str(tiny_decoders["llama"]))
    method = load_method("llm2vec-mntp", ["losses.mntp.mask_token=never mind", "training.max_length=24"])
    encoder = build_encoder(method, str(tiny_causal_llama))
    with pytest.raises(ConfigError, match="losses.mntp.mask_token: 'never mind' is not one token of the tokenizer's"):
        attach_auxiliary(encoder, Objective(method))
    with pytest.raises(ConfigError, match="losses: mntp, mlm need a masked and a causal language-model head"):
        build_encoder(load_method("llm2vec-mntp", ["losses.mlm={source: source}"]), str(tiny_causal_llama))
    with pytest.raises(ConfigError, match="encoder.model_config.attn_pdrop: .* \\(LlamaConfig\\) has no such field"):
        build_encoder(load_method("llm2vec", ["encoder.model_config={attn_pdrop: 0.3}"]), str(tiny_causal_llama))
    encoder = build_encoder(load_method("llm2vec", ["training.max_length=24"]), str(tiny_causal_llama))
    assert encoder.backbone.config.attention_dropout == 0.3
