"""Decoder LMs' templates and attention, on tiny random decoders: PromptEOL's one-word template, echo embeddings'
(the sentence twice, pooled over its last copy) and LLM2Vec's bidirectional attention.

PromptEOL's rows are restated from kongds/scaling_sentemb's ``ft_llm.py`` at 8567aa0 (``generate_sentemb_prompt``
221-239: the sentence's tokens cut at 32 and decoded, the template's ``_`` as spaces, stripped; ``tokenize`` 340-360
with ``add_eos_token`` False for NLI rows, 390).

Echo's parser and pooling are restated here from jakespringer/echo-embeddings' ``echo_embeddings.py`` at c752c46
(``EchoParser._parse_template`` 20-38, ``_tokenize_piece`` 40-65: each piece tokenised apart, a braced piece pooled
unless it starts with ``!``; ``EchoPooling.forward`` 107-113: the mean of the pooled tokens). LLM2Vec's bidirectional
model is restated from McGill-NLP/llm2vec's ``bidirectional_llama.py`` at 312adcf (every attention module
``is_causal = False``, 26-41, and a mask of the padding alone, 138-152)."""

import re

import numpy as np
import pytest
import torch
from transformers import AutoModel

from cselab.encoders import load_encoder
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method

SENTENCES = ["a quick brown fox jumps over the lazy dog", "dogs run", "never trust a sentence that ends"]
INSTRUCTION = "Retrieve semantically similar text."
# echo's README templates, with the tiny tokenizer's end token for </s> (it adds no start token, so no <s>)
ECHO_TEMPLATES = {"query": "Instruct:{!%%prompt%%,}\nQuery:{!%%text%%}\nQuery again:{%%text%%}{<|endoftext|>}",
                  "document": "Document:{!%%text%%}\nDocument again:{%%text%%}{<|endoftext|>}"}
OURS = {"query": "Instruct:Retrieve semantically similar text.,\nQuery:{}\nQuery again:{}[EOS]",
        "document": "Document:{}\nDocument again:{}[EOS]"}


def prompteol_ids(tokenizer, sentence: str) -> list[int]:
    """ft_llm.py's ids of one sentence (restated, see the module docstring)."""
    cut = tokenizer(sentence, truncation=True, max_length=32, padding=False, add_special_tokens=False)["input_ids"]
    template = 'This_sentence_:_"*sent_0*"_means_in_one_word:"'.replace("_", " ")  # train_llm.sh:4
    return tokenizer(template.replace("*sent 0*", tokenizer.decode(cut)).strip())["input_ids"]


def test_prompteol_rows_are_those_of_the_released_code(tiny_decoders):
    method = load_method("prompteol")
    plain = load_encoder(str(tiny_decoders["llama"]), pooler="last", cache=False, device="cpu")
    encoder = TransformerEncoder(plain.model, plain.tokenizer, pooler=method.encoder.pooler,
                                 prompt=method.encoder.prompt, max_length=method.training.max_length)
    long = " ".join(SENTENCES * 3)  # more than 32 tokens: cut, then wrapped
    assert len(encoder.tokenizer(long, add_special_tokens=False)["input_ids"]) > 32
    rows = encoder.tokenize([*SENTENCES, long], warn=False)
    assert rows == [prompteol_ids(encoder.tokenizer, sentence) for sentence in [*SENTENCES, long]]
    assert encoder.tokenizer.decode(rows[1]) == 'This sentence : "dogs run" means in one word:"'


def echo_parser(tokenizer, template: str, variables: dict[str, str]) -> tuple[list[int], list[int]]:
    """EchoParser's ids and embed mask of one text (restated, see the module docstring)."""
    matches = list(re.finditer(r"\{(.|\n|\r|\t)+?\}", template))
    pieces, end = [], 0
    for match in matches:
        pieces += [template[end:match.start()], match.group()]
        end = match.end()
    ids, pooled = [], []
    for piece in [p for p in [*pieces, template[end:]] if p]:
        braced = piece.startswith("{") and piece.endswith("}")
        text, keep = piece, False
        if braced:
            keep = not piece.startswith("{!")
            text = piece[1:-1] if keep else piece[2:-1]
            for key, value in variables.items():
                text = text.replace(f"%%{key}%%", value)
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += tokens
        pooled += [int(keep)] * len(tokens)
    return ids, pooled


