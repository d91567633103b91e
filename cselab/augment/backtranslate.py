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

import importlib.util
import logging
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from abc import ABC, abstractmethod
from typing import Any

from cselab import boundary
from cselab.augment.decoding import Decoding, length_batches
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
    """``auto`` -> the paper's models where every model of ``pivots`` loads offline, run by ``ctranslate2`` where it
    is installed, else by ``hf``; otherwise ``apertium`` (with a warning). Any other backend as it is."""
    if check_backend(backend) != "auto":
        return backend
    missing = [name for pair in pivots for name in pair if not available_offline(name)]
    if missing:
        logger.warning("back-translation: %s not found locally (no folder, not in the Hugging Face cache); using "
                       "apertium eng-spa, so paraphrases are not the paper's (--backend hf downloads the models)",
                       ", ".join(missing))
        return "apertium"
    fast = importlib.util.find_spec("ctranslate2") is not None
    logger.info("back-translation: the models load offline; backend %s (%s)", "ctranslate2" if fast else "hf",
                "ctranslate2 is installed" if fast else "ctranslate2 is not installed: pip install "
                "'cselab-toolkit[fast]' for the faster backend")
    return "ctranslate2" if fast else "hf"


def backend_pivots(backend: str, hf_pivots: Sequence[Sequence[str]] = WMT19_PIVOTS) -> list[list[str]]:
    """The round trips a (resolved) backend makes (:meth:`Translator.round_trips`); none for ``none``."""
    if backend == "none":
        return []
    return get("backtranslation", backend).cls.round_trips(hf_pivots)


def is_paper_backtranslation(backend: str, pivots: Sequence[Sequence[str]], compute_type: str = "float32") -> bool:
    """Whether these round trips are OssCSE's and sg-opt's: the WMT19 en-de and en-ru models, through transformers
    or through ctranslate2 with unquantized weights (its int8 types approximate them)."""
    engine = backend == "hf" or (backend == "ctranslate2" and not compute_type.startswith("int"))
    return engine and [list(p) for p in pivots] == [list(p) for p in WMT19_PIVOTS]


class Translator(ABC):
    """A back-translation backend: a plug-in of the registry's kind ``backtranslation``. ``name`` says which
    systems it runs (the manifest records it)."""

    name: str

    @classmethod
    def build(cls, hf_pivots: Sequence[Sequence[str]], decoding: Decoding) -> Translator:
        """The backend for the augment config's ``hf_pivots`` and decoding settings (a backend that reads
        neither is built as ``cls()``)."""
        return cls()

    @classmethod
    def resolved_compute_type(cls, compute_type: str, device: str | None = None) -> str:
        """``compute_type`` as this backend runs it on ``device`` (``auto`` made explicit, so that the cache's key
        names what ran); a backend that computes no tensors keeps it as given."""
        return compute_type

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


