import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from transformers import AutoModel, AutoTokenizer

from cselab.encoders import TransformerEncoder, load_encoder
from cselab.registry import names

PROMPT = 'This sentence : "{}" means [MASK] .'
SENTENCES = ["a man is playing a guitar .", "two dogs run on the beach", "hello", "a man is playing a guitar .",
             "the stock market fell sharply on monday after the report", "hello"]


@pytest.fixture(scope="module")
def parts(tiny_bert_dir):
    return AutoModel.from_pretrained(tiny_bert_dir), AutoTokenizer.from_pretrained(tiny_bert_dir)


def encoder(parts, **kwargs) -> TransformerEncoder:
    model, tokenizer = parts
    return TransformerEncoder(model, tokenizer, **kwargs)


def reference(parts, sentence: str, pooler: str, prompt: str | None = None) -> np.ndarray:
    """One sentence alone through the model, pooled by hand."""
    model, tokenizer = parts
    text = prompt.replace("{}", sentence).replace("[MASK]", tokenizer.mask_token) if prompt else sentence
    batch = tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    hidden = out.hidden_states
    vector = {
        "cls": lambda: out.pooler_output[0],
        "cls_before_pooler": lambda: hidden[-1][0, 0],
        "avg": lambda: hidden[-1][0].mean(0),
        "avg_first_last": lambda: ((hidden[1][0] + hidden[-1][0]) / 2).mean(0),
        "avg_top2": lambda: ((hidden[-1][0] + hidden[-2][0]) / 2).mean(0),
        "mask": lambda: hidden[-1][0, batch["input_ids"][0].tolist().index(tokenizer.mask_token_id)],
        "last": lambda: hidden[-1][0, -1],
        "weighted_mean": lambda: (hidden[-1][0] * torch.arange(1.0, len(hidden[-1][0]) + 1).unsqueeze(1)).sum(0)
        / (len(hidden[-1][0]) * (len(hidden[-1][0]) + 1) / 2),
    }[pooler]()
    return vector.numpy()


@pytest.mark.parametrize("pooler", names("pooler"))
def test_every_pooler_matches_a_hand_pooled_single_pass(parts, pooler):
    prompt = PROMPT if pooler == "mask" else None
    vectors = encoder(parts, pooler=pooler, prompt=prompt).encode(SENTENCES, batch_size=4)
    assert vectors.dtype == np.float32 and vectors.shape == (len(SENTENCES), 32)
    for sentence, vector in zip(SENTENCES, vectors):
        np.testing.assert_allclose(vector, reference(parts, sentence, pooler, prompt), atol=1e-5)


def test_prompt_applies_to_other_poolers_too(parts):
    vectors = encoder(parts, pooler="avg", prompt=PROMPT).encode(SENTENCES[:2])
    np.testing.assert_allclose(vectors[1], reference(parts, SENTENCES[1], "avg", PROMPT),
                               atol=1e-5)


def test_order_is_restored_and_duplicates_share_one_vector(parts):
    enc = encoder(parts)
    vectors = enc.encode(SENTENCES, batch_size=2)
    np.testing.assert_array_equal(vectors[0], vectors[3])
    np.testing.assert_array_equal(vectors[2], vectors[5])
    reversed_vectors = enc.encode(SENTENCES[::-1], batch_size=3)
    np.testing.assert_allclose(reversed_vectors[::-1], vectors, atol=1e-5)


def test_duplicates_are_encoded_once(parts, monkeypatch):
    enc = encoder(parts)
    seen = []
    original = enc.tokenize
    monkeypatch.setattr(enc, "tokenize", lambda sentences: seen.extend(sentences) or original(sentences))
    enc.encode(SENTENCES)
    assert sorted(seen) == sorted(set(SENTENCES))


def test_empty_list_and_single_string(parts):
    enc = encoder(parts)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        enc.encode(["x"], batch_size=0)
    assert enc.encode([]).shape == (0, 32)
    single = enc.encode("hello")
    assert single.shape == (32,)
    np.testing.assert_allclose(single, enc.encode(["hello"])[0], atol=1e-6)


