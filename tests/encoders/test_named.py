"""Named encodings (``probe run --encoding NAME``): training-free vectors from a decoder LM, each equal on tiny random
decoders to its released evaluation restated here (file and line cited), and refused in one line where misspelt."""

import hashlib
import json

import numpy as np
import pytest
import torch

from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.encoders.encoding import Encoding, written_as
from cselab.encoders.named import NAMED_ENCODINGS, named_encoding
from cselab.errors import ConfigError
from tests.runs import one_line_error

#: Sentences that meet each of PromptEOL's rules: no final stop, a final '?', double quotes, a final quote.
SENTENCES = ["A man is playing a guitar", "Is the cat on the mat?", 'She said "hello" to him.',
             "He wrote 'yes'", 'The "best" plan "', "Two dogs run."]


def released_sentence(sentence):
    """A sentence as the three released evaluations write it before their template takes it (PromptEOL's
    evaluation.py 198-200, MetaEOL's 142-144, Token Prepending's evaluate.py 314-316)."""
    if sentence and sentence[-1] not in ".?\"'":
        sentence = sentence + "."
    sentence = sentence.replace('"', "'")
    return sentence[:-1] + "." if sentence.endswith("?") else sentence


def released_vectors(folder, sentences, templates):
    """The vectors of PromptEOL's and MetaEOL's released evaluations (below), ``templates`` in their own spelling:
    each sentence in each template, one batch padded on the left, the last layer's state at the last position, the
    mean over templates."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token_id, tokenizer.padding_side = 0, "left"
    texts = []
    for sentence in map(released_sentence, sentences):
        texts += [template.replace("*sent 0*", sentence).strip() for template in templates]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        states = model(output_hidden_states=True, return_dict=True, **batch).hidden_states[-1][:, -1]
    return states.view(-1, len(templates), states.shape[-1]).mean(dim=1).numpy()


def released_prompteol(folder, sentences):
    """PromptEOL's vectors as kongds/scaling_sentemb's evaluation.py (8567aa0) makes them: the tokenizer padding on
    the left with id 0 (lines 143-144), the template with '_' read as a space (194), each sentence given a final '.'
    unless it ends in . ? " or ', its double quotes made single and a final '?' made '.', then put in the template
    and the result stripped (198-201), the batch tokenised with its special tokens and padded (203-208), and the
    vector the last layer's state at the last position (hidden_states[-1][:, -1], 223)."""
    return released_vectors(folder, sentences, ['This_sentence_:_"*sent_0*"_means_in_one_word:"'.replace("_", " ")])


def released_metaeol(folder, sentences):
    """MetaEOL's vectors as Yibin-Lei/MetaEOL's evaluation.py (c62096d) makes them: PromptEOL's tokenizer and sentence
    rules (lines 82-83, 142-146), each sentence in each of the eight task templates (116-125), one batch (149-154),
    the last position's state of the last layer averaged over the templates (164-165)."""
    templates = NAMED_ENCODINGS["metaeol"]["prompt"]
    return released_vectors(folder, sentences, [template.replace("{}", "*sent 0*") for template in templates])


def test_prompteol_writes_each_sentence_as_the_released_evaluation():
    assert written_as(SENTENCES, "prompteol") == [
        "A man is playing a guitar.", "Is the cat on the mat.", "She said 'hello' to him.", "He wrote 'yes'",
        "The 'best' plan '", "Two dogs run."]
    assert written_as(SENTENCES, "as_is") == SENTENCES


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_prompteol_equals_the_released_evaluation(kind, tiny_causal_llama, tmp_path):
    """The released batch pads on the left and reads position -1; a rotary decoder's states do not move with the
    padding, so cselab's right-padded last real token is the same state. Tolerance: float32 rounding of the rotary
    positions shifted by the padding, measured at most 2.4e-7 over 1, 2 and 4 threads, ATEN_CPU_CAPABILITY=default
    and MKL_CBWR=COMPATIBLE; the sentence rules left out (below), the vectors move by more than 1e-2."""
    from tests.conftest import save_tiny_decoder

    folder = tiny_causal_llama if kind == "llama" else save_tiny_decoder(tmp_path, kind, head=True)
    ours = load_encoder(str(folder), encoding="prompteol", cache=False, device="cpu").encode(SENTENCES)
    theirs = released_prompteol(str(folder), SENTENCES)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    plain = load_encoder(str(folder), pooler="last", prompt=NAMED_ENCODINGS["prompteol"]["prompt"], cache=False,
                         device="cpu").encode(SENTENCES)
    assert np.abs(plain - theirs).max() > 1e-2  # the sentence rules are what makes them equal


