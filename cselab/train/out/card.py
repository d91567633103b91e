"""The model card of a run's checkpoint (``OUT/best/README.md``), written with every save of ``OUT/best``: the
sentence-transformers metadata header the hub renders, then what cselab knows of the run: base model and its
weights' sha256, method and profile, the training data and its fingerprint, the step and the dev score it was saved
at, the protocol ledger's rows where this run's settings differ from the paper or the released code, the resolved
config, the provenance, and how to load it (sentence-transformers, cselab, MTEB). Publishing stays the user's call
(``SentenceTransformer(OUT/best).push_to_hub(...)``, with ``trust_remote_code=True`` where the checkpoint needs
cselab's module; whoever loads it then needs cselab installed, which the card's Use section says)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml

from cselab.encoders.checkpoint import CheckpointInfo, needs_module
from cselab.encoders.specs import recorded_hub_name
from cselab.errors import CselabError, ModelError
from cselab.files import read_json
from cselab.registry import plain
from cselab.probes.dev import describe
from cselab.train import protocols
from cselab.train.config.method import MethodConfig
from cselab.train.config.schema import value_at


def _applies(row: dict[str, Any], presets: list[str], profile: str | None) -> bool:
    at = row.get("at", {})
    return at.get("preset") in presets and at.get("profile") in (None, profile)


def ledger_differences(method: MethodConfig) -> list[dict[str, Any]]:
    """The ledger rows of the method's presets (each part of ``A+B``, its profile's rows over the preset's) where this
    run differs from the paper or the released code: a row the ledger marks ``deviates`` whose value the run kept,
    and every row whose value the run changed (``--set``), each with this run's value and why."""
    presets, config = method.name.split("+"), method.to_dict()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for row in sorted(protocols.ledger()["rows"], key=lambda r: r.get("at", {}).get("profile") is not None):
        if "at" in row and _applies(row, presets, method.profile):
            keys = row["at"].get("keys") or [row["at"]["key"]]
            rows[row["paper"], row["quantity"]] = {**row, "keys": keys}  # the profile's row replaces the preset's
    found = []
    for row in rows.values():
        try:
            values = [value_at(config, key) for key in row["keys"]]
        except KeyError:  # a key another part of A+B removed
            continue
        mine = plain(values if "keys" in row["at"] else values[0])
        released = row.get("released") or {}
        if mine != row.get("cselab_value"):
            why: str | None = f"set for this run (the preset's value: {json.dumps(row.get('cselab_value'))})"
        elif "deviates" in (row.get("status"), released.get("status")):
            why = row.get("why") if row.get("status") == "deviates" else released.get("why")
        else:
            continue
        found.append({"paper": row["paper"], "quantity": row["quantity"], "paper_value": row.get("paper_value"),
                      "released": released.get("value"), "run": mine, "why": why})
    return found


def base_license(folder: str | os.PathLike | None) -> str | None:
    """The ``license`` a base model's card (its folder's ``README.md`` header) declares; None without one."""
    if folder is None:
        return None
    readme = Path(folder) / "README.md"
    try:
        text = readme.read_text(encoding="utf-8")
        header = yaml.safe_load(text.split("---", 2)[1]) if text.startswith("---") else None
    except (OSError, UnicodeDecodeError, IndexError, yaml.YAMLError):
        return None
    value = header.get("license") if isinstance(header, dict) else None
    return value if isinstance(value, str) else None


def _header(info: CheckpointInfo, method: MethodConfig, license: str | None) -> str:
    meta: dict[str, Any] = {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity",
                            "tags": ["sentence-transformers", "sentence-similarity", "feature-extraction", "cselab",
                                     *method.name.split("+")]}
    if recorded_hub_name(info.base_model):
        meta["base_model"] = info.base_model
    if license:
        meta["license"] = license
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---"


def _weights(facts: dict[str, Any]) -> str:
    """Each base weight file's sha256, as ``sha256sum`` prints it."""
    files = (facts.get("provenance") or {}).get("weights_sha256") or {}
    return "<br>".join(f"`{digest}` {name}" for name, digest in sorted(files.items())) or "—"


def _dev(method: MethodConfig, identity: dict[str, Any], score: float | None) -> str:
    if score is None:
        return "none (training.dev: none: the latest weights)"
    limit = (identity.get("dev") or {}).get("limit")
    limited = f", its first {limit} pairs (--eval-limit)" if limit else ""
    return f"{score:.2f} on {describe(method.training.dev)}{limited}"


