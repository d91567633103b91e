"""Where one tokenizer call, truncating with the tokenizer's own ``max_length``, gives the ids that cutting the text at
a word-piece's end and tokenising it again gives (:meth:`~cselab.encoders.transformer.TransformerEncoder.tokenize`'s
rule), and a template's rows are its ids joined around the sentence's.

What decides it, and why it is sound:

* the tokenizer (:func:`cuts_as_text`): a fast tokenizer whose model is WordPiece, after BERT's normaliser (or none)
  and pre-tokenizer, cutting on the right, with no added token matched as a single word only. The normaliser maps
  each character on its own, the pre-tokenizer splits words at spaces and punctuation by each character's class, and
  WordPiece takes a word's pieces left to right, each the longest the vocabulary holds: so a text cut at a piece's end
  gets the pieces the whole text has before it. A byte-level BPE (RoBERTa's, GPT-2's) is not taken: it spells a rare
  character as several tokens that share its span, which no cut of the text separates.
* each cut row (:func:`clean_cut`): a character the normaliser makes several pieces (a Hangul syllable, three jamo)
  gives them one span; where the first piece dropped starts inside the last one kept, the text cut keeps more than
  the tokenizer's truncation, and the row is cut as text instead.
* a template (:func:`template_sides`): the ids before and after the sentence, joined with the sentence's own, must
  be the filled text's on :data:`PROBES`. With BERT's pre-tokenizer a sentence's words stay apart from the template's
  exactly where the template's character next to ``{}`` splits words (a space, punctuation, a CJK character); where it
  does not, a probe starting or ending with a letter joins a word across it and the ids differ. An added token that
  the template's text next to ``{}`` begins or ends could be completed by a sentence: such a template is not taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Encoding as RustEncoding
    from transformers import PreTrainedTokenizerBase

#: Sentences a template's joined ids are checked on: empty, starting and ending with letters, digits, punctuation,
#: spaces; accents, combining marks, CJK, Hangul, emoji, long words that are several pieces, a special token's text.
PROBES = ("", "a", "the cat sat on the mat", "Naïve café, über alles — ça va?", "北京 is in 中国", "한국어 문장",
          "unbelievably antidisestablishmentarianism 1234567", "emoji 🙂🙃 and ﬁ", "\u0301accent first", " spaced ",
          "(brackets) and \"quotes\"", "x", "a [MASK] b", "İstanbul'da", "tab\tand\nnewline")


def cuts_as_text(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer's own truncation cuts a row as the text cut at the last piece kept would (see the
    module's docstring), wherever :func:`clean_cut` holds."""
    from tokenizers import models, normalizers, pre_tokenizers

    backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast tokenizer's
    if backend is None or tokenizer.truncation_side != "right":
        return False
    if any(getattr(token, "single_word", False) for token in tokenizer.added_tokens_decoder.values()):
        return False  # matched only before a space: a cut text's last word could become one
    return (isinstance(backend.model, models.WordPiece)
            and (backend.normalizer is None or isinstance(backend.normalizer, normalizers.BertNormalizer))
            and isinstance(backend.pre_tokenizer, pre_tokenizers.BertPreTokenizer))


def clean_cut(encoding: RustEncoding) -> bool:
    """Whether a truncated row drops no piece that starts inside its last kept one's characters (``encoding``: the
    Rust tokenizer's, its ``overflowing`` the dropped pieces; special tokens, of no sequence, left out)."""
    kept = [span for span, sequence in zip(encoding.offsets, encoding.sequence_ids) if sequence is not None]
    dropped = [span for span, sequence in zip(encoding.overflowing[0].offsets, encoding.overflowing[0].sequence_ids)
               if sequence is not None]
    return not kept or dropped[0][0] >= kept[-1][1]


def template_sides(tokenizer: PreTrainedTokenizerBase, filled: str) -> tuple[list[int], list[int]] | None:
    """The ids before and after the sentence in ``filled`` (a template with ``{}`` once), the tokenizer's special
    tokens included, where joining them with a sentence's own ids gives the filled text's ids
    (checked on :data:`PROBES`; see the module's docstring); None where it does not."""
    before, after = filled.split("{}")
    if _straddled(tokenizer, before, after):
        return None
    plain = dict(verbose=False, return_attention_mask=False, return_token_type_ids=False)
    bare = tokenizer("a", add_special_tokens=False, **plain)["input_ids"]
    wrapped = tokenizer("a", **plain)["input_ids"]
    starts = [i for i in range(len(wrapped) - len(bare) + 1) if wrapped[i:i + len(bare)] == bare]
    if not starts:
        return None
    sides = tokenizer([before, after], add_special_tokens=False, **plain)["input_ids"]
    head, tail = wrapped[:starts[0]] + sides[0], sides[1] + wrapped[starts[0] + len(bare):]
    own = tokenizer(list(PROBES), add_special_tokens=False, **plain)["input_ids"]
    whole = tokenizer([before + probe + after for probe in PROBES], **plain)["input_ids"]
    return (head, tail) if all(head + ids + tail == row for ids, row in zip(own, whole)) else None


def _straddled(tokenizer: PreTrainedTokenizerBase, before: str, after: str) -> bool:
    """Whether the text before ``{}`` ends with the beginning of an added token or the text after it starts with the
    end of one (as typed, and as the normaliser makes them), so that a sentence could complete it."""
    normalizer = tokenizer.backend_tokenizer.normalizer
    forms = [(before, after)] + ([(normalizer.normalize_str(before), normalizer.normalize_str(after))]
                                  if normalizer is not None else [])
    contents = {token.content for token in tokenizer.added_tokens_decoder.values()}
    contents |= {normalizer.normalize_str(content) for content in contents} if normalizer is not None else set()
    return any(left.endswith(content[:k]) or right.startswith(content[k:])
               for left, right in forms for content in contents for k in range(1, len(content)))