@pytest.mark.parametrize("template", ["query", "document"])
def test_echo_rows_and_pooled_tokens_are_those_of_echos_parser(template, tiny_decoders):
    plain = load_encoder(str(tiny_decoders["llama"]), pooler="avg", cache=False, device="cpu")
    encoder = TransformerEncoder(plain.model, plain.tokenizer, pooler="avg", prompt=OURS[template],
                                 pool_tokens="last_copy")
    rows = encoder.tokenize(SENTENCES)
    input_ids, attention_mask = encoder.pad(rows)
    pooled = encoder.pool_mask(attention_mask)
    states = encoder.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    vectors = encoder.encode(SENTENCES)
    for r, sentence in enumerate(SENTENCES):
        ids, mask = echo_parser(encoder.tokenizer, ECHO_TEMPLATES[template], {"prompt": INSTRUCTION, "text": sentence})
        assert rows[r] == ids
        assert pooled[r, :len(ids)].tolist() == mask and not pooled[r, len(ids):].any()
        echo_mean = (states[r, :len(ids)] * torch.tensor(mask)[:, None]).sum(0) / sum(mask)  # EchoPooling 'mean'
        np.testing.assert_allclose(vectors[r], echo_mean.detach().numpy(), atol=2e-6)
        np.testing.assert_allclose(vectors[r], encoder.encode([sentence])[0], atol=2e-6)  # alone as in a batch
    last = TransformerEncoder(encoder.model, encoder.tokenizer, pooler="last", prompt=OURS[template],
                              pool_tokens="last_copy").encode(SENTENCES[:1])[0]
    np.testing.assert_allclose(last, states[0, len(rows[0]) - 1].detach().numpy(), atol=2e-6)  # the end token


def test_each_copy_keeps_max_length_tokens_and_the_template_stays_whole(tiny_decoders):
    plain = load_encoder(str(tiny_decoders["llama"]), pooler="avg", cache=False, device="cpu")
    encoder = TransformerEncoder(plain.model, plain.tokenizer, pooler="avg", prompt=OURS["document"],
                                 pool_tokens="last_copy", max_length=3)
    with pytest.warns(UserWarning, match="1 sentence\\(s\\) longer than max_length=3"):
        row = encoder.tokenize(SENTENCES[:1])[0]
    cut = encoder.tokenizer(SENTENCES[0], add_special_tokens=False)["input_ids"][:3]
    assert row == echo_parser(encoder.tokenizer, ECHO_TEMPLATES["document"],
                              {"text": encoder.tokenizer.decode(cut)})[0]
    assert encoder.pool_mask(encoder.pad([row])[1]).sum() == 3 + 1  # the copy and the end token


def test_echo_settings_are_refused_where_they_cannot_hold(tiny_decoders, tiny_bert_dir):
    llama = str(tiny_decoders["llama"])
    with pytest.raises(ConfigError, match="last_copy pools the sentence's last copy: the prompt must hold"):
        load_method("echo", ['encoder.prompt="Query: {}"'])
    with pytest.raises(ConfigError, match="encoder.pool_tokens: last_copy: pooler 'cls_before_pooler' reads one"):
        load_method("echo", ["encoder.pooler=cls_before_pooler"])
    with pytest.raises(ConfigError, match="\\[EOS\\] stands for the end-of-sequence token, which the tokenizer has"):
        load_encoder(str(tiny_bert_dir), pooler="avg", prompt=OURS["document"], cache=False)
    plain = load_encoder(llama, pooler="avg", cache=False, device="cpu")
    with pytest.raises(ConfigError, match="the sentence more than once goes with neither prompt_pieces nor"):
        TransformerEncoder(plain.model, plain.tokenizer, prompt=OURS["document"], prompt_pieces=True)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2", "opt"])
def test_bidirectional_attention_sees_later_tokens_and_keeps_rows_apart(kind, tiny_decoders):
    folder = str(tiny_decoders[kind])
    causal = load_encoder(folder, pooler="avg", cache=False, device="cpu")
    both = TransformerEncoder(causal.model, causal.tokenizer, pooler="avg", bidirectional=True)
    ids, mask = both.pad(both.tokenize(SENTENCES))
    with torch.no_grad():
        first = both.run(both.model, ids, mask).last_hidden_state[:, 0]
        changed = ids.clone()
        changed[0, 3] = (changed[0, 3] + 1) % len(both.tokenizer)
        assert not torch.allclose(both.run(both.model, changed, mask).last_hidden_state[0, 0], first[0])
        assert torch.allclose(causal.run(causal.model, changed, mask).last_hidden_state[0, 0],
                              causal.run(causal.model, ids, mask).last_hidden_state[0, 0])  # causal: blind to it
    vectors = both.encode(SENTENCES)
    for r, sentence in enumerate(SENTENCES):
        np.testing.assert_allclose(vectors[r], both.encode([sentence])[0], atol=2e-6)
    assert not np.allclose(vectors, causal.encode(SENTENCES), atol=1e-4)


def test_bidirectional_attention_is_llm2vecs(tiny_decoders):
    """llm2vec's LlamaBiModel: each attention module non-causal, a mask of the padding alone (no padding here)."""
    folder = str(tiny_decoders["llama"])
    both = load_encoder(folder, pooler="avg", cache=False, device="cpu")
    both = TransformerEncoder(both.model, both.tokenizer, pooler="avg", bidirectional=True)
    reference = AutoModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    for module in reference.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = False
    ids, mask = both.pad(both.tokenize(SENTENCES[:1]))
    with torch.no_grad():
        theirs = reference(input_ids=ids).last_hidden_state
        ours = both.run(both.model, ids, mask).last_hidden_state
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=2e-6)
    both.model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ConfigError, match="runs 'flash_attention_2' attention, which takes no 4-D mask"):
        TransformerEncoder(both.model, both.tokenizer, bidirectional=True)