def _use(info: CheckpointInfo, method: MethodConfig) -> list[str]:
    """The loading snippet: cselab's own module needs ``trust_remote_code=True`` and cselab installed (its class is
    installed with cselab; nothing is downloaded); a run with an adapter says where the adapter is and how peft loads
    it."""
    remote = ", trust_remote_code=True" if needs_module(info) else ""
    parts = ["```python\nfrom sentence_transformers import SentenceTransformer\n\nmodel = SentenceTransformer(\"PATH\""
             f"{remote})\nvectors = model.encode([\"A sentence.\"])\n```",
             "or `cselab.encoders.load_encoder(\"PATH\")`, or `probe run --model PATH` to score it; in MTEB 2, "
             "`mteb.evaluate(cselab.encoders.mteb_model.as_mteb(\"PATH\"), tasks)` (its ModelMeta lists what it was "
             "trained on)."]
    if remote:
        parts.append("The folder encodes through cselab's own sentence-transformers module (its prompt, pooler or "
                     "head), a class of the installed cselab: `pip install cselab-toolkit` first; "
                     "`trust_remote_code=True` lets sentence-transformers import it, and nothing is downloaded.")
    kept = _without_lm_head(info)
    if kept:
        parts.append(kept)
    adapter = method.encoder.adapter
    if adapter is not None:
        base = "the base loaded in 4 bits as it trained (its quantization_config: " + json.dumps(
            {key: adapter[key] for key in ("quantize", "double_quant", "compute_dtype")}) + ")" \
            if adapter.get("quantize") else "the base"
        parts.append(f"The folder is the base with the {adapter['kind']} adapter merged in; `adapter/` holds the "
                     "adapter alone, as peft writes it: `PeftModel.from_pretrained(AutoModel.from_pretrained(BASE), "
                     f"\"PATH/adapter\")` puts it back on {base}, and cselab's encoder over that model, "
                     "`TransformerEncoder(model, tokenizer, read_checkpoint_info(\"PATH/cselab.json\").encoding)` "
                     f"(pooler {info.pooler}, prompt {info.prompt!r}, and the rest of cselab.json's encoding), gives "
                     "this folder's vectors.")
    return parts


@functools.cache
def _lm_heads(base_model: str) -> tuple[str, ...]:
    """The language-model head classes among ``base_model``'s architectures (none where its config is not at hand):
    read once a run, not at each best checkpoint's card, from the folder or the local hub cache only. A card never
    asks the hub: the base's recorded name may be one the model was never fetched by (the packaged MiniLM's), and any
    call of the hub's client, ``local_files_only`` or not, first fetches its agent registry from huggingface.co."""
    config = _local_config(base_model)
    if config is None:
        return ()
    return tuple(name for name in config.get("architectures") or [] if isinstance(name, str)
                 and name.endswith(("ForCausalLM", "ForMaskedLM")))


def _local_config(base_model: str) -> dict[str, Any] | None:
    """``config.json`` of a model folder, or of a hub name from the local cache (no request made); None where
    there is none, or it is no JSON mapping."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = Path(base_model) / "config.json" if Path(base_model).is_dir() else \
            try_to_load_from_cache(base_model, "config.json")
    except ValueError:  # not a valid repository id
        return None
    if not isinstance(found, (str, Path)) or not Path(found).is_file():
        return None
    try:
        return read_json(found, ModelError)
    except CselabError:
        return None


def _without_lm_head(info: CheckpointInfo) -> str | None:
    """Why the folder holds its base's model without the language-model head the base has (a causal or masked LM's),
    when it has one; None otherwise, or when the base's config is not at hand."""
    heads = _lm_heads(info.base_model) if info.base_model else ()
    if not heads:
        return None
    kind = "AutoModelForCausalLM" if heads[0].endswith("ForCausalLM") else "AutoModelForMaskedLM"
    return (f"The folder holds the model the sentence vectors come from, without {info.base_model}'s {heads[0]} "
            "head: cselab trains sentence vectors, and a checkpoint keeps no language-model head (a loss that trains "
            f"one keeps it in OUT/last), so `{kind}.from_pretrained(PATH)` would start that head at random; take it "
            f"from {info.base_model} where it is wanted.")


def model_card(method: MethodConfig, info: CheckpointInfo, facts: dict[str, Any], step: int,
               score: float | None) -> str:
    """The card's Markdown; ``facts``: the run's ``identity`` and ``provenance`` (``OUT/run.json``) and its data
    ``source``; ``step`` and ``score``: where this checkpoint was saved (``score`` None without a dev set)."""
    identity, license = facts["identity"], facts.get("base_license")
    rows: list[list[Any]] = [
            ["method", method.name], ["profile", method.profile or "—"], ["base model", info.base_model],
            ["base weights sha256", _weights(facts)], ["base model's license", license or "—"],
            ["training data", f"`{method.data}`: {json.dumps(info.data)}"],
            ["saved at step", str(step)], ["dev score", _dev(method, identity, score)],
            ["pooler, prompt, max length, normalized", f"{info.pooler}, {info.prompt!r}, {info.max_length}, "
                                                       f"{info.normalize}{', lowercased' if info.lowercase else ''}"],
            ["cselab", identity.get("cselab")]]
    rows[2:2] = [[f"auxiliary model ({key})", f"{model['model']} (weights sha256 {model['weights_sha256'] or '—'}; "
                  "trained ones kept in OUT/last, not in this checkpoint)"]
                 for key, model in (identity.get("auxiliary") or {}).items()]
    parts = [_header(info, method, license), f"# {method.name}, trained with cselab", method.description or "",
             "| | |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)]
    differences = ledger_differences(method)
    parts.append("## Where this run differs from the papers\n\nThe protocol ledger's rows (docs/protocols.md) whose "
                 "setting in this run is not the paper's or its released code's:")
    table = ["| " + " | ".join(protocols.cell(d[key]) for key in ("paper", "quantity", "paper_value", "released",
                                                                 "run", "why")) + " |" for d in differences]
    parts.append("\n".join(["| paper | quantity | paper | released code | this run | why |",
                            "|---|---|---|---|---|---|", *table]) if table else
                 "None: the run keeps every ledgered setting, and none of them deviates from the paper or its code.")
    parts += ["## Use", *_use(info, method),
              "## Configuration", "```yaml\n" + yaml.safe_dump(method.to_dict(), sort_keys=False, width=110) + "```",
              "## Provenance", "```json\n" + json.dumps(facts.get("provenance"), indent=1) + "\n```"]
    return "\n\n".join(part for part in parts if part) + "\n"