def test_metaeols_templates_are_the_released_ones():
    """The eight templates, written back in the released spelling, hash as the released list (evaluation.py lines
    117-124 at c62096d, joined by newlines: its sha256 computed from that file)."""
    released = "\n".join(p.replace("{}", "*sent 0*") for p in NAMED_ENCODINGS["metaeol"]["prompt"])
    assert hashlib.sha256(released.encode()).hexdigest() == \
        "073d045504dc91c2c1b336457652da0be96e3169113ab02bc420b19f9c1bcb6c"


def test_metaeol_equals_the_released_evaluation(tmp_path):
    """Tolerance as PromptEOL's above (the same states, averaged over eight templates); a Llama of 1024 positions,
    as the templates take some 300 of the tiny tokenizer's tokens."""
    from tests.conftest import save_tiny_decoder

    folder = save_tiny_decoder(tmp_path, "llama", head=True, positions=1024)
    encoder = load_encoder(str(folder), encoding="metaeol", cache=False, device="cpu")
    ours = encoder.encode(SENTENCES)
    np.testing.assert_allclose(ours, released_metaeol(str(folder), SENTENCES), atol=1e-5, rtol=0)
    assert encoder.describe()["prompt"][4].endswith('To enhance the performance of this task, this sentence : "{}" '
                                                    'means in one word:"')
    one = load_encoder(str(folder), encoding="prompteol", cache=False, device="cpu").encode(SENTENCES)
    assert np.abs(one - ours).max() > 1e-2
    unit = load_encoder(str(folder), encoding="metaeol", settings={"normalize": True}, cache=False,
                        device="cpu").encode(SENTENCES)  # the mean scaled, not each template's vector
    np.testing.assert_allclose(unit, ours / np.linalg.norm(ours, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def released_token_prepending(folder, sentences, template, start, stop, layer, placeholder_row):
    """Token Prepending's vectors as fuyuchenIfyw/token_prepending (cc41b58) makes them: PromptEOL's tokenizer and
    sentence rules (evaluate.py lines 210-211, 313-317), <PST> added to the tokenizer and a row to the embeddings
    (213-218; its drawn row given here as ``placeholder_row``, cselab's), the decoder run layer by layer with each
    row's first <PST> state replaced in place by its state at the last position before the layers from ``start`` up
    to ``stop`` (senllm/modeling_llama.py 478-480, 534-570; the state recorded before the replacement is the same
    tensor), the final norm after the last layer only (609), and the vector the hidden state ``layer`` at the last
    position (evaluate.py 336)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.masking_utils import create_causal_mask

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token_id, tokenizer.padding_side = 0, "left"
    tokenizer.add_tokens(["<PST>"])
    placeholder = tokenizer.convert_tokens_to_ids("<PST>")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    model.resize_token_embeddings(len(tokenizer))
    texts = []
    for sentence in map(released_sentence, sentences):
        texts.append(template.replace("*sent 0*", sentence).strip())
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    inner, ids = model.model, batch["input_ids"]
    with torch.no_grad():
        inner.embed_tokens.weight[placeholder] = placeholder_row
        hidden = inner.embed_tokens(ids)
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        mask = create_causal_mask(config=inner.config, inputs_embeds=hidden, attention_mask=batch["attention_mask"],
                                  cache=None, position_ids=positions)
        rotary = inner.rotary_emb(hidden, position_ids=positions)
        at = (ids == placeholder).float().argmax(dim=1)
        states = []
        for index, decoder_layer in enumerate(inner.layers):
            states.append(hidden)
            if start <= index < stop:
                hidden[torch.arange(len(ids)), at] = hidden[:, -1].clone()
            hidden = decoder_layer(hidden, attention_mask=mask, position_embeddings=rotary, position_ids=positions)
        states.append(inner.norm(hidden))
    return states[layer][:, -1].numpy()


def test_token_prepending_equals_the_released_model(tmp_path):
    """On a 4-layer Llama, <PST> replaced before layers 1 and 2 and the vector read from hidden state -2 (the last
    layer's input, before the final norm: the released settings' kind); tolerance as PromptEOL's above (here at most
    7.5e-9 over the same threads and kernel paths)."""
    from tests.conftest import save_tiny_decoder

    folder = save_tiny_decoder(tmp_path, "llama", head=True, layers=4)
    settings = {"token_prepending": [1, 3], "layer": -2}
    encoder = load_encoder(str(folder), encoding="token-prepending", settings=settings, cache=False, device="cpu")
    ours = encoder.encode(SENTENCES)
    row = encoder.model.get_input_embeddings().weight[encoder.placeholder].detach().clone()
    embeddings = encoder.model.get_input_embeddings().weight[:encoder.placeholder]
    torch.testing.assert_close(row, embeddings.mean(dim=0))  # the mean of the model's own rows
    theirs = released_token_prepending(str(folder), SENTENCES, 'This sentence : <PST> "*sent 0*" means in one word:"',
                                       1, 3, -2, row)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    fewer = load_encoder(str(folder), encoding="token-prepending", settings={**settings, "token_prepending": [1, 2]},
                         cache=False, device="cpu").encode(SENTENCES)
    assert not np.allclose(fewer, theirs, atol=1e-5, rtol=0)  # one replacement fewer: 2.2e-4 away, caught


def test_explicit_settings_replace_the_named_ones_and_the_encoding_is_recorded(tiny_causal_llama):
    encoder = load_encoder(str(tiny_causal_llama), encoding="prompteol", prompt='In one word, "{}" means:"',
                           cache=False, device="cpu")
    described = encoder.describe()
    assert described["sentence_form"] == "prompteol" and described["pooler"] == "last"
    assert described["prompt"] == 'In one word, "{}" means:"'


def test_an_unknown_name_and_a_form_without_a_template_are_refused_in_one_line(tiny_causal_llama, capsys):
    with pytest.raises(ConfigError, match=r"--encoding 'promteol': not a named encoding \(did you mean 'prompteol'"):
        named_encoding("promteol")
    assert main(["probe", "run", "--model", str(tiny_causal_llama), "--encoding", "promteol"]) == 2
    assert "not a named encoding" in one_line_error(capsys)
    with pytest.raises(ConfigError, match="^sentence_form: prompteol writes a sentence as it goes into a template"):
        Encoding(pooler="last", sentence_form="prompteol")
    with pytest.raises(ConfigError, match="^token_prepending: the prompt must hold <PST> once, before the sentence"):
        Encoding(pooler="last", prompt='"{}" <PST>', token_prepending=[1, 2])
    with pytest.raises(ConfigError, match=r"^token_prepending: \[2, 2\) holds no layer"):
        Encoding(pooler="last", prompt='<PST> "{}"', token_prepending=[2, 2])
    with pytest.raises(ConfigError, match="^layer: pooler 'avg_first_last' reads several layers"):
        Encoding(pooler="avg_first_last", layer=1)
    with pytest.raises(ConfigError, match=r"^token_prepending \[1, 3\]: .* has 2 decoder layers"):
        load_encoder(str(tiny_causal_llama), encoding="token-prepending", settings={"layer": -1,
                     "token_prepending": [1, 3]}, cache=False, device="cpu")
    with pytest.raises(ConfigError, match="^prompt: a list of templates is two or more"):
        load_encoder(str(tiny_causal_llama), settings={"prompt": ["{}"]}, cache=False, device="cpu")
    with pytest.raises(ConfigError, match="^layer 5: .* has 3 hidden states .*: give -3 to 2$"):
        load_encoder(str(tiny_causal_llama), settings={"layer": 5}, cache=False, device="cpu")
    with pytest.raises(ConfigError, match="^layr: not an encoding setting \\(did you mean 'layer'"):
        load_encoder(str(tiny_causal_llama), settings={"layr": 5}, cache=False, device="cpu")
    with pytest.raises(ConfigError, match="^--encoding prompteol: bow is no transformer model"):
        load_encoder("bow", encoding="prompteol")
    with pytest.raises(SystemExit) as exit:
        main(["probe", "run", "--model", str(tiny_causal_llama), "--token-prepending", "1"])
    assert exit.value.code == 2 and "expected START,STOP" in capsys.readouterr().err


def test_token_prepending_is_refused_for_a_model_without_decoder_layers(tiny_decoders):
    with pytest.raises(ConfigError, match="^token_prepending: GPT2Model has no list of decoder layers"):
        load_encoder(str(tiny_decoders["gpt2"]), encoding="token-prepending", settings={"layer": -1}, cache=False,
                     device="cpu")


@pytest.mark.slow
def test_probe_run_scores_and_records_a_named_encoding(tiny_causal_llama, data_dir, tmp_path):
    out = tmp_path / "prompteol.json"
    assert main(["probe", "run", "--model", str(tiny_causal_llama), "--encoding", "prompteol", "--suite", "sts",
                 "--tasks", "stsb", "--limit", "20", "--data-dir", str(data_dir), "--out", str(out)]) == 0
    model = json.loads(out.read_text())["model"]
    assert (model["pooler"], model["prompt"], model["sentence_form"]) == (
        "last", NAMED_ENCODINGS["prompteol"]["prompt"], "prompteol")
