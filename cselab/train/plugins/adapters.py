"""The adapter plug-ins (kind ``adapter``, ``encoder.adapter``): parameter-efficient weights added to the backbone and
trained instead of it.

- ``lora``: LoRA (Hu et al., 2022) through peft: a rank-``r`` update ``B A`` scaled by ``alpha / r`` beside each
  ``target_modules`` linear layer (peft's default modules for the model's type when none are named; every linear
  layer with ``all-linear``), dropout ``dropout`` on its input; ``B`` starts at 0, so the first step starts from
  the base model. With ``quantize`` (QLoRA, Dettmers et al., 2023), the base's linear layers load in 4 bits through
  bitsandbytes (``nf4``, with ``double_quant``) and compute in ``compute_dtype``; the adapter trains over them, and a
  checkpoint holds the base's dequantized weights with the update merged in, in ``compute_dtype``: a plain model that
  needs no bitsandbytes. (8-bit loading is not offered: bitsandbytes 0.50's int8 matmul fails on a CPU.)
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cselab.errors import ConfigError
from cselab.files import clipped
from cselab.registry import Param, register, schema_of, setting
from cselab.train.plugins.kinds import Adapter


@register("adapter", "lora")
class LoRA(Adapter):
    """LoRA through peft, QLoRA with bitsandbytes (``pip install 'cselab-toolkit[llm]'``)."""

    @dataclass(frozen=True, kw_only=True)
    class Params(Adapter.Params):
        r: int = setting(8, "the update's rank", min=1)
        alpha: float = setting(16.0, "the update's scale is alpha / r", min=0.0, above=True)
        dropout: float = setting(0.05, "dropout on the adapter's input", min=0.0, max=1.0, below=True)
        target_modules: list[str] | str | None = setting(
            None, "the linear layers that get an update, by name (null: peft's default for the model's "
            "type; all-linear: every linear layer, peft's spelling)", items=Param(str),
            words=("all-linear",))
        quantize: str | None = setting(
            None, "load the base's linear layers in 4 bits through bitsandbytes and train the adapter over them "
            "(QLoRA): nf4 (its NormalFloat) or fp4; null: the base in its own precision", choices=("nf4", "fp4"))
        double_quant: bool = setting(True, "with quantize, quantize the quantization constants too (QLoRA's)")
        compute_dtype: str = setting("bfloat16", "with quantize, the dtype the 4-bit layers compute in and the "
                                     "checkpoint's merged weights are saved in",
                                     choices=("bfloat16", "float16", "float32"))

        def rules(self) -> None:
            schema = schema_of(type(self))
            for key in ("double_quant", "compute_dtype"):
                if self.quantize is None and getattr(self, key) != schema[key].default:
                    raise ConfigError(f"{self.at(key)}: set, and it acts only on a quantized base; leave it at its "
                                      f"default or set {self.at('quantize')} (nf4 or fp4)")

    def load_options(self) -> dict[str, Any]:
        if self.params.quantize is None:
            return {}
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise ConfigError("encoder.adapter.quantize: 4-bit loading needs bitsandbytes: pip install "
                              "'cselab-toolkit[llm]'") from None
        from transformers import BitsAndBytesConfig

        params = self.params
        return {"quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type=params.quantize, bnb_4bit_use_double_quant=params.double_quant,
            bnb_4bit_compute_dtype=getattr(torch, params.compute_dtype))}

    def wrap(self, backbone: nn.Module, model: str) -> nn.Module:
        try:
            from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
        except ImportError:
            raise ConfigError("encoder.adapter: lora needs peft: pip install 'cselab-toolkit[llm]'") from None
        params = self.params
        check_rank(params.r, backbone, model)
        config = LoraConfig(r=params.r, lora_alpha=params.alpha,  # type: ignore[arg-type]  # peft says int; a float scales
                            lora_dropout=params.dropout, target_modules=params.target_modules)
        if params.quantize is not None:  # the frozen base's other weights in float32, as QLoRA trains
            backbone = prepare_model_for_kbit_training(backbone, use_gradient_checkpointing=False)
            one_cpu_kernel(backbone)
        try:
            return get_peft_model(backbone, config)
        except ValueError as err:  # target modules not found, or none known for this model type
            linear = sorted({name.rsplit(".", 1)[-1] for name, module in backbone.named_modules()
                             if isinstance(module, nn.Linear)})
            raise ConfigError(f"encoder.adapter.target_modules: {model} ({type(backbone).__name__}): "
                              f"{clipped(err, 160)}; its linear layers: {', '.join(linear) or 'none'}") from None

    def merged(self, backbone: Any) -> nn.Module:  # backbone: the peft model
        if self.params.quantize is None:
            return copy.deepcopy(backbone).merge_and_unload()
        return dequantized_merge(backbone, getattr(torch, self.params.compute_dtype))

    def save(self, backbone: Any, folder: str) -> None:  # backbone: the peft model
        """peft's own files (``adapter_config.json``, ``adapter_model.safetensors``), which ``PeftModel.from_pretrained
        (base, folder)`` loads onto the base (with QLoRA, onto the base loaded in 4 bits as it trained)."""
        backbone.save_pretrained(folder, safe_serialization=True)


def features(module: nn.Module) -> tuple[int, int] | None:
    """A layer's (in, out) features, where LoRA can adapt it: a linear layer (a 4-bit one too) or GPT-2's
    ``Conv1D``; None for any other module."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return weight.shape[0], weight.shape[1]
    return None


