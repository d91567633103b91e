"""``probe export-mteb RESULTS.json OUT/``: the ``mteb`` section of a results JSON in MTEB's results layout,
``OUT/results/ORG__NAME/REVISION/`` holding ``model_meta.json`` and one TaskResult JSON per task, written by mteb's
own ``ResultCache`` (so ``mteb.ResultCache(OUT).load_results()`` reads it back). That folder is what the public
results repository (github.com/embeddings-benchmark/results) takes under its ``results/``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mteb import ResultCache
from mteb.models.model_meta import ModelMeta
from mteb.results import TaskResult

from cselab.errors import ConfigError
from cselab.files import read_json

META_DERIVED = ("loader", "is_cross_encoder")  # written by ModelMeta.to_dict, not fields it reads back


def _meta(section: dict[str, Any], name: str | None) -> ModelMeta:
    fields = {key: value for key, value in section["model_meta"].items() if key not in META_DERIVED}
    fields["training_datasets"] = set(fields["training_datasets"]) if fields.get("training_datasets") else None
    return ModelMeta(loader=None, **{**fields, **({"name": name} if name else {})})


def export_mteb(results: str | os.PathLike, out: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Write the results JSON's MTEB tasks into ``out`` in MTEB's layout (``name``: another ``org/name`` for the
    model); returns the files written."""
    payload = read_json(results, ConfigError)
    section = payload.get("mteb")
    if not isinstance(section, dict) or not section.get("tasks"):
        raise ConfigError(f"{results}: holds no MTEB tasks; make it with probe run --suite mteb --mteb-tasks NAME,...")
    if name is not None and name.count("/") != 1:
        raise ConfigError(f"--name {name}: expected ORG/NAME")
    meta = _meta(section, name)
    cache = ResultCache(Path(out))
    written = []
    for task, record in section["tasks"].items():
        result = TaskResult.from_dict(record["result"])
        cache.save_to_cache(result, meta)
        written.append(cache.get_task_result_path(task_name=task, model_name=meta.name,
                                                  model_revision=meta.revision))
    return [written[0].parent / "model_meta.json", *written]