def test_long_sentence_is_truncated_with_a_warning(parts):
    enc = encoder(parts, max_length=16)
    long_sentence = " ".join(["word"] * 300)
    with pytest.warns(UserWarning, match=r"1 sentence\(s\) longer than max_length=16 tokens were truncated"):
        ids = enc.tokenize([long_sentence, "short one"])
    assert len(ids[0]) == 16 and ids[0][-1] == enc.tokenizer.sep_token_id
    with pytest.warns(UserWarning):
        vectors = enc.encode([long_sentence])
    np.testing.assert_allclose(vectors[0], enc.encode([" ".join(["word"] * 14)])[0], atol=1e-5)


def test_a_sentence_keeps_its_whole_budget_inside_a_prompt(parts):
    """PromptBERT's rule, as OssCSE trains and evaluates: the sentence is cut to max_length word-pieces, then
    wrapped; the template's tokens come on top."""
    from cselab.train.config.sections import EncoderConfig
    from cselab.train.model import TrainingEncoder

    model, tokenizer = parts
    pieces = tokenizer(" ".join(["word"] * 10 + ["unbelievably"] * 20), add_special_tokens=False)["input_ids"]
    sentence = tokenizer.decode(pieces[:32])
    assert len(tokenizer(sentence, add_special_tokens=False)["input_ids"]) == 32
    whole = tokenizer(PROMPT.replace("{}", sentence).replace("[MASK]", tokenizer.mask_token))["input_ids"]
    training = TrainingEncoder(model, tokenizer, EncoderConfig(pooler="mask", prompt=PROMPT), max_length=32)
    evaluation = encoder(parts, pooler="mask", prompt=PROMPT)  # a checkpoint's whole-sentence budget
    for enc in (training.view, evaluation):
        assert enc.tokenize([sentence]) == [whole]
    assert training.tokenize([sentence])[0][0].tolist() == whole

    with pytest.warns(UserWarning, match=r"1 sentence\(s\) longer than max_length=32 word-pieces were truncated"):
        (cut,) = training.view.tokenize([sentence + " more words here"])
    assert cut == whole


def test_the_prompt_and_sentence_fit_the_models_positions(parts):
    enc = encoder(parts, pooler="mask", prompt=PROMPT)  # the tiny model has 128 positions
    with pytest.warns(UserWarning):
        (ids,) = enc.tokenize([" ".join(["word"] * 300)])
    assert len(ids) == 128 and enc.tokenizer.mask_token_id in ids
    suffix = enc.tokenizer('" means [MASK] .', add_special_tokens=False)["input_ids"]
    assert ids[-len(suffix) - 1:-1] == suffix


def test_normalize_and_mteb_style_batches(parts):
    enc = encoder(parts, normalize=True)
    vectors = enc.encode(SENTENCES)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    loader = DataLoader([{"text": s} for s in SENTENCES], batch_size=4)
    np.testing.assert_allclose(enc.encode(loader, task_metadata=None, prompt_type=None), vectors, atol=1e-6)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pooler": "max"}, "pooler: 'max' is not allowed; expected one of avg, "),
    ({"pooler": "mask"}, "pooler: mask reads the prompt's \\[MASK\\] token; give a prompt template"),
    ({"pooler": "mask", "prompt": "no slot [MASK]"}, "must contain '{}', where the sentence goes"),
    ({"pooler": "mask", "prompt": "{} means nothing"}, r"must contain \[MASK\] exactly once"),
    ({"pooler": "mask", "prompt": "word " * 130 + '"{}" [MASK]'}, "leaves no room for a sentence"),
])
def test_bad_settings_are_refused(parts, kwargs, message):
    with pytest.raises(ValueError, match=message):
        encoder(parts, **kwargs)


def test_a_sentence_of_characters_several_tokens_long_is_cut_to_fit(tiny_decoders):
    """A byte-level BPE spells a rare character as several tokens that share its span: a cut at such a token keeps
    the whole character, which once left the sentence as it was, and truncation never ended."""
    encoder = load_encoder(str(tiny_decoders["llama"]), pooler="avg", cache=False, device="cpu")
    sentence = "naïve café in 北京 über alles — ça va? " * 3
    for budget in range(4, 30):
        encoder.max_length = budget
        row = encoder.tokenize([sentence], warn=False)[0]
        assert budget - 3 <= len(row) <= budget, budget
