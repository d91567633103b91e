"""Methods as compositions: views of each row, and weighted losses over those views.

A method is one YAML file (``cselab/train/presets/*.yaml``, or any path): ``encoder`` (pooler,
prompt, MLP head), ``views`` (name -> the cache column encoded and an optional prompt; each
view is one forward pass, so two views of the same column differ by their dropout masks),
``losses`` (name -> parameters, ``weight`` included) and ``training`` (batch size, learning
rate, epochs, ...). ``--set a.b=value`` overrides any leaf; an unknown key is an error that
names it. A loss only sees the rows where all the views it uses exist (a row without a
paraphrase adds nothing to the margin loss, and still trains InfoNCE).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import yaml

from cselab.train import losses as L

SECTIONS = ("method", "encoder", "views", "losses", "training")
ENCODER_KEYS = {"pooler", "mlp", "prompt"}
VIEW_KEYS = {"column", "prompt"}
TRAINING_KEYS = {"batch_size", "lr", "epochs", "max_steps", "max_length", "eval_steps", "grad_accum",
                 "mixed_precision", "seed"}
LOSS_KEYS = {"info_nce": {"anchor", "positive", "temperature", "weight", "negatives"},
             "two_way_margin": {"anchor", "paraphrase", "negation", "alpha", "beta", "weight"},
             "recall": {"gamma", "weight"}}


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("cselab.train").joinpath("presets").iterdir()
                  if p.name.endswith(".yaml"))


def load_method(name_or_path: str | os.PathLike, overrides: list[str] = ()) -> dict[str, Any]:
    """A method config from a preset name or a YAML path, with ``key.path=value`` overrides, validated."""
    path = Path(name_or_path)
    if not path.is_file():
        if str(name_or_path) not in preset_names():
            raise ValueError(f"Unknown method {name_or_path!r}: not a YAML file, and the presets are "
                             f"{', '.join(preset_names())}")
        path = Path(str(resources.files("cselab.train").joinpath("presets", f"{name_or_path}.yaml")))
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    for item in overrides:
        _override(config, item)
    validate(config, str(path))
    return config


def _override(config: dict[str, Any], item: str) -> None:
    key, sep, raw = item.partition("=")
    if not sep:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. training.lr=1e-5")
    parts = key.split(".")
    node = config
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"--set {item!r}: unknown key {key!r} (no {part!r} there)")
        node = node[part]
    if not isinstance(node, dict) or (parts[-1] not in node and len(parts) < 3):
        raise ValueError(f"--set {item!r}: unknown key {key!r}")
    try:
        node[parts[-1]] = json.loads(raw)  # JSON first: YAML 1.1 reads 1e-5 as a string
    except json.JSONDecodeError:
        node[parts[-1]] = yaml.safe_load(raw)


def validate(config: dict[str, Any], source: str = "method") -> None:
    """Every section and key known, every loss's views defined."""
    def unknown(found, known, where):
        extra = sorted(set(found) - set(known))
        if extra:
            raise ValueError(f"{source}: unknown key(s) {', '.join(extra)} in {where}; "
                             f"known: {', '.join(sorted(known))}")

    unknown(config, SECTIONS, "the top level")
    unknown(config.get("encoder", {}), ENCODER_KEYS, "encoder")
    unknown(config.get("training", {}), TRAINING_KEYS, "training")
    views = config.get("views", {})
    for name, view in views.items():
        unknown(view, VIEW_KEYS, f"views.{name}")
    unknown(config.get("losses", {}), LOSS_KEYS, "losses")
    for name, params in config.get("losses", {}).items():
        unknown(params, LOSS_KEYS[name], f"losses.{name}")
        for role in ("anchor", "positive", "paraphrase", "negation"):
            if role in params and params[role] not in views:
                raise ValueError(f"{source}: losses.{name}.{role} names view {params[role]!r}, "
                                 f"which is not in views ({', '.join(views)})")
    if not config.get("losses"):
        raise ValueError(f"{source}: no losses")


def encode_views(encoder, config: dict[str, Any], rows: dict[str, list]) -> dict[str, tuple[torch.Tensor, list[int]]]:
    """Each view's vectors for the rows that have its column, and those rows' positions in the batch.

    Views of the same column and prompt share one tokenization; each still has its own forward pass."""
    out, tokens = {}, {}
    for name, view in config["views"].items():
        column, prompt = view["column"], view.get("prompt")
        present = [i for i, value in enumerate(rows[column]) if value]
        if not present:
            out[name] = (None, present)
            continue
        if (column, prompt) not in tokens:
            tokens[column, prompt] = encoder.tokenize([rows[column][i] for i in present], prompt=prompt)
        out[name] = (encoder.forward_tokens(*tokens[column, prompt], prompt=prompt), present)
    return out


def _aligned(encoded, names: list[str]) -> list[torch.Tensor] | None:
    """The views' vectors restricted to the rows all of them have; None when no row has them all."""
    common = set.intersection(*(set(encoded[n][1]) for n in names))
    if not common:
        return None
    result = []
    for name in names:
        vectors, present = encoded[name]
        index = {row: k for k, row in enumerate(present)}
        result.append(vectors[[index[row] for row in sorted(common)]])
    return result


def method_losses(config: dict[str, Any], encoded, recall_terms: Callable[[], tuple] | None = None
                  ) -> dict[str, torch.Tensor]:
    """Each configured loss, unweighted; a loss whose rows are all missing is left out."""
    result = {}
    for name, params in config["losses"].items():
        if name == "info_nce":
            views = _aligned(encoded, [params["anchor"], params["positive"]])
            if views:
                negatives = [encoded[v][0] for v in params.get("negatives", []) if encoded[v][0] is not None]
                result[name] = L.info_nce(*views, params["temperature"], torch.cat(negatives) if negatives else None)
        elif name == "two_way_margin":
            views = _aligned(encoded, [params["anchor"], params["paraphrase"], params["negation"]])
            if views:
                result[name] = L.two_way_margin(*views, params["alpha"], params["beta"])
        elif name == "recall":
            result[name] = L.recall(*recall_terms(), params["gamma"])
    return result


def total_loss(config: dict[str, Any], parts: dict[str, torch.Tensor]) -> torch.Tensor:
    return sum(config["losses"][name].get("weight", 1.0) * value for name, value in parts.items())

