"""The method reference, generated from the presets and the plug-in registry: ``docs/presets.md``.

``python -m cselab.train.config.reference --markdown docs/presets.md`` writes it; a test fails when the page and the
registry drift apart.
"""

from __future__ import annotations

import argparse
from typing import Any

from cselab.atomic import write_text_atomic
from cselab.registry import REQUIRED, Param, get, names
from cselab.train.config.methods import describe_presets, load_method, method_profiles, preset_base
from cselab.train.config.schema import loss_plugin
from cselab.train.config.sections import ENCODER, TRAINING, VIEW

KIND_TITLES = {"loss": "Losses", "input_augment": "Input augmentations (a forward view's `augment`)",
               "output_augment": "Output augmentations (the `augment` of a view `of` another)",
               "token_augment": "Token augmentations (a forward view's `tokens`)",
               "negatives": "Generated negatives (`losses.NAME.generated`)",
               "logit_transform": "Logit transforms (`losses.NAME.transform`)", "weight_hook": "Weight hooks "
               "(`hooks.weights`)", "head": "Training heads (`encoder.head`)",
               "adapter": "Adapters (`encoder.adapter`)", "text": "Text changes before tokenising (`texts.COLUMN`)",
               "pooler": "Poolers (`encoder.pooler`)",
               "layer_pooler": "Layer poolers (`views.NAME.layer_pooler`)"}

NEEDS = {"gradient": "needs_gradient", "hidden_states": "hidden_states", "initial_weights": "needs_initial_weights"}


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(param: Param) -> str:
    if param.default is REQUIRED:
        return "required"
    return "null" if param.default is None else f"`{param.default}`"


def _params_table(schema: dict[str, Param]) -> list[str]:
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    lines += [f"| `{key}` | {_default(p)} | {_cell(p.describe())} | {_cell(p.help)} |" for key, p in schema.items()]
    return lines


def _losses(config: dict[str, Any]) -> str:
    return ", ".join(f"{name} ({loss_plugin(name, params).name}, ×{params['weight']:g})"
                     for name, params in config["losses"].items())


def preset_table() -> list[str]:
    lines = ["| preset | extends | losses (kind, weight) | lr | batch | profiles | description |",
             "|---|---|---|---|---|---|---|"]
    for name, description in describe_presets():
        config = load_method(name).to_dict()
        lines.append(f"| `{name}` | {preset_base(name) or ''} | {_cell(_losses(config))} | "
                     f"{config['training']['lr']:g} | {config['training']['batch_size']} | "
                     f"{', '.join(method_profiles(name))} | {_cell(description)} |")
    return lines


def plugin_sections() -> list[str]:
    lines = []
    for kind in KIND_TITLES:  # the kinds a method names (suites and backends have pages of their own)
        lines += ["", f"## {KIND_TITLES[kind]}"]
        for name in names(kind):
            plugin = get(kind, name)
            if not plugin.cls.__module__.startswith("cselab."):
                continue  # a user's plug-in (a method's imports): not cselab's to document
            views, extra = plugin.schema().keys() - plugin.params.keys(), []
            if views:
                extra.append("reads views " + ", ".join(f"`{r}`" for r in plugin.schema() if r in views))
            if kind == "loss":
                extra.append(f"reduces over processes: {plugin.cls.reduce}")
            needs = [word for word, flag in NEEDS.items() if getattr(plugin.cls, flag, False)]
            if needs:
                extra.append("needs " + ", ".join(needs))
            lines += ["", f"### `{name}`", "", plugin.summary + (f" ({'; '.join(extra)})" if extra else "")]
            schema = plugin.params
            if schema:
                lines += ["", *_params_table(schema)]
    return lines


def markdown() -> str:
    lines = ["# Presets and plug-ins", "",
             "Generated from the presets and the plug-in registry by "
             "`python -m cselab.train.config.reference --markdown "
             "docs/presets.md`; a test fails when this page drifts. The papers' settings behind each preset are "
             "rows of the [protocol ledger](protocols.md).", "", "## Presets", "", *preset_table(),
             "", "## Sections of a method", "", "### `encoder`", "", *_params_table(ENCODER),
             "", "### `views.NAME`", "", *_params_table(VIEW), "", "### `training`", "", *_params_table(TRAINING),
             *plugin_sections()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cselab.train.config.reference", description=__doc__)
    parser.add_argument("--markdown", metavar="FILE", required=True, help="write the page to FILE")
    args = parser.parse_args(argv)
    print(f"wrote {write_text_atomic(args.markdown, markdown())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
