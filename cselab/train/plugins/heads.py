"""Heads over the pooled vector (``encoder.head``): SimCSE's MLP, BERT's masked-LM transform (PromptBERT's supervised
run), SG-OPT's projection and DiffCSE's BatchNorm projector, and how their weights start (``encoder.head_init``). The
first two a checkpoint can keep (``encoder.head_at_test``): their modules are :mod:`cselab.encoders.heads`'."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from cselab.encoders.heads import DenseActNorm, DenseTanh, activations
from cselab.errors import ConfigError
from cselab.registry import build_plugin, register, setting
from cselab.train.plugins.kinds import Head


@register("head", "mlp")
class MLPHead(Head, DenseTanh):
    """SimCSE's head over the pooled vector: dense layer and tanh."""


@register("head", "mlm_transform")
class MLMTransformHead(Head, DenseActNorm):
    """BERT's masked-LM head transform as a head (PromptBERT's supervised BERT run): dense layer, the activation,
    LayerNorm; BERT's initialisation (LayerNorm's weight 1, bias 0, as PyTorch's)."""

    @dataclass(frozen=True, kw_only=True)
    class Params(Head.Params):
        activation: str = setting("gelu", "the activation after the dense layer (BERT's hidden_act)",
                                  choices=activations)
        eps: float = setting(1e-12, "LayerNorm's epsilon (BERT's layer_norm_eps)", min=0.0, above=True)

    def __init__(self, params: Params, *, hidden: int):
        super().__init__(params, hidden=hidden, activation=params.activation, eps=params.eps)


@register("head", "projection")
class ProjectionHead(Head, nn.Sequential):
    """SG-OPT's projection head f: two linear layers (hidden size ``inner``), each followed by GELU."""

    @dataclass(frozen=True, kw_only=True)
    class Params(Head.Params):
        inner: int = setting(4096, "the first layer's width (sg-opt.txt footnote 4: 4096)", min=1)
        output: int | None = setting(None, "the second layer's width (null: the backbone's hidden size)",
                                     min=1)

    def __init__(self, params: Params, *, hidden: int):
        inner = params.inner
        super().__init__(params, nn.Linear(hidden, inner), nn.GELU(), nn.Linear(inner, params.output or hidden),
                         nn.GELU())


def init_head_bert(head: nn.Module, initializer_range: float) -> None:
    """BERT's ``_init_weights`` for the head's linear layers: weights ~ normal(0, ``initializer_range``), biases 0
    (how SimCSE's ``cl_init`` and SG-BERT's ``loss.py`` start their heads)."""
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=initializer_range)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def build_head(head: dict | None, init: str, config) -> nn.Module | None:
    """The training head ``head`` (a checked ``{kind: NAME, ...parameters}``, or None for none) over the backbone
    with ``config``, its weights started as ``init`` says (``bert`` or ``torch``)."""
    if head is None:
        return None
    module = build_plugin("head", head, hidden=config.hidden_size)
    if init == "bert":
        if getattr(config, "initializer_range", None) is None:
            raise ConfigError(f"encoder.head_init bert needs the backbone's initializer_range, which its "
                              f"{type(config).__name__} lacks: set encoder.head_init=torch")
        init_head_bert(module, config.initializer_range)
    return module


@register("head", "batchnorm_mlp")
class BatchNormMLPHead(Head, nn.Sequential):
    """DiffCSE's projector (its released ``ProjectionMLP``, ``--batchnorm``): a linear layer to twice the width
    without bias, BatchNorm, ReLU, a linear layer back without bias, BatchNorm without affine parameters. BatchNorm
    normalises over the rows of a forward pass (both dropout views of a shared pass, as the released 2N rows)."""

    def __init__(self, params: Head.Params, *, hidden: int):
        super().__init__(params, nn.Linear(hidden, 2 * hidden, bias=False), nn.BatchNorm1d(2 * hidden), nn.ReLU(),
                         nn.Linear(2 * hidden, hidden, bias=False), nn.BatchNorm1d(hidden, affine=False))
