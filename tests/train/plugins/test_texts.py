"""The text plug-ins (kind ``text``, a method's ``texts``): a column's texts changed before a training batch is
tokenised; SNCSE's released " ." as ``end_punctuation``."""

import pytest

from cselab.errors import ConfigError
from cselab.registry import build_plugin, check_plugin
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.run.setup import build_encoder


@pytest.mark.parametrize(("source", "expected"), [
    ("a cat sat", "a cat sat ."), ("a cat sat.", "a cat sat."), ("is it?", "is it?"), ('he said "no"', 'he said "no"'),
    ("a list )  ", "a list )  "), ("trailing spaces  ", "trailing spaces   ."), ("naïve café", "naïve café ."),
    ("   ", "    ."), ("ends with ‘quote’", "ends with ‘quote’ ."),  # Python's string.punctuation is ASCII only
])
def test_end_punctuation_appends_where_the_last_character_is_none_of_string_punctuation(source, expected):
    def text(**params):
        return build_plugin("text", check_plugin("text", {"kind": "end_punctuation", **params}, "texts.text"))

    assert text()(source) == expected
    assert text(append="!", punctuation="!")("a b.") == "a b.!"


def test_a_columns_text_plugin_changes_what_its_views_tokenise(tiny_bert_dir):
    method = load_method("sncse", profile="official")
    objective = Objective(method)
    encoder = build_encoder(method, str(tiny_bert_dir))
    batch = objective.as_batch(encoder, {"text": ["a cat sat", "a dog ran."], "negation": ["a cat did not sit",
                                                                                         "a dog did not run."]})
    texts = {"text": ["a cat sat .", "a dog ran."], "negation": ["a cat did not sit .", "a dog did not run."]}
    for (column, prompt), (_, ids, _) in batch.tokens.items():
        view = encoder.text_view(prompt)
        assert ids.tolist() == view.pad(view.tokenize(texts[column], warn=False))[0].tolist()


def test_a_text_plugin_on_a_column_no_view_reads_is_refused():
    with pytest.raises(ConfigError, match=r"texts.paraphrase: no view reads the column 'paraphrase'; the views read "
                                          r"negation, text"):
        load_method("sncse", ["texts.paraphrase={kind: end_punctuation}"])
    with pytest.raises(ConfigError, match=r"texts.text.kind: unknown text 'nope'"):
        load_method("sncse", ["texts.text={kind: nope}"])