def one_line(text: str) -> str:
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
        text = "".join(f"{one_line(t)}\n" for t in texts)
        run = subprocess.run([self.binary, "-u", mode], input=text, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise ExternalToolError(f"apertium {mode} failed ({run.returncode}): {run.stderr.strip()}; "
                                    f"{APERTIUM_HOWTO}")
        lines = run.stdout.split("\n")[: len(texts)]
        if len(lines) != len(texts):
            raise ExternalToolError(f"apertium {mode} returned {len(lines)} lines for {len(texts)}")
        # '#' and '@' mark words apertium could not generate or transfer
        return [one_line(re.sub(r"[#@]", "", line)) for line in lines]

    def round_trip(self, texts: Sequence[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start:start + self.batch_size]
            back = self._translate(self.pair[1], self._translate(self.pair[0], batch))
            out.extend([text] for text in back)
        return out


class PairTranslator(Translator):
    """Round trips through pairs of seq2seq models (there, back), decoded as a :class:`Decoding` says: the way
    there takes the first candidate, the way back gives ``num_candidates`` per sentence, pooled over the pivots.
    A subclass loads ``self.pairs`` and implements :meth:`translate`."""

    decoding: Decoding
    pairs: list[tuple[Any, ...]]

    def __init__(self, pivots: Sequence[tuple[str, str]], decoding: Decoding | None = None,
                 device: str | None = None):
        """Loads each model of ``pivots`` (pairs of names or folders) on ``device`` (None: the backend's choice)."""

    @classmethod
    def build(cls, hf_pivots: Sequence[Sequence[str]], decoding: Decoding) -> PairTranslator:
        return cls([(a, b) for a, b in hf_pivots], decoding)

    @classmethod
    def round_trips(cls, hf_pivots: Sequence[Sequence[str]]) -> list[list[str]]:
        return [list(pair) for pair in hf_pivots]

    @abstractmethod
    def translate(self, model: Any, texts: Sequence[str], candidates: int = 1) -> list[list[str]]:
        """``candidates`` translations of each text by one loaded model, in input order."""

    def round_trip(self, texts: Sequence[str]) -> list[list[str]]:
        texts = [one_line(t) for t in texts]
        result: list[list[str]] = [[] for _ in texts]
        for there, back in self.pairs:
            pivot = [c[0] for c in self.translate(there, texts)]
            for i, candidates in enumerate(self.translate(back, pivot, self.decoding.num_candidates)):
                result[i].extend(candidates)
        return result


HF_COMPUTE_TYPES = ("auto", "float32", "float16", "bfloat16")


@register("backtranslation", "hf")
class HFTranslator(PairTranslator):
    """Round trips through pairs of Hugging Face seq2seq models (names or folders) with ``generate``: batches
    sorted by length and padded to their longest row (:func:`~cselab.augment.decoding.length_batches`), under
    ``inference_mode``; ``compute_type`` ``auto`` is bf16 (fp16 where bf16 is not supported) on a GPU, fp32 on the
    CPU."""

    def __init__(self, pivots: Sequence[tuple[str, str]] = WMT19_PIVOTS, decoding: Decoding | None = None,
                 device: str | None = None):
        import torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        from cselab.encoders.transformer import default_device, inference_dtype  # torch's

        self.device = device or default_device()
        self.decoding = decoding = decoding or Decoding()
        torch_dtype = inference_dtype(self.device, self.resolved_compute_type(decoding.compute_type, self.device))
        if decoding.threads:
            torch.set_num_threads(decoding.threads)
        self.pairs = [tuple((AutoTokenizer.from_pretrained(name),
                             AutoModelForSeq2SeqLM.from_pretrained(name).to(self.device, torch_dtype).eval())
                            for name in pair) for pair in pivots]
        self.name = "hf:" + ",".join(f"{a}+{b}" for a, b in pivots)

    @classmethod
    def resolved_compute_type(cls, compute_type: str, device: str | None = None) -> str:
        from cselab.encoders.transformer import default_device, inference_dtype  # torch's

        if compute_type not in HF_COMPUTE_TYPES:
            raise ConfigError(f"augment config.compute_type: {compute_type!r} is not a dtype of the hf backend "
                              f"({', '.join(HF_COMPUTE_TYPES)}); int8 types are ctranslate2's (backend=ctranslate2)")
        return str(inference_dtype(device or default_device(), compute_type)).removeprefix("torch.")

    def translate(self, model: Any, texts: Sequence[str], candidates: int = 1) -> list[list[str]]:
        import torch

        tokenizer, seq2seq = model
        decoding = self.decoding
        ids = tokenizer(list(texts), truncation=True, max_length=decoding.max_length)["input_ids"]
        out: list[list[str]] = [[] for _ in texts]
        with torch.inference_mode(), torch.random.fork_rng():
            for rows in length_batches([len(row) for row in ids], decoding.batch_sentences, decoding.batch_tokens):
                torch.manual_seed(decoding.seed)  # each batch alike: a chunk's rows do not depend on the ones before
                batch = tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt").to(self.device)
                sampled = {"do_sample": True, "num_beams": 1, "top_k": decoding.sampling_topk}
                generated = seq2seq.generate(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    max_new_tokens=decoding.max_length, num_return_sequences=candidates,
                    **(sampled if decoding.sample else {"do_sample": False, "num_beams": decoding.num_beams}))
                decoded = tokenizer.batch_decode(generated, skip_special_tokens=True)
                for position, i in enumerate(rows):
                    out[i] = [one_line(t) for t in decoded[position * candidates:(position + 1) * candidates]]
        return out


def make_translator(backend: str, pivots: Sequence[Sequence[str]] = WMT19_PIVOTS,
                    decoding: Decoding | None = None) -> Translator | None:
    """The translator of a resolved backend (:meth:`Translator.build`), or None for ``none``."""
    if backend == "none":
        return None
    if backend == "auto":
        raise ConfigError("back-translation backend 'auto': resolve it first (resolve_backend)")
    return get("backtranslation", backend, "back-translation backend").cls.build(pivots, decoding or Decoding())
