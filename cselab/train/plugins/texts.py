"""The text plug-ins (:mod:`cselab.registry` kind ``text``, the method's ``texts: {COLUMN: {kind: NAME, ...}}``): a
data column's texts changed before a training batch is tokenised, by a
:class:`~cselab.train.plugins.kinds.TextTransform`.

- ``end_punctuation``: a text that does not end in punctuation gets ``append`` (" ." by default), as SNCSE's released
  training does to every sentence and its negation before tokenising them (train_SNCSE.py, ``prepare_features``:
  ``if sentence.strip()[-1] not in PUNCTUATION: sentence = sentence + " ."``, PUNCTUATION being Python's
  ``string.punctuation``).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from cselab.registry import register, setting
from cselab.train.plugins.kinds import TextTransform


@register("text", "end_punctuation")
class EndPunctuation(TextTransform):
    """``append`` after a text whose last character (trailing spaces aside) is none of ``punctuation``."""

    @dataclass(frozen=True, kw_only=True)
    class Params(TextTransform.Params):
        append: str = setting(" .", "what a text that does not end in punctuation gets")
        punctuation: str = setting(string.punctuation, "the characters that count as punctuation (Python's "
                                   "string.punctuation)")

    def __init__(self, params: Params):
        super().__init__(params)
        self.punctuation = frozenset(params.punctuation)

    def __call__(self, text: str) -> str:
        stripped = text.strip()
        return text if stripped and stripped[-1] in self.punctuation else text + self.params.append
