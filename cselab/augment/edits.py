"""Small meaning-preserving edits for transformation test sets (OssCSE section 3.1).

- insertion and substitution: a masked language model (bert-base-uncased for real use) fills
  a mask inserted between two words, or put in place of a word, for about 5-10% of the words
  (at least one). All masked positions of a batch go through the model in one forward pass.
  Offline, :class:`WordNetEditor` does both without a model: a degree adverb (*very* before an
  adjective, *really* before a verb) inserted, and a word replaced by a one-word WordNet synonym
  of its most frequent sense (a noun, verb, adjective or adverb in its dictionary form, by spaCy's
  tags).
- deletion: one random word removed.
- random: another sentence of the set.

Words are whitespace-separated; an edited sentence is rejoined with single spaces.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

import numpy as np

from cselab.augment.negation import DEFAULT_MODEL
from cselab.augment.wordnet import POS_FILES, WORDNET_DIR, Synonyms
from cselab.encoders.transformer import default_device
from cselab.errors import DataError, ModelError
from cselab.files import clipped


def edit_count(words: int, rate: tuple[float, float], rng: random.Random) -> int:
    """How many words to edit: a rate drawn from ``rate``, times the words, at least one."""
    return max(1, round(rng.uniform(*rate) * words))


def delete_word(sentence: str, rng: random.Random) -> str | None:
    """The sentence without one random word; None for a sentence of one word."""
    words = sentence.split()
    if len(words) < 2:
        return None
    del words[rng.randrange(len(words))]
    return " ".join(words)


def random_partners(count: int, rng: random.Random) -> list[int]:
    """For each item, the index of another one (a random rotation of a shuffled order)."""
    if count < 2:
        raise DataError("a random partner needs at least two sentences")
    order = list(range(count))
    rng.shuffle(order)
    partner = [0] * count
    for position, item in enumerate(order):
        partner[item] = order[(position + 1) % count]
    return partner


class MaskedLMEditor:
    """Insertions and substitutions proposed by a masked language model, batched."""

    def __init__(self, model: str = "bert-base-uncased", rate: tuple[float, float] = (0.05, 0.10),
                 batch_size: int = 32, device: str | None = None, seed: int = 0):
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        self.device = device or default_device()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model)
            self.model = AutoModelForMaskedLM.from_pretrained(model).to(self.device).eval()
        except Exception as err:  # offline without it in the cache, a folder that is no masked LM ...
            raise ModelError(f"--mlm {model}: cannot be loaded ({type(err).__name__}: "
                             f"{clipped(err)}); "
                             "offline, --mlm wordnet inserts and substitutes with WordNet instead (or give a masked "
                             "LM's folder, or --mlm none)") from None
        self.rate, self.batch_size, self.seed = rate, batch_size, seed
        vocabulary = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        # only whole alphabetic words may be proposed: no subword pieces, punctuation or special tokens
        self._allowed = np.array([token.isalpha() and token.isascii() for token in vocabulary])

    def _plans(self, sentences: Sequence[str], insert: bool) -> list[tuple[list[str], list[str]]]:
        """Per sentence: its words with the mask token placed, and the original word at each mask ('' if inserted)."""
        rng = random.Random(self.seed)
        plans = []
        for sentence in sentences:
            words = sentence.split()
            n = edit_count(len(words), self.rate, rng)
            if insert:
                slots = sorted(rng.sample(range(len(words) + 1), min(n, len(words) + 1)), reverse=True)
                for slot in slots:
                    words.insert(slot, self.tokenizer.mask_token)
                plans.append((words, ["" for _ in slots]))
            else:
                slots = sorted(rng.sample(range(len(words)), min(n, len(words))))
                originals = [words[slot] for slot in slots]
                for slot in slots:
                    words[slot] = self.tokenizer.mask_token
                plans.append((words, originals))
        return plans

    def _fill(self, plans: list[tuple[list[str], list[str]]]) -> list[str | None]:
        """The filled sentences; None for one whose masks did not all fit in the model's length."""
        import torch

        texts = [" ".join(words) for words, _ in plans]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # similar lengths share a batch
        out: list[str | None] = [None] * len(texts)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                members = order[start:start + self.batch_size]
                batch = self.tokenizer([texts[i] for i in members], return_tensors="pt", padding=True,
                                       truncation=True).to(self.device)
                rows, columns = torch.nonzero(batch["input_ids"] == self.tokenizer.mask_token_id, as_tuple=True)
                scores = self._mask_logits(batch, rows, columns).float().cpu().numpy()  # every mask, one pass
                scores[:, ~self._allowed] = -np.inf
                ranked = np.argsort(-scores, axis=1)[:, :8]
                per_row: dict[int, list[np.ndarray]] = {}
                for row, candidates in zip(rows.tolist(), ranked):
                    per_row.setdefault(row, []).append(candidates)
                for row, i in enumerate(members):
                    out[i] = self._place(*plans[i], per_row.get(row, []))
        return out

    def _mask_logits(self, batch, rows, columns):
        """Vocabulary logits at the masked positions only: the LM head runs on those rows alone."""
        head = getattr(self.model, "cls", None) or getattr(self.model, "lm_head", None)
        if head is None:  # another architecture: the whole model, then pick the rows
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            return logits[rows, columns]
        hidden = self.model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return head(hidden.last_hidden_state[rows, columns])

    def _place(self, words: list[str], originals: list[str], found: list[np.ndarray]) -> str | None:
        """The words with each mask replaced by its best allowed candidate (not the original word)."""
        if len(found) != len(originals):
            return None  # the sentence was cut to the model's length and lost a mask
        words = list(words)
        slots = [i for i, word in enumerate(words) if word == self.tokenizer.mask_token]
        for slot, original, candidates in zip(slots, originals, found):
            tokens = self.tokenizer.convert_ids_to_tokens(candidates.tolist())
            bare = original.lower().strip(".,;:!?\"'")
            choice = next((token for token in tokens if token.lower() != bare), tokens[0])
            words[slot] = choice.capitalize() if slot == 0 and original[:1].isupper() else choice
        return " ".join(words)

    def insert(self, sentences: Sequence[str]) -> list[str | None]:
        """Each sentence with about 5-10% more words, proposed by the model."""
        return self._fill(self._plans(sentences, insert=True))

    def substitute(self, sentences: Sequence[str]) -> list[str | None]:
        """Each sentence with about 5-10% of its words replaced by the model's best other word."""
        return self._fill(self._plans(sentences, insert=False))


