"""The encoder being trained, and the checkpoint folder it leaves.

:class:`TrainingEncoder` is a transformers backbone with the poolers and prompts of
:class:`~cselab.encoders.TransformerEncoder` (tokenisation, padding and pooling are that
class's, so training and probing see sentences the same way) and, when a method asks for it,
SimCSE's MLP head (dense + tanh) used in training only.

:func:`save_checkpoint` writes a folder that ``probe run --model FOLDER`` reads as it is
(weights in safetensors, tokenizer, ``cselab.json``); for the ``cls_before_pooler`` and ``avg``
poolers without a prompt it also writes sentence-transformers' files, so
``SentenceTransformer(FOLDER)`` loads it with the same vectors.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from cselab.atomic import write_json_atomic
from cselab.encoders.checkpoint import CheckpointInfo, write_checkpoint_info
from cselab.encoders.transformer import TransformerEncoder

ST_POOLING = {"cls_before_pooler": "pooling_mode_cls_token", "avg": "pooling_mode_mean_tokens"}


class MLPHead(nn.Module):
    """SimCSE's training head over the pooled vector: dense layer and tanh."""

    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(vectors))


class TrainingEncoder(nn.Module):
    """A backbone with a pooler, an optional prompt and an optional training-only MLP head."""

    def __init__(self, backbone, tokenizer, pooler: str = "cls_before_pooler", prompt: str | None = None,
                 max_length: int = 32, mlp: bool = False):
        super().__init__()
        self.backbone = backbone
        self.view = TransformerEncoder(backbone, tokenizer, pooler=pooler, prompt=prompt, max_length=max_length)
        self.prompt = prompt
        self._views = {prompt: self.view}  # by template as given, before [MASK] becomes the tokenizer's token
        self.head = MLPHead(backbone.config.hidden_size) if mlp else None
        self.train()

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, **kwargs) -> TrainingEncoder:
        from transformers import AutoModel, AutoTokenizer

        return cls(AutoModel.from_pretrained(name_or_path), AutoTokenizer.from_pretrained(name_or_path), **kwargs)

    @property
    def tokenizer(self):
        return self.view.tokenizer

    def _view(self, prompt: str | None) -> TransformerEncoder:
        prompt = self.prompt if prompt is None else prompt
        if prompt not in self._views:
            self._views[prompt] = TransformerEncoder(self.backbone, self.tokenizer, pooler=self.view.pooler,
                                                     prompt=prompt, max_length=self.view.max_length)
        return self._views[prompt]

    def tokenize(self, sentences: list[str], prompt: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded token ids and attention mask of ``sentences`` in ``prompt`` (the encoder's by default)."""
        view = self._view(prompt)
        return view.pad(view.tokenize(sentences, warn=False))  # training cuts at max_length

    def forward_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       prompt: str | None = None, use_head: bool = True) -> torch.Tensor:
        """Pooled vectors of a tokenized batch (through the head in training when there is one)."""
        self.backbone.train(self.training)  # TransformerEncoder puts the backbone in eval mode
        device = next(self.backbone.parameters()).device
        vectors = self._view(prompt).forward_batch(input_ids.to(device), attention_mask.to(device))
        return self.head(vectors) if self.head is not None and use_head and self.training else vectors

    def forward(self, sentences: list[str], prompt: str | None = None, use_head: bool = True) -> torch.Tensor:
        """Pooled vectors of ``sentences``; ``prompt`` overrides the encoder's template for this call
        (e.g. the second view of a prompt-based positive pair)."""
        return self.forward_tokens(*self.tokenize(sentences, prompt), prompt=prompt, use_head=use_head)


def save_checkpoint(folder: str | os.PathLike, encoder: TrainingEncoder, info: CheckpointInfo) -> Path:
    """Write a self-describing checkpoint folder (see the module docstring); returns it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    encoder.backbone.save_pretrained(folder, safe_serialization=True)
    encoder.tokenizer.save_pretrained(folder)
    if info.pooler in ST_POOLING and not info.prompt:
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if info.normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
            (folder / "2_Normalize").mkdir(exist_ok=True)
        pooling = {key: key == ST_POOLING[info.pooler] for key in (
            "pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
            "pooling_mode_mean_sqrt_len_tokens")}
        write_json_atomic(folder / "1_Pooling" / "config.json",
                          {"word_embedding_dimension": encoder.backbone.config.hidden_size, **pooling})
        write_json_atomic(folder / "sentence_bert_config.json",
                          {"max_seq_length": info.max_length, "do_lower_case": False})
        write_json_atomic(folder / "modules.json", modules)
    write_checkpoint_info(folder, info)
    return folder
