"""A template tokenised in pieces (``prompt_pieces``): PromptBERT's released training rows, against its test rows."""

import pytest
from transformers import AutoModel, AutoTokenizer

from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method

ROBERTA_TEMPLATE = "This sentence : ' {} ' means[MASK]."  # run.sh:80, unsup-roberta's TEMPLATE
SENTENCES = ["a cat sat on the mat", "dogs run", "never trust a sentence that ends without a stop"]


def encoder(folder, prompt, **options):
    return TransformerEncoder(AutoModel.from_pretrained(folder), AutoTokenizer.from_pretrained(folder), pooler="mask",
                              prompt=prompt, **options)


def released_training_rows(tokenizer, template, sentences, max_length):
    """kongds/Prompt-BERT at 690ba6e, train.py 618-629 and 674-690, for a roberta model: the template's
    placeholders replaced, split at the sentence into bs (spaces stripped) and es; each row is encode(bs) without
    its end token, the sentence's own ids cut at max_length, encode(es) without its start token."""
    template = template.replace("*mask*", tokenizer.mask_token).replace("*sep+*", "").replace("*cls*", "") \
        .replace("*sent_0*", " ")
    bs, es = (side.replace("_", " ") for side in template.split(" "))
    bs, es = tokenizer.encode(bs.strip())[:-1], tokenizer.encode(es)[1:]
    return [bs + tokenizer.encode(s, add_special_tokens=False)[:max_length] + es for s in sentences]


def released_test_text(tokenizer, template, sentence):
    """evaluation.py 193-202: the template filled as text (its full stop added to the sentence left out: cselab's
    probes change no test text, a ledger row of its own)."""
    template = template.replace("*mask*", tokenizer.mask_token).replace("_", " ").replace("*sep+*", "") \
        .replace("*cls*", "")
    return template.replace("*sent 0*", sentence).strip()


def test_pieces_are_the_released_training_rows_and_the_text_its_test_rows(tiny_roberta_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    released = "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"
    pieces = encoder(tiny_roberta_dir, ROBERTA_TEMPLATE, prompt_pieces=True, max_length=4)
    assert pieces.tokenize(SENTENCES, warn=False) == released_training_rows(tokenizer, released, SENTENCES, 4)
    text = encoder(tiny_roberta_dir, ROBERTA_TEMPLATE)
    assert text.tokenize(SENTENCES) == [tokenizer.encode(released_test_text(tokenizer, released, s))
                                        for s in SENTENCES]
    # the byte-level BPE reads the first word with its leading space only in the filled text
    assert pieces.tokenize(SENTENCES[:1], warn=False) != text.tokenize(SENTENCES[:1])


def test_the_denoising_template_and_its_sentence_position_are_the_released_ones(tiny_roberta_dir):
    """train.py 783-794: the template alone is encode(bs + es), and the positions after the sentence start at
    len(bs) + 1 (models.py 98)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    view = encoder(tiny_roberta_dir, ROBERTA_TEMPLATE, prompt_pieces=True, denoise=True)
    bs, es = "This sentence : '", " ' means<mask>."
    assert view.template_ids == tokenizer.encode(bs + es)
    assert view._before_sentence == len(tokenizer.encode(bs, add_special_tokens=False)) + 1


@pytest.mark.parametrize("profile", ["official", "roberta-base"])
def test_the_released_template_pairs_have_prefixes_of_one_length(tiny_bert_dir, tiny_roberta_dir, profile):
    """The released template pass moves the second template's positions on after the first template's prefix
    (models.py 98); cselab after each template's own: the same wherever the two prefixes are as long, as here."""
    method = load_method("promptbert", profile=profile)
    folder = tiny_roberta_dir if profile == "roberta-base" else tiny_bert_dir
    prefixes = {encoder(folder, prompt, prompt_pieces=method.encoder.prompt_pieces, denoise=True)._before_sentence
                for prompt in (method.encoder.prompt, method.views["positive"].prompt)}
    assert len(prefixes) == 1


def test_with_wordpiece_the_pieces_are_the_filled_texts_ids(tiny_bert_dir):
    """BERT's tokenizer ignores the spaces around the sentence: the BERT profiles leave prompt_pieces off and build
    the released rows all the same."""
    for template in ('This sentence of "{}" means [MASK] .', 'This sentence : "{}" means [MASK] .'):
        text, pieces = encoder(tiny_bert_dir, template), encoder(tiny_bert_dir, template, prompt_pieces=True)
        assert pieces.tokenize(SENTENCES) == text.tokenize(SENTENCES)


def test_a_template_whose_sides_merge_when_joined_is_refused(tiny_roberta_dir):
    """The released code asserts that the template's two sides tokenised apart are its ids tokenised whole (train.py
    793-794): the denoising pass reads the latter. This BPE merges the two quotes of "'{}'" when nothing is between."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    assert len(tokenizer.encode(" ''", add_special_tokens=False)) == 1
    with pytest.raises(ConfigError, match="otherwise where its two sides meet than apart"):
        encoder(tiny_roberta_dir, "This sentence : '{}' means[MASK].", prompt_pieces=True)
    encoder(tiny_roberta_dir, ROBERTA_TEMPLATE, prompt_pieces=True)  # the released template's sides do not merge


def test_pieces_need_a_prompt(tiny_bert_dir):
    with pytest.raises(ConfigError, match="needs a prompt"):
        TransformerEncoder(AutoModel.from_pretrained(tiny_bert_dir), AutoTokenizer.from_pretrained(tiny_bert_dir),
                           prompt_pieces=True)
    with pytest.raises(ConfigError, match="encoder.prompt_pieces: a template tokenised in pieces needs"):
        load_method("simcse", ["encoder.prompt_pieces=true"])


def test_the_roberta_profiles_set_the_released_templates_and_rows():
    for profile in ("roberta-base", "official-roberta"):
        method = load_method("promptbert", profile=profile)
        assert method.encoder.prompt_pieces and method.encoder.prompt == ROBERTA_TEMPLATE
        assert method.views["positive"].prompt == "The sentence : ' {} ' means[MASK]."
    assert not load_method("promptbert", profile="official").encoder.prompt_pieces
