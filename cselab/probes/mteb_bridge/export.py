"""``probe export-mteb RESULTS.json OUT/``: the ``mteb`` section of a results JSON in MTEB's results layout,
``OUT/results/ORG__NAME/REVISION/`` holding ``model_meta.json`` and one TaskResult JSON per task, written by mteb's
own ``ResultCache`` (so ``mteb.ResultCache(OUT).load_results()`` reads it back). That folder is what the public
results repository (github.com/embeddings-benchmark/results) takes under its ``results/``.

The names that become parts of a path (the model's org and name, its revision, each task's name) come from a file
and are checked first: no ``/``, ``\\`` or control character, never ``.`` or ``..``; every path written is checked
to lie inside ``OUT`` (links resolved) before anything is written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mteb import ResultCache
from mteb.models.model_meta import ModelMeta
from mteb.results import TaskResult

from cselab.errors import ConfigError, DataError
from cselab.files import check_folder, clipped, read_json, shown

META_DERIVED = ("loader", "is_cross_encoder")  # written by ModelMeta.to_dict, not fields it reads back
NO_REVISION = "no_revision_available"
PATH_PART = re.compile(r"[^/\\\x00-\x1f]{1,200}")  # one folder or file name: no separator, no control character


def path_part(value: Any, what: str) -> str:
    """``value`` when it can be one part of a path (see the module docstring); else a DataError naming ``what``."""
    if not isinstance(value, str) or not PATH_PART.fullmatch(value) or value in (".", ".."):
        raise DataError(f"{what} {shown(value, 60)}: not a name that can be one part of a path (no '/', '\\' or "
                        "control character, not '.' or '..')")
    return value


def _meta(results: str | os.PathLike, section: dict[str, Any], name: str | None) -> ModelMeta:
    recorded = section.get("model_meta")
    if not isinstance(recorded, dict):
        raise DataError(f"{results}: mteb.model_meta is missing or not a mapping; write the file again with "
                        "probe run --suite mteb")
    fields = {key: value for key, value in recorded.items() if key not in META_DERIVED}
    fields["training_datasets"] = set(fields["training_datasets"]) if fields.get("training_datasets") else None
    # no weights to name (a lexical baseline): mteb's own folder name for that, said explicitly; left None, mteb
    # would write into the newest revision folder it finds under OUT, another model's results perhaps
    fields["revision"] = fields.get("revision") or NO_REVISION
    try:
        meta = ModelMeta(loader=None, **{**fields, **({"name": name} if name else {})})
    except Exception as err:  # pydantic's validation of the recorded fields
        raise DataError(f"{results}: mteb.model_meta is not a ModelMeta ({clipped(err, 200)})") from None
    for part in str(meta.name).split("/"):
        path_part(part, f"{results}: the model name's part")
    path_part(meta.revision, f"{results}: mteb.model_meta.revision")
    return meta


def _results(results: str | os.PathLike, section: dict[str, Any]) -> dict[str, TaskResult]:
    found = {}
    for task, record in section["tasks"].items():
        path_part(task, f"{results}: mteb.tasks: the task name")
        where = f"{results}: mteb.tasks.{task}"
        if not isinstance(record, dict) or not isinstance(record.get("result"), dict):
            raise DataError(f"{where}: expected a mapping with the TaskResult under 'result'")
        try:
            result = TaskResult.from_dict(record["result"])
        except Exception as err:  # pydantic's validation, or a field of the wrong shape
            raise DataError(f"{where}.result: not an MTEB TaskResult ({clipped(err, 200)})") from None
        if result.task_name != task:
            raise DataError(f"{where}.result: holds the task {shown(result.task_name, 60)}")
        found[task] = result
    return found


def export_mteb(results: str | os.PathLike, out: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Write the results JSON's MTEB tasks into ``out`` in MTEB's layout (``name``: another ``org/name`` for the
    model); returns the files written."""
    out = check_folder(out, "OUT", inputs=(results,))
    payload = read_json(results, ConfigError)
    section = payload.get("mteb")
    if not isinstance(section, dict) or not isinstance(section.get("tasks"), dict) or not section["tasks"]:
        raise ConfigError(f"{results}: holds no MTEB tasks; make it with probe run --suite mteb --mteb-tasks NAME,...")
    if name is not None and (name.count("/") != 1 or not all(PATH_PART.fullmatch(p) and p not in (".", "..")
                                                              for p in name.split("/"))):
        raise ConfigError(f"--name {name}: expected ORG/NAME, each a name that can be one part of a path")
    meta, tasks = _meta(results, section, name), _results(results, section)
    cache = ResultCache(out)
    paths = {task: cache.get_task_result_path(task_name=task, model_name=meta) for task in tasks}
    inside = out.resolve()
    for path in paths.values():
        if not path.resolve().is_relative_to(inside):
            raise DataError(f"{results}: would write {path}, outside {out}")
    for result in tasks.values():
        cache.save_to_cache(result, meta)
    return [next(iter(paths.values())).parent / "model_meta.json", *paths.values()]