def check_rank(r: int, backbone: nn.Module, model: str) -> None:
    """Refuse a rank whose factors could not be held: ``r`` x (in + out) float32 values for every layer it may adapt,
    with their gradients and Adam's two states, against this machine's memory (before peft allocates them)."""
    layers = [shape for shape in map(features, backbone.modules()) if shape is not None]
    needed = 16 * r * sum(i + o for i, o in layers)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # a system that does not say
        return
    if needed > memory:
        full = max((min(shape) for shape in layers), default=0)
        raise ConfigError(f"encoder.adapter.r: {r} would take about {needed / 2**30:,.0f} GiB for its factors (with "
                          f"their gradients and Adam's states) over {model}'s {len(layers)} linear layers, more than "
                          f"this machine's {memory / 2**30:,.0f} GiB; a rank beyond {full} (its layers' full rank) "
                          "adds nothing (LoRA's are 4-64)")


def one_cpu_kernel(backbone: nn.Module) -> None:
    """On a CPU, bitsandbytes repacks a 4-bit weight for another kernel at its first pass without gradients (a dev
    score) and computes with it from then on, in training too: a run's steps would then depend on where it resumed.
    Each 4-bit layer keeps the kernel it trains with."""
    from bitsandbytes.nn import Linear4bit

    for module in backbone.modules():
        if isinstance(module, Linear4bit):
            module.support_avx512bf16_for_cpu = False


def dequantized_merge(backbone: Any, dtype: torch.dtype) -> nn.Module:  # backbone: the peft model
    """A 4-bit base with LoRA as a plain model of the base's architecture, on the CPU in ``dtype``: each 4-bit layer
    dequantized, each adapted layer with its update ``B A alpha / r`` added, every other weight as it is (a GPT-2
    ``Conv1D``, which the 4-bit load turned into a linear layer, transposed back); the trained model is left as it
    is. Built tensor by tensor, so that no full-precision copy of the model is ever on the training device."""
    from bitsandbytes.nn import Linear4bit
    from peft.tuners.lora import LoraLayer
    from peft.utils.integrations import dequantize_module_weight
    from transformers import AutoModel
    from transformers.pytorch_utils import Conv1D

    base = backbone.get_base_model()
    config = copy.deepcopy(base.config)
    for key in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, key):
            delattr(config, key)
    with torch.device("meta"):  # no initialisation: it would draw from the run's random generators
        plain = AutoModel.from_config(config, dtype=dtype)
    shapes = dict(plain.named_modules())
    adapted = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    state = {}
    for name, module in base.named_modules():
        if any(name.startswith(f"{outer}.") for outer in adapted):
            continue  # the base layer, the update's factors and dropout of an adapted layer
        layer = module.get_base_layer() if name in adapted else module
        prefix = f"{name}." if name else ""
        if isinstance(layer, Linear4bit) or name in adapted:
            weight = (dequantize_module_weight(layer) if isinstance(layer, Linear4bit) else layer.weight).float()
            for adapter in module.active_adapters if name in adapted else ():
                weight = weight + module.get_delta_weight(adapter).float()
            if isinstance(shapes.get(name), Conv1D) and isinstance(layer, Linear4bit):
                weight = weight.T
            state[f"{prefix}weight"] = weight.to("cpu", dtype)
            if layer.bias is not None:
                state[f"{prefix}bias"] = layer.bias.detach().to("cpu", dtype)
            continue
        state.update({prefix + key: tensor.detach().to("cpu", dtype) for key, tensor in
                      layer.named_parameters(recurse=False)})
        state.update({prefix + key: tensor.detach().to("cpu", copy=True) for key, tensor in
                      layer.named_buffers(recurse=False)})
    saved = plain.state_dict().keys()  # the rest are buffers a model computes (rotary frequencies): the base's
    plain.load_state_dict({key: value for key, value in state.items() if key in saved}, strict=True, assign=True)
    for name, module in plain.named_modules():
        for key in module._non_persistent_buffers_set:
            module._buffers[key] = state[f"{name}.{key}" if name else key]
    return plain.eval()
