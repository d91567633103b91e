"""Named encodings (``probe run --encoding NAME``): training-free vectors from a decoder LM, each equal on tiny random
decoders to its released evaluation restated here (file and line cited), and refused in one line where misspelt."""

import hashlib

import numpy as np
import pytest
import torch

from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.encoders.encoding import Encoding, written_as
from cselab.encoders.named import METAEOL_PROMPTS, NAMED_ENCODINGS, named_encoding
from cselab.errors import ConfigError
from tests.runs import one_line_error

#: Sentences that meet each of PromptEOL's rules: no final stop, a final '?', double quotes, a final quote.
SENTENCES = ["A man is playing a guitar", "Is the cat on the mat?", 'She said "hello" to him.',
             "He wrote 'yes'", 'The "best" plan "', "Two dogs run."]


def released_vectors(folder, sentences, templates):
    """The vectors of PromptEOL's and MetaEOL's released evaluations (below), ``templates`` in their own spelling:
    each sentence in each template, one batch padded on the left, the last layer's state at the last position, the
    mean over templates."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token_id, tokenizer.padding_side = 0, "left"
    texts = []
    for sentence in sentences:
        if sentence and sentence[-1] not in ".?\"'":
            sentence = sentence + "."
        sentence = sentence.replace('"', "'")
        if sentence.endswith("?"):
            sentence = sentence[:-1] + "."
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
    return released_vectors(folder, sentences, [p.replace("{}", "*sent 0*") for p in METAEOL_PROMPTS])


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
    released = "\n".join(p.replace("{}", "*sent 0*") for p in METAEOL_PROMPTS)
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
