"""InfoCSE's information aggregation (Wu et al., 2022; caskcsg/sentemb's InfoCSE/), the ``aggregation_mlm`` loss: a
sentence's masked tokens predicted from its [CLS] vector and the token states of a frozen masked LM, so that the
sentence vector has to carry what the frozen states lack (Condenser's head).

The frozen part is the base model's own masked LM cut to its first ``layers`` layers, run without dropout and without
gradient (rebuilt from the base model, not state); the trained part is ``head_layers`` transformer layers of the base
model's kind (BERT's initialisation, or the ``c_head`` weights a Condenser folder keeps in ``model.pt``, as released)
and a copy of the masked LM's output head: trained with the encoder, saved in ``OUT/last``, never in a checkpoint.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from cselab.errors import ConfigError
from cselab.files import read_tensors
from cselab.registry import REQUIRED, Param, register, setting
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import Loss, LossContext
from cselab.train.plugins.losses import masked_views


class AggregationHead(nn.Module):
    """The [CLS] vector followed by the frozen masked LM's last token states (its own first state dropped), through
    ``layers`` (trained transformer layers) and the output ``head``: a score per token of the vocabulary at every
    position."""

    frozen: nn.Module

    def __init__(self, frozen: nn.Module, layers: nn.ModuleList, head: nn.Module):
        super().__init__()
        self.layers, self.head = layers, head
        self.__dict__["frozen"] = frozen  # not a submodule: outside the optimizer, DDP and the saved state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        frozen = self.frozen.to(input_ids.device).eval()
        with torch.no_grad():
            states = frozen(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 1:]
        hidden = torch.cat([condition.unsqueeze(1).to(states.dtype), states], dim=1)
        # the additive mask of every transformers version's BERT layer: 0 on tokens, the dtype's minimum on padding
        mask = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        for layer in self.layers:
            hidden = layer(hidden, mask)
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        return self.head(hidden)


def condenser_head(layers: nn.ModuleList, path: str) -> None:
    """Load the ``c_head`` weights a Condenser folder keeps beside its encoder (``model.pt``), as the released script
    does when the file is there; nothing otherwise."""
    saved = Path(path) / "model.pt"
    if not saved.is_file():
        return
    state = read_tensors(saved)
    head = {key[len("c_head."):]: value for key, value in state.items() if key.startswith("c_head.")}
    if head:
        layers.load_state_dict(head)


@register("loss", "aggregation_mlm")
class AggregationMLM(Loss):
    """InfoCSE's masked-token prediction from each of ``views``' pooled vector before the training head ([CLS]) and
    the frozen masked LM's token states of its masked sentence (:class:`AggregationHead`), cross-entropy on the
    masked tokens; each process averages its own masked tokens (as the released code under DDP). Needs a base model
    with masked-LM head weights."""

    view_lists, reduce, needs_tokens, needs_pooled = ("views",), "replicated", True, True

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        probability: float = setting(0.4, "share of each view's tokens masked (80% [MASK], 10% a random "
                                     "token, 10% kept)", min=0.0, max=1.0, above=True)
        layers: int = setting(6, "the frozen masked LM's layers, the first of the base model's (skip_from)",
                              min=1)
        head_layers: int = setting(2, "the trained transformer layers over [CLS] and the frozen states "
                                   "(n_head_layers)", min=1)

    @classmethod
    def view_schema(cls):
        return {"views": Param(list, REQUIRED, items=Param(str), help="the views whose [CLS] vectors predict their "
                               "own masked tokens (InfoCSE: both dropout views, [anchor, positive])")}

    def auxiliary(self, encoder) -> nn.Module:
        """The frozen masked LM (the base model's first ``layers`` layers) and the trained head layers and output
        head, from the base model's own weights."""
        from cselab.train.language_models import load_masked_lm, output_head

        backbone = encoder.backbone
        path = backbone.config.name_or_path
        depth = backbone.config.num_hidden_layers
        if self.params.layers > depth:
            raise ConfigError(f"losses.aggregation_mlm.layers: {self.params.layers}, and {path} has {depth} layers")
        blocks = getattr(getattr(backbone, "encoder", None), "layer", None)
        if not isinstance(blocks, nn.ModuleList):
            raise ConfigError(f"{type(backbone).__name__} has no encoder.layer list to take the head's layers' kind "
                              "from; the aggregation_mlm loss needs a BERT-like encoder")
        masked = load_masked_lm(path, "the aggregation_mlm loss", "predicts the masked tokens with",
                                num_hidden_layers=self.params.layers)
        frozen = getattr(masked, masked.base_model_prefix).requires_grad_(False).eval()
        output = copy.deepcopy(output_head(masked))
        layers = nn.ModuleList(type(blocks[0])(backbone.config) for _ in range(self.params.head_layers))
        layers.apply(backbone._init_weights)
        condenser_head(layers, path)
        return AggregationHead(frozen, layers, output.requires_grad_(True))

    def forward(self, views, context: LossContext):
        scores, labels = [], []
        for name, _, attention_mask, masked, targets in masked_views(context, self.views["views"],
                                                                            self.params.probability):
            scores.append(context.model(masked, attention_mask, auxiliary=self.attached,
                                        condition=context.encoded[f"{name}.pooled"][0]).flatten(0, 1))
            labels.append(targets.flatten())
        if not scores:
            return getattr(context.model, "module", context.model).empty().sum() * 0.0
        return L.masked_lm(torch.cat(scores), torch.cat(labels))