DEGREE_ADVERBS = {"ADJ": "very", "VERB": "really"}  # WordNet adverbs of degree, put before what they modify


class WordNetEditor:
    """Insertions and substitutions without a masked LM (offline): see the module docstring."""

    def __init__(self, folder: str | os.PathLike = WORDNET_DIR, model: str = DEFAULT_MODEL,
                 rate: tuple[float, float] = (0.05, 0.10), seed: int = 0):
        import spacy

        self.synonyms = Synonyms(folder)
        self.nlp = spacy.load(model, exclude=["ner", "parser"])
        self.rate, self.seed = rate, seed

    def _edit(self, sentences: Sequence[str], slots) -> list[str | None]:
        """Each sentence with about 5-10% of its words edited at the ``slots(doc)`` it offers, (token index, new
        text) pairs; None for a sentence that offers none."""
        rng = random.Random(self.seed)
        out: list[str | None] = []
        for sentence, doc in zip(sentences, self.nlp.pipe(sentences)):
            offered = slots(doc)
            if not offered:
                out.append(None)
                continue
            words = [token.text_with_ws for token in doc]
            for index, text in rng.sample(offered, min(edit_count(len(sentence.split()), self.rate, rng),
                                                       len(offered))):
                words[index] = text + doc[index].whitespace_
            out.append("".join(words))
        return out

    def insert(self, sentences: Sequence[str]) -> list[str | None]:
        """Each sentence with a degree adverb before some of its adjectives and verbs."""
        def slots(doc):
            return [(t.i, f"{_like(DEGREE_ADVERBS[t.pos_], t.text) if t.i == 0 else DEGREE_ADVERBS[t.pos_]} "
                          f"{t.text.lower() if t.i == 0 and t.pos_ != 'PROPN' else t.text}")
                    for t in doc if t.pos_ in DEGREE_ADVERBS and (t.i == 0 or doc[t.i - 1].lower_ not in
                                                                  DEGREE_ADVERBS.values())]
        return self._edit(sentences, slots)

    def substitute(self, sentences: Sequence[str]) -> list[str | None]:
        """Each sentence with some of its words replaced by a WordNet synonym."""
        def slots(doc):
            return [(t.i, _like(synonym, t.text)) for t in doc
                    if t.pos_ in POS_FILES and t.text.lower() == t.lemma_.lower()
                    and (synonym := self.synonyms.get(t.pos_, t.text)) is not None]
        return self._edit(sentences, slots)


def _like(word: str, model: str) -> str:
    """``word`` capitalised as ``model`` is."""
    return word[:1].upper() + word[1:] if model[:1].isupper() else word

