"""One tokenizer call where it gives the ids of cutting the text and tokenising it again (cselab.encoders.cuts): the
same ids as that path (``_cut_texts``, the only one before) for WordPiece, with and without a prompt, at many budgets;
that path itself for a byte-level BPE, a template whose joined ids differ, a row cut inside a character's pieces."""

import pytest
from transformers import AutoModel, AutoTokenizer

from cselab.encoders import load_encoder
from cselab.encoders.cuts import clean_cut, cuts_as_text, template_sides
from cselab.encoders.transformer import TransformerEncoder

PROMPT = 'This sentence : "{}" means [MASK] .'
#: Rows that are hard to cut: accents, CJK, Hangul (a syllable is three pieces of one character), emoji, long words
#: of several pieces, a special token's text, punctuation runs, a combining mark, a ligature.
HARD = ["naïve café in 北京 über alles — ça va? " * 4, "한국어 문장도 있습니다 서울 " * 6,
        "unbelievably antidisestablishmentarianism counterrevolutionaries " * 5, "🙂🙃 emoji " * 15,
        "a [MASK] in the text and [SEP] too " * 5, "e\u0301tude ﬁnancière İstanbul'da " * 6, "!!?? ... --- " * 10,
        "x" * 150 + " word " * 20, "", "short"]


@pytest.fixture(scope="module")
def parts(tiny_bert_dir):
    return AutoModel.from_pretrained(tiny_bert_dir), AutoTokenizer.from_pretrained(tiny_bert_dir)


