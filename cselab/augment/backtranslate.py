"""Paraphrases by back-translation, kept when their MER says the surface changed enough.

OssCSE (Shi et al., section 3.2 step 2 and appendix A) translates each sentence to a pivot
language and back, and keeps a round trip whose MER to the source lies in [0.15, 0.6]: below,
the surface barely changed; above, translation errors creep in. Among the kept candidates the
most surface-dissimilar (highest MER) is chosen; candidates identical to the source are dropped.

Backends are plug-ins of the registry's kind ``backtranslation``: subclasses of :class:`Translator`
(``round_trip(texts) -> candidates per text``), cselab's here and a package's through the entry-point group
``cselab.backtranslation`` (docs/augment.md, "Adding a back-translation backend"):

- ``hf``, :class:`HFTranslator`: pairs of Hugging Face seq2seq models, by default the paper's
  facebook/wmt19-en-de + de-en and en-ru + ru-en (FSMT); Marian opus-mt pairs work too.
- ``apertium``, :class:`ApertiumTranslator`: Debian's rule-based ``apertium`` (eng-spa), offline on CPU.

:func:`resolve_backend` picks ``auto``'s backend: the WMT19 models when they load without a download
(local folders or the Hugging Face cache), otherwise apertium, with a one-line warning that the
paraphrases will not be the paper's.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from abc import ABC, abstractmethod

from cselab import boundary
from cselab.augment.names import APERTIUM_PIVOTS, MER_BAND, WMT19_PIVOTS
from cselab.errors import ConfigError, ExternalToolError, did_you_mean
from cselab.mer import mer
from cselab.normalizers import Normalizer, normalizer
from cselab.registry import contract, get, names, origin, register

logger = logging.getLogger(__name__)

APERTIUM_HOWTO = "install it with: apt-get install apertium apertium-eng-spa (Debian/Ubuntu)"


def available_offline(name_or_path: str) -> bool:
    """Whether a model loads without a download: a local folder, or a hub name already in the cache."""
    if Path(name_or_path).is_dir():
        return True
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name_or_path, "config.json"), str)
    except ValueError:  # not a valid repository id
        return False


def backend_names() -> tuple[str, ...]:
    """What a back-translation backend may be called: ``auto``, each registered backend, ``none``."""
    return ("auto", *names("backtranslation"), "none")


def check_backend(backend: str, where: str = "back-translation backend") -> str:
    """``backend``, or a ConfigError naming the known ones."""
    known = backend_names()
    if backend not in known:
        raise ConfigError(f"{where}: {backend!r} is not a backend{did_you_mean(backend, known)}; choose one of "
                          f"{', '.join(known)}")
    return backend


def backend_package(backend: str) -> str | None:
    """The package (``name==version``) whose entry point adds ``backend``; None for cselab's own, ``auto`` and
    ``none``."""
    return None if backend in ("auto", "none") else origin(get("backtranslation", backend))


def resolve_backend(backend: str, pivots: Sequence[Sequence[str]] = WMT19_PIVOTS) -> str:
    """``auto`` -> ``hf`` when every model of ``pivots`` loads offline, else ``apertium`` (with a warning);
    any other backend as it is."""
    if check_backend(backend) != "auto":
        return backend
    missing = [name for pair in pivots for name in pair if not available_offline(name)]
    if not missing:
        return "hf"
    logger.warning("back-translation: %s not found locally (no folder, not in the Hugging Face cache); using "
                   "apertium eng-spa, so paraphrases are not the paper's (--backend hf downloads the models)",
                   ", ".join(missing))
    return "apertium"


def backend_pivots(backend: str, hf_pivots: Sequence[Sequence[str]] = WMT19_PIVOTS) -> list[list[str]]:
    """The round trips a (resolved) backend makes (:meth:`Translator.round_trips`); none for ``none``."""
    if backend == "none":
        return []
    return get("backtranslation", backend).cls.round_trips(hf_pivots)


def is_paper_backtranslation(backend: str, pivots: Sequence[Sequence[str]]) -> bool:
    """Whether these round trips are OssCSE's and sg-opt's: WMT19 en-de and en-ru through transformers."""
    return backend == "hf" and [list(p) for p in pivots] == [list(p) for p in WMT19_PIVOTS]


class Translator(ABC):
    """A back-translation backend: a plug-in of the registry's kind ``backtranslation``. ``name`` says which
    systems it runs (the manifest records it)."""

    name: str

    @classmethod
    def build(cls, hf_pivots: Sequence[Sequence[str]], num_candidates: int) -> Translator:
        """The backend for the augment config's ``hf_pivots`` and ``num_candidates`` (a backend that reads
        neither is built as ``cls()``)."""
        return cls()

    @classmethod
    def round_trips(cls, hf_pivots: Sequence[Sequence[str]]) -> list[list[str]]:
        """The round trips it makes, for the manifest (none said by default)."""
        return []

    @abstractmethod
    def round_trip(self, texts: Sequence[str]) -> list[list[str]]:
        """Candidate paraphrases of each text, source -> pivot -> source."""


contract("backtranslation", Translator, {"round_trip": boundary.candidates})


@dataclass(frozen=True)
class Paraphrase:
    """The chosen candidate and its MER, or None when no candidate fell in the band."""

    text: str | None
    mer: float | None
    candidates: int


def select_paraphrase(source: str, candidates: Sequence[str], band: tuple[float, float] = MER_BAND,
                      normalize: str | Normalizer = "lower") -> Paraphrase:
    """The candidate with the highest MER inside ``band``; identical ones are dropped."""
    tokens = normalizer(normalize)
    scored = [(mer(source, text, tokens), text) for text in dict.fromkeys(candidates)
              if text.strip() and tokens(text) != tokens(source)]
    kept = [(value, text) for value, text in scored if band[0] <= value <= band[1]]
    if not kept:
        return Paraphrase(None, None, len(candidates))
    value, text = max(kept, key=lambda pair: pair[0])
    return Paraphrase(text, value, len(candidates))


def _one_line(text: str) -> str:
    return " ".join(text.split())


@register("backtranslation", "apertium")
class ApertiumTranslator(Translator):
    """Round trips through Debian's rule-based ``apertium`` (``eng-spa`` then ``spa-eng``), in batches."""

    @classmethod
    def round_trips(cls, hf_pivots: Sequence[Sequence[str]]) -> list[list[str]]:
        return [list(pair) for pair in APERTIUM_PIVOTS]

    def __init__(self, pair: tuple[str, str] = ("eng-spa", "spa-eng"), batch_size: int = 2000,
                 binary: str = "apertium"):
        path = shutil.which(binary)
        if path is None:
            raise ExternalToolError(f"the apertium command was not found; {APERTIUM_HOWTO}")
        self.binary, self.pair, self.batch_size = path, pair, batch_size
        self.name = f"apertium:{pair[0]}+{pair[1]}"

    def _translate(self, mode: str, texts: Sequence[str]) -> list[str]:
        text = "".join(f"{_one_line(t)}\n" for t in texts)
        run = subprocess.run([self.binary, "-u", mode], input=text, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise ExternalToolError(f"apertium {mode} failed ({run.returncode}): {run.stderr.strip()}; "
                                    f"{APERTIUM_HOWTO}")
        lines = run.stdout.split("\n")[: len(texts)]
        if len(lines) != len(texts):
            raise ExternalToolError(f"apertium {mode} returned {len(lines)} lines for {len(texts)}")
        # '#' and '@' mark words apertium could not generate or transfer
        return [_one_line(re.sub(r"[#@]", "", line)) for line in lines]

    def round_trip(self, texts: Sequence[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start:start + self.batch_size]
            back = self._translate(self.pair[1], self._translate(self.pair[0], batch))
            out.extend([text] for text in back)
        return out


@register("backtranslation", "hf")
class HFTranslator(Translator):
    """Round trips through pairs of Hugging Face seq2seq models (names or folders).

    Each pivot contributes ``num_candidates`` back-translations per sentence (beam search, or
    sampling with ``sample=True``). Sentences are sorted by length into batches padded only
    to their longest member, run under ``inference_mode`` in bf16/fp16 on GPU, and returned
    in input order.
    """

    def __init__(self, pivots: Sequence[tuple[str, str]] = WMT19_PIVOTS, num_candidates: int = 4,
                 num_beams: int = 4, sample: bool = False, batch_size: int = 32, max_length: int = 128,
                 device: str | None = None, dtype: str = "auto"):
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        from cselab.encoders.transformer import default_device, inference_dtype  # torch's

        self.device = device or default_device()
        torch_dtype = inference_dtype(self.device, dtype)
        self.models = [tuple((AutoTokenizer.from_pretrained(name),
                              AutoModelForSeq2SeqLM.from_pretrained(name).to(self.device, torch_dtype).eval())
                             for name in pair) for pair in pivots]
        self.num_candidates, self.num_beams, self.sample = num_candidates, max(num_beams, num_candidates), sample
        self.batch_size, self.max_length = batch_size, max_length
        self.name = "hf:" + ",".join(f"{a}+{b}" for a, b in pivots)

    @classmethod
    def build(cls, hf_pivots: Sequence[Sequence[str]], num_candidates: int) -> HFTranslator:
        return cls([(a, b) for a, b in hf_pivots], num_candidates)

    @classmethod
    def round_trips(cls, hf_pivots: Sequence[Sequence[str]]) -> list[list[str]]:
        return [list(pair) for pair in hf_pivots]

    def translate(self, tokenizer, model, texts: Sequence[str], candidates: int = 1) -> list[list[str]]:
        """``candidates`` translations of each text, length-sorted batches, input order restored."""
        import torch

        lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]]
        order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        out: list[list[str]] = [[] for _ in texts]
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                batch = tokenizer([texts[i] for i in rows], return_tensors="pt", padding=True, truncation=True,
                                  max_length=self.max_length).to(self.device)
                generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                           max_new_tokens=self.max_length, num_return_sequences=candidates,
                                           do_sample=self.sample, num_beams=1 if self.sample else self.num_beams)
                decoded = tokenizer.batch_decode(generated, skip_special_tokens=True)
                for position, i in enumerate(rows):
                    out[i] = [_one_line(t) for t in decoded[position * candidates:(position + 1) * candidates]]
        return out

    def round_trip(self, texts: Sequence[str]) -> list[list[str]]:
        texts = [_one_line(t) for t in texts]
        result: list[list[str]] = [[] for _ in texts]
        for (forward_tok, forward), (backward_tok, backward) in self.models:
            pivot = [c[0] for c in self.translate(forward_tok, forward, texts)]
            for i, back in enumerate(self.translate(backward_tok, backward, pivot, self.num_candidates)):
                result[i].extend(back)
        return result


def make_translator(backend: str, pivots: Sequence[Sequence[str]] = WMT19_PIVOTS,
                    num_candidates: int = 4) -> Translator | None:
    """The translator of a resolved backend (:meth:`Translator.build`), or None for ``none``."""
    if backend == "none":
        return None
    if backend == "auto":
        raise ConfigError("back-translation backend 'auto': resolve it first (resolve_backend)")
    return get("backtranslation", backend, "back-translation backend").cls.build(pivots, num_candidates)
