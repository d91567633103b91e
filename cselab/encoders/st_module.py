"""A sentence-transformers module of cselab's, for the checkpoints sentence-transformers' own modules cannot
express: a prompt template (PromptBERT's, OssCSE's), ``[MASK]``-token pooling, BERT's pooler output (``cls``), the
layer-averaging poolers (``avg_first_last``, ``avg_top2``), template denoising and a head kept at test.

The module is cselab's :class:`~cselab.encoders.transformer.TransformerEncoder` (the same tokenisation, prompt,
truncation and pooling as ``probe run``), so ``SentenceTransformer(FOLDER, trust_remote_code=True)`` encodes the
same vectors. Its settings are the checkpoint's ``cselab.json``; the weights and tokenizer sit in the folder's root,
where transformers and ``probe run`` read them too. sentence-transformers imports a class outside its own package
only with ``trust_remote_code=True`` (v6 and later); the class is this installed module, no code is downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from sentence_transformers.base.modules.input_module import InputModule

from cselab.atomic import with_umask
from cselab.encoders.checkpoint import (CHECKPOINT_FILE, CheckpointInfo, needs_module, read_checkpoint_info,
                                       write_checkpoint_info, write_model_files, write_native_layout)
from cselab.encoders.transformer import TransformerEncoder
from cselab.errors import ModelError


class CselabEncoder(InputModule):
    """Tokenises (prompt and truncation included) and pools as cselab's encoder does; writes
    ``sentence_embedding``."""

    save_in_root = True

    def __init__(self, encoder: TransformerEncoder, info: CheckpointInfo,
                 config_fields: dict[str, Any] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # sentence-transformers leaves Module.__init__ unannotated
        self.encoder = encoder
        self.model = encoder.model  # a submodule, so that the model's .to(device) moves it
        if encoder.head is not None:
            self.head = encoder.head  # a head kept at test moves with it
        self.tokenizer = encoder.tokenizer
        self.info = info
        self.config_fields = config_fields  # config.json's values over the model's own (write_model_files)

    @property
    def max_seq_length(self) -> int:
        return self.encoder.max_length

    def preprocess(  # type: ignore[override]  # a text module: its inputs are strings, not any modality's
            self, inputs: Sequence[str], prompt: str | None = None, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Token ids and attention mask; sentence-transformers' own ``prompt`` is put before each text, as its
        Transformer module does (cselab's template, from ``cselab.json``, wraps the result)."""
        texts = [prompt + text for text in inputs] if prompt else list(inputs)
        input_ids, attention_mask = self.encoder.pad(self.encoder.tokenize(texts))
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        features["sentence_embedding"] = self.encoder.forward_batch(features["input_ids"],
                                                                    features["attention_mask"]).float()
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        write_model_files(output_path, self.encoder, self.info, self.config_fields)
        write_checkpoint_info(output_path, self.info)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             init_defaults: dict[str, Any] | None = None, **kwargs: Any) -> CselabEncoder:
        folder = cls.load_dir_path(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                   revision=revision, local_files_only=local_files_only)
        if folder is None:
            raise ModelError(f"{model_name_or_path}: sentence-transformers found no folder of it")
        return cls.of(folder)

    @classmethod
    def of(cls, folder: str | os.PathLike[str]) -> CselabEncoder:
        """The module of a checkpoint folder, on the CPU in float32 (sentence-transformers moves it)."""
        from cselab.encoders.loading import load_encoder

        info = read_checkpoint_info(Path(folder) / CHECKPOINT_FILE)
        encoder = load_encoder(str(folder), device="cpu", dtype="float32", cache=False)
        if not isinstance(encoder, TransformerEncoder):
            raise ModelError(f"{folder}: not a transformers model, which cselab's module encodes with")
        return cls(encoder, info)


def save_with_module(folder: str | os.PathLike[str], encoder: TransformerEncoder, info: CheckpointInfo,
                     config_fields: dict[str, Any] | None = None) -> None:
    """Write the checkpoint through sentence-transformers' own save: the module (weights, tokenizer,
    ``cselab.json``), a Normalize module when ``info.normalize``, ``modules.json`` and its config."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize

    modules: list[torch.nn.Module] = [CselabEncoder(encoder, info, config_fields),
                                      *([Normalize()] if info.normalize else [])]
    SentenceTransformer(modules=modules, device=str(encoder.device)).save(str(folder), create_model_card=False)


def write_checkpoint(folder: str | os.PathLike[str], encoder: TransformerEncoder, info: CheckpointInfo,
                     config_fields: dict[str, Any] | None = None) -> Path:
    """A checkpoint folder of ``encoder`` (the format: :mod:`cselab.encoders.checkpoint`): sentence-transformers'
    own modules where they encode as ``info`` says, else cselab's module, written by that library's save."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if needs_module(info):
        save_with_module(folder, encoder, info, config_fields)
    else:
        write_native_layout(folder, encoder, info, config_fields)
    with_umask(folder)
    return folder