@pytest.fixture(scope="module")
def sentences(data_dir):
    """wiki1m sentences of 30 to 40 words, and :data:`HARD`."""
    lines = (data_dir / "wiki" / "wiki1m_for_simcse.prefix11913.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if 30 <= len(line.split()) <= 40][:400] + HARD


def counting_calls(monkeypatch, tokenizer) -> list[int]:
    """The number of texts of each call of ``tokenizer``'s class from now on."""
    calls = []
    original = type(tokenizer).__call__
    monkeypatch.setattr(type(tokenizer), "__call__", lambda self, texts, *a, **k: calls.append(len(texts))
                        or original(self, texts, *a, **k))
    return calls


@pytest.mark.parametrize("prompt", [None, PROMPT])
@pytest.mark.parametrize("max_length", [2, 3, 5, 8, 16, 32, 64])
def test_one_call_gives_the_ids_of_the_text_cut(parts, sentences, prompt, max_length, monkeypatch):
    encoder = TransformerEncoder(*parts, pooler="mask" if prompt else "avg", prompt=prompt, max_length=max_length)
    assert encoder._one_call is not None
    reference, reference_cut = encoder._cut_texts(sentences)
    calls = counting_calls(monkeypatch, encoder.tokenizer)
    with pytest.warns(UserWarning, match=rf"^{reference_cut} sentence\(s\) longer than max_length={max_length} "):
        assert encoder.tokenize(sentences) == reference
    assert calls[0] == len(sentences)
    assert all(count <= len(HARD) for count in calls[1:])  # the rows cut inside a character's pieces, as text


def test_a_cut_inside_a_characters_pieces_is_cut_as_text(parts, monkeypatch):
    """One Hangul syllable is three WordPiece pieces of one character: the tokenizer keeps one of them where the cut
    text keeps the character; that row alone is cut as text."""
    encoder = TransformerEncoder(*parts, max_length=3)  # one piece and the special tokens
    rows = ["한국어 문장", "plain words here"]
    batch = encoder.tokenizer(rows, add_special_tokens=False, truncation=True, max_length=1)
    assert [clean_cut(encoding) for encoding in batch.encodings] == [False, True]
    reference = encoder._cut_texts(rows)[0]
    assert reference[0] != encoder.tokenizer(rows[0], truncation=True, max_length=3)["input_ids"]
    assert encoder._one_call is not None
    calls = counting_calls(monkeypatch, encoder.tokenizer)
    assert encoder.tokenize(rows, warn=False) == reference
    assert calls[0] == 2 and calls[1:] and set(calls[1:]) == {1}


@pytest.mark.parametrize("prompt", [None, "This sentence : ' {} ' means[MASK]."])
def test_a_byte_level_bpe_is_cut_as_text(tiny_roberta_dir, prompt, monkeypatch):
    """A byte-level BPE spells a rare character as several tokens sharing its span: no one-call path."""
    encoder = TransformerEncoder(AutoModel.from_pretrained(tiny_roberta_dir),
                                 AutoTokenizer.from_pretrained(tiny_roberta_dir), max_length=12, prompt=prompt,
                                 pooler="mask" if prompt else "avg")
    assert not cuts_as_text(encoder.tokenizer) and encoder._one_call is None
    calls = counting_calls(monkeypatch, encoder.tokenizer)
    assert encoder.tokenize(HARD, warn=False) == encoder._cut_texts(HARD)[0]
    assert len(calls) >= 3  # the ids, the cut rows' spans, their ids again


def test_a_byte_level_bpes_own_truncation_differs(tiny_decoders):
    """Why: the tokenizer's truncation keeps part of a character's bytes, which no text cut can."""
    encoder = load_encoder(str(tiny_decoders["llama"]), pooler="avg", cache=False, device="cpu", max_length=6)
    assert encoder._one_call is None
    sentence = "北京 über — ça"
    tokenizer_cut = [encoder.tokenizer(sentence, truncation=True, max_length=budget)["input_ids"]
                     for budget in range(3, 9)]
    text_cut = []
    for budget in range(3, 9):
        encoder.max_length = budget
        text_cut.append(encoder.tokenize([sentence], warn=False)[0])
    assert tokenizer_cut != text_cut


@pytest.mark.parametrize(("template", "joins"), [
    ('This sentence : "{}" means [MASK] .', True),
    ('This sentence : "{}"means[MASK] .', True),  # punctuation on both sides of the slot splits words
    ("This sentence means{}[MASK] .", False),  # a word of the template runs into the sentence's first
    ("This {}sentence means [MASK] .", False),  # the sentence's last word runs into the template's
])
def test_a_template_is_joined_only_where_its_ids_join(parts, sentences, template, joins):
    encoder = TransformerEncoder(*parts, pooler="mask", prompt=template, max_length=16)
    assert (encoder._one_call is not None) == joins
    assert encoder.tokenize(sentences, warn=False) == encoder._cut_texts(sentences)[0]


def test_a_template_a_sentence_could_complete_an_added_token_in_is_not_joined(parts, monkeypatch):
    """No probe starts with ``MASK]``: the probes alone would take ``This [{} .`` (punctuation next to the slot), and
    the ids of a sentence that completes ``[MASK]`` would differ."""
    from cselab.encoders import cuts

    encoder = TransformerEncoder(*parts, prompt="This [{} .")
    assert encoder._one_call is None
    rows = ["MASK] here", "a plain one"]
    ids = encoder.tokenize(rows)
    assert ids == encoder._cut_texts(rows)[0] and encoder.tokenizer.mask_token_id in ids[0]
    monkeypatch.setattr(cuts, "_straddled", lambda *args: False)
    before, after = template_sides(encoder.tokenizer, encoder.prompt)
    assert before + encoder.tokenizer(rows[0], add_special_tokens=False)["input_ids"] + after != ids[0]


def test_a_tokenizer_cutting_on_the_left_is_cut_as_text(tiny_bert_dir, sentences):
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir, truncation_side="left")
    encoder = TransformerEncoder(AutoModel.from_pretrained(tiny_bert_dir), tokenizer, max_length=16)
    assert encoder._one_call is None
    assert encoder.tokenize(sentences, warn=False) == encoder._cut_texts(sentences)[0]
