"""Static embeddings, ``static:PATH``: a sentence's vector is the mean of its tokens' vectors, no network; a cheap CPU
baseline. ``PATH`` is a model2vec folder (``config.json``, ``model.safetensors`` holding ``embeddings``,
``tokenizer.json``), encoded by model2vec's own ``StaticModel.encode`` (its UNK tokens dropped, its ``max_length``
and ``normalize`` as its config says), or a sentence-transformers folder whose first module is a
``StaticEmbedding``, encoded by sentence-transformers' ``encode`` (its mean over every token, its Normalize module if
it has one). The two libraries compute differently (model2vec drops UNK tokens and cuts at 512 tokens), so each
folder is encoded by the library that wrote it: the vectors are that library's, to the bit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from cselab.encoders.base import Encoder
from cselab.errors import ModelError
from cselab.files import clipped

PREFIX = "static:"
MODEL2VEC_TENSOR = "embeddings"  # model2vec's key in model.safetensors (sentence-transformers': embedding.weight)


def is_static_spec(spec: str) -> bool:
    return spec.startswith(PREFIX)


def library_of(folder: Path, spec: str) -> str:
    """``model2vec`` or ``sentence-transformers``: which library wrote the static model in ``folder``."""
    if not folder.is_dir():
        raise ModelError(f"{spec}: {folder} is not a folder (expected a model2vec or sentence-transformers "
                         "StaticEmbedding folder)")
    weights = folder / "model.safetensors"
    if (folder / "config.json").is_file() and weights.is_file() and (folder / "tokenizer.json").is_file():
        from safetensors import safe_open

        with safe_open(str(weights), "numpy") as tensors:
            if MODEL2VEC_TENSOR in tensors.keys():
                return "model2vec"
    modules = folder / "modules.json"
    if modules.is_file():
        try:
            first = json.loads(modules.read_text(encoding="utf-8"))[0]["type"]
        except (ValueError, LookupError, TypeError) as err:
            raise ModelError(f"{modules}: not the module list sentence-transformers writes ({clipped(err)})") from None
        if first.endswith("StaticEmbedding"):
            return "sentence-transformers"
    raise ModelError(f"{spec}: {folder} holds neither a model2vec model (config.json, model.safetensors with "
                     f"'{MODEL2VEC_TENSOR}', tokenizer.json) nor a sentence-transformers model whose first module "
                     "is a StaticEmbedding")


class StaticEncoder(Encoder):
    """The static model in a folder (see the module docstring), encoded by the library that wrote it."""

    def __init__(self, spec: str):
        self.spec = spec
        self.folder = Path(spec[len(PREFIX):]).expanduser()
        self.library = library_of(self.folder, spec)
        if self.library == "model2vec":
            try:
                from model2vec import StaticModel
            except ImportError:
                raise ModelError(f"{spec}: a model2vec folder needs the model2vec package: pip install "
                                 "'cselab-toolkit[static]'") from None
            self.model: Any = StaticModel.from_pretrained(str(self.folder))
            self._dim = int(self.model.dim)
        else:
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(str(self.folder), device="cpu")
            width = getattr(self.model, "get_embedding_dimension", None) or \
                self.model.get_sentence_embedding_dimension  # (the name before sentence-transformers 6)
            self._dim = int(width())

    @property
    def dim(self) -> int:
        return self._dim

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "library": self.library}

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        if self.library == "model2vec":  # one process: the same vectors as its worker processes give
            vectors = self.model.encode(sentences, batch_size=batch_size, use_multiprocessing=False)
        else:
            vectors = self.model.encode(sentences, batch_size=batch_size, convert_to_numpy=True,
                                        show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)
