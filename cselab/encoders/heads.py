"""Heads a checkpoint can keep at test, over the pooled vector: cselab.json's ``head`` (``{kind, ...its
parameters}``) and their weights in ``head.safetensors`` beside the backbone's. Training builds the same classes as
its ``encoder.head`` plug-ins of these kinds (:mod:`cselab.train.plugins.heads`), so what trains is what loads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cselab.atomic import write_bytes_atomic
from cselab.errors import ModelError
from cselab.files import read_tensors

HEAD_FILE = "head.safetensors"


class DenseTanh(nn.Module):
    """SimCSE's MLP (its ``MLPLayer``, BERT's pooler layer): dense layer and tanh."""

    def __init__(self, *, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(vectors))


class DenseActNorm(nn.Module):
    """BERT's masked-LM head transform (transformers' ``BertPredictionHeadTransform``, PromptBERT's
    ``--mask_embedding_sentence_org_mlp``): dense layer, the activation, LayerNorm."""

    def __init__(self, *, hidden: int, activation: str, eps: float):
        super().__init__()
        from transformers.activations import ACT2FN

        self.dense = nn.Linear(hidden, hidden)
        self.activation = ACT2FN[activation]
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)  # noqa: N815  (transformers' parameter names)

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        normed: torch.Tensor = self.LayerNorm(self.activation(self.dense(vectors)))
        return normed


CHECKPOINT_HEADS: dict[str, type[nn.Module]] = {"mlp": DenseTanh, "mlm_transform": DenseActNorm}


def activations() -> tuple[str, ...]:
    """The activation names :class:`DenseActNorm` takes (transformers' ``ACT2FN``)."""
    from transformers.activations import ACT2FN

    return tuple(sorted(ACT2FN))


def load_head(path: Path | None, spec: dict[str, Any], hidden: int) -> nn.Module:
    """The head ``spec`` names with the weights of the ``head.safetensors`` at ``path`` (every one, none besides), in
    eval mode; a missing, empty, truncated or damaged file, or other tensors, are a :class:`ModelError` naming the
    file."""
    if spec.get("kind") not in CHECKPOINT_HEADS:
        raise ModelError(f"cselab.json's head {spec.get('kind')!r}: none a checkpoint can hold "
                         f"({', '.join(CHECKPOINT_HEADS)})")
    try:
        head = CHECKPOINT_HEADS[spec["kind"]](hidden=hidden, **{k: v for k, v in spec.items() if k != "kind"})
    except (TypeError, KeyError) as err:  # a parameter the kind has not, or a value it cannot take
        raise ModelError(f"cselab.json's head {spec}: not the parameters of a {spec['kind']} head ({err})") from None
    if path is None:
        raise ModelError(f"{HEAD_FILE}: missing beside cselab.json, which names a head kept at test")
    try:
        head.load_state_dict(read_tensors(path))
    except RuntimeError as err:
        raise ModelError(f"{path}: not the weights of a {spec['kind']} head of width {hidden}: "
                         f"{str(err).splitlines()[0]}") from None
    return head.eval()


def save_head(folder: str | os.PathLike[str], head: nn.Module) -> None:
    """Write ``head``'s weights to ``folder``'s ``head.safetensors``, atomically."""
    from safetensors.torch import save

    write_bytes_atomic(Path(folder) / HEAD_FILE,
                       save({key: value.detach().contiguous().cpu() for key, value in head.state_dict().items()}))
