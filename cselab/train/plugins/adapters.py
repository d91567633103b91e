"""The adapter plug-ins (kind ``adapter``, ``encoder.adapter``): parameter-efficient weights added to the backbone and
trained instead of it.

- ``lora``: LoRA (Hu et al., 2022) through peft: a rank-``r`` update ``B A`` scaled by ``alpha / r`` beside each
  ``target_modules`` linear layer (peft's default modules for the model's type when none are named; every linear
  layer with ``all-linear``), dropout ``dropout`` on its input; ``B`` starts at 0, so the first step starts from
  the base model.
"""

from __future__ import annotations

import copy

from torch import nn

from cselab.errors import ConfigError
from cselab.files import clipped
from cselab.registry import Param, register
from cselab.train.plugins.kinds import Adapter


@register("adapter", "lora", params={
    "r": Param(int, 8, "the update's rank", min=1),
    "alpha": Param(float, 16.0, "the update's scale is alpha / r", min=0.0, above=True),
    "dropout": Param(float, 0.05, "dropout on the adapter's input", min=0.0, max=1.0, below=True),
    "target_modules": Param((list, str), None, "the linear layers that get an update, by name (null: peft's default "
                            "for the model's type; all-linear: every linear layer, peft's spelling)", nullable=True,
                            items=Param(str), words=("all-linear",))})
class LoRA(Adapter):
    """LoRA through peft (``pip install 'cselab-toolkit[llm]'``)."""

    def __init__(self, r: int, alpha: float, dropout: float, target_modules: list[str] | str | None):
        self.r, self.alpha, self.dropout, self.target_modules = r, alpha, dropout, target_modules

    def wrap(self, backbone: nn.Module, model: str) -> nn.Module:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise ConfigError("encoder.adapter: lora needs peft: pip install 'cselab-toolkit[llm]'") from None
        config = LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                            target_modules=self.target_modules)
        try:
            return get_peft_model(backbone, config)
        except ValueError as err:  # target modules not found, or none known for this model type
            linear = sorted({name.rsplit(".", 1)[-1] for name, module in backbone.named_modules()
                             if isinstance(module, nn.Linear)})
            raise ConfigError(f"encoder.adapter.target_modules: {model} ({type(backbone).__name__}): "
                              f"{clipped(err, 160)}; its linear layers: {', '.join(linear) or 'none'}") from None

    def merged(self, backbone: nn.Module) -> nn.Module:
        return copy.deepcopy(backbone).merge_and_unload()
