"""Runs probe suites on an encoder and assembles the results JSON (see docs/results-json.md)."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from cselab import __version__
from cselab.boundary import failure_of, note
from cselab.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from cselab.checksum import sha256
from cselab.data import DataNotFoundError, data_root
from cselab.encoders import Encoder
from cselab.errors import ConfigError, DataError
from cselab.evaluation.scoring import Result
from cselab.files import check_folder, clipped, read_json, remove_path
from cselab.progress import Progress, current
from cselab.document import Paragraph, to_html, to_markdown
from cselab.probes.report import report_blocks
from cselab.probes.results import checksums, data_key
from cselab.probes.suite import ProbeOptions, Suite, presenters, suite_parts, suite_sections, suites
from cselab.provenance import provenance
from cselab.versions import package_versions



def run_suite(suite: Suite, encoder: Encoder, show: bool = True) -> Result:
    """``suite.run(encoder)`` under a progress bar (or lines) of its own that counts the sentences encoded."""
    with Progress(f"probe {suite.name}", unit="sentence", enabled=show) as bar, current(bar):
        return suite.run(encoder)


def _run_parts(encoder: Encoder, parts: tuple[str, ...], suite: str, options: ProbeOptions, payload: dict[str, Any],
               files: dict[str, list], items: dict[str, np.ndarray], show: bool) -> None:
    """Each suite of ``parts`` into ``payload``; the files each read go to ``files[name]``, the per-item outputs to
    ``items``. With ``--suite all`` an optional suite whose data is missing is recorded as skipped. ``show``: a
    progress bar (or lines) per suite, counting the sentences encoded."""
    for name, cls in suites().items():
        if name not in parts:
            continue
        try:
            result = run_suite(cls(options), encoder, show)
        except DataNotFoundError as err:
            if not (cls.optional and suite == "all"):
                raise
            payload[name] = {"skipped": str(err)}
            continue
        unknown = sorted(set(result.metadata) - set(cls.metadata))
        if unknown or set(result.scores) & set(result.metadata):
            raise TypeError(f"suite {name}: its result's metadata {unknown or sorted(result.metadata)} are not "
                            "declared in its metadata, or are also scores")
        payload[name] = {**result.scores, **result.metadata}
        files[name] = list(result.files)
        items.update(result.items)


def run_probes(encoder: Encoder, suite: str, options: ProbeOptions, progress: bool = True) -> dict[str, Any]:
    """The results JSON payload of ``suite`` (``sts``, ``bias``, ``transfer``, ``probing``, ``geometry``, ``all``, or
    several joined by commas); with several suites each distinct sentence is encoded once. ``payload["items"]``
    holds the per-item outputs as arrays by name (each STS and bias pair's cosine and gold score, each source's
    paraphrase-over-negation outcome, each CANNOT pair's cosine, each transfer and probing test item's
    prediction and label): :func:`write_outputs` writes them to ``OUT.items.npz`` and records its sha256.
    ``progress``: one bar per suite on a terminal, progress lines anywhere else (:mod:`cselab.progress`)."""
    parts = suite_parts(suite)
    import torch

    torch.manual_seed(options.seed)
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    payload: dict[str, Any] = {"cselab_version": __version__, "suite": suite, "model": encoder.describe(),
                               "metric": "Spearman's rho x 100 of cosine similarity against gold scores"}
    files: dict[str, list] = {}
    items: dict[str, np.ndarray] = {}
    with encoder.remembering() if len(parts) > 1 else contextlib.nullcontext():
        _run_parts(encoder, parts, suite, options, payload, files, items, progress)
    root = data_root(options.data_dir)
    payload.update({"limit": options.limit, "seed": options.seed, "started": started.isoformat(timespec="seconds"),
                    "wall_time_s": round(time.perf_counter() - clock, 2), "versions": package_versions(),
                    "data": {"root": str(root.resolve()), "sha256": checksums(sum(files.values(), []), root),
                             "read_by": {name: sorted({data_key(path, root) for path in read})
                                         for name, read in files.items()}},
                    "provenance": provenance(_device(encoder), encoder.weights),
                    "embedding_cache": encoder.cache.summary() if encoder.cache is not None else None,
                    "items": items})
    return payload


def _device(encoder: Encoder) -> str:
    """The device an encoder computes on (cpu for one without a torch model)."""
    device = getattr(encoder, "device", None) or getattr(getattr(encoder, "model", None), "device", None)
    return str(device) if device is not None else "cpu"


def write_plots(payload: dict[str, Any], out: str | os.PathLike) -> dict[Path, str]:
    """The pictures every suite of a payload draws (:meth:`Presenter.plots`) beside ``out``, with their captions."""
    out, plots = Path(out), {}
    for name, presenter in presenters().items():
        if isinstance(payload.get(name), dict):
            plots.update(presenter.plots(payload[name], out, payload["model"]["spec"]))
    return plots


def results_path(out: str | os.PathLike, inputs: tuple[str | os.PathLike | None, ...] = ()) -> Path:
    """The results JSON ``--out`` names: a path ending in ``.json``, or a folder (``FOLDER/results.json``); checked
    before any work (so that a mistake is not found after the scoring), none of its set of files one of ``inputs``
    (the files the run reads)."""
    out = Path(out)
    if out.is_dir() or str(out).endswith(os.sep):
        out = out / "results.json"
    if out.suffix != ".json":
        raise ConfigError(f"--out {out}: the results JSON's name must end in .json (its reports are written beside "
                          f"it as {out.stem}.md and {out.stem}.html), or name a folder")
    for written in (out, out.with_suffix(".md"), out.with_suffix(".html"), out.with_suffix(".items.npz")):
        check_folder(written, file=True, inputs=inputs)
    if out.is_dir():
        raise ConfigError(f"--out {out}: a folder where the results JSON goes")
    return out


def write_items(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """The per-item outputs as one compressed NumPy archive (``numpy.load(path)[name]``), written atomically."""
    buffer = io.BytesIO()
    named = {name: np.asarray(value) for name, value in arrays.items()}
    np.savez_compressed(buffer, **named)  # type: ignore[arg-type]  # numpy's stubs match **named against allow_pickle
    return write_bytes_atomic(path, buffer.getvalue())


def _staging(out: Path) -> tuple[Path, Path]:
    """The folder a set of outputs is written into, and the journal that lists them while they move into place."""
    return out.with_name(f".{out.name}.set"), out.with_name(f".{out.name}.moving")


def finish_outputs(out: Path) -> None:
    """Complete what a killed :func:`write_outputs` left: a set whose journal was written is moved into place (every
    file of it was complete); a set without one is discarded (the previous set stays)."""
    stage, journal = _staging(out)
    if journal.is_file():
        for name in read_json(journal, ConfigError, expect=list):
            if (stage / name).exists():
                os.replace(stage / name, out.parent / name)
        journal.unlink()
    remove_path(stage)


def write_outputs(payload: dict[str, Any], out: str | os.PathLike) -> list[Path]:
    """The results JSON at ``out`` and, beside it, its plots, a Markdown report and an HTML page, written as one
    set: all of them into a staging folder, then moved into place under a journal (the JSON last), so that a kill
    leaves the previous set, or a new one that :func:`finish_outputs` completes. Returns the files. When ``out``
    cannot be written (a full disk, a read-only or unwritable folder), the set is written into a new folder under
    the system's temporary folder instead and a DataError names it: scores once computed are never lost."""
    try:
        written, failed = _write_set(dict(payload), results_path(out))
    except OSError as err:
        why = err.strerror or str(err)
        rescue = Path(tempfile.mkdtemp(prefix="cselab-results-")) / Path(out).name
        try:
            written, _ = _write_set(dict(payload), rescue)
        except OSError as second:
            raise NotWritten(f"--out {out}: cannot be written ({why}), nor can {rescue.parent} "
                             f"({second.strerror or second}): the scores printed above are all that is left") from None
        raise DataError(f"--out {out}: cannot be written ({why}); the results and their reports were written to "
                        f"{written[0]} (and beside it) instead: move them where they belong") from None
    if failed is not None:  # the results are in place; the report is not
        kept = (f"the results JSON {written[0]} (and its items) was written; its report ({written[0].stem}.md, "
                f"{written[0].stem}.html) says only that it could not be made")
        if failure_of(failed) is None:
            raise DataError(f"the report could not be made ({type(failed).__name__}: {clipped(failed, 200)}); {kept} "
                            "(--debug shows the traceback)") from failed
        note(failed, during="the report", kept=kept)
        raise failed
    return written


class NotWritten(DataError):
    """Neither ``--out`` nor a folder in the system's temporary folder could take the results: nothing was written."""


def _write_set(payload: dict[str, Any], out: Path) -> tuple[list[Path], Exception | None]:
    """:func:`write_outputs` at ``out``; a set that fails before its journal is written is removed (the previous
    one stays). A report that cannot be made (a suite's presenter that fails) costs the report alone: the results
    JSON and its items are written, the report says why it is missing, and the error is returned once they are in
    place, for the caller to raise."""
    finish_outputs(out)
    stage, journal = _staging(out)
    stage.mkdir(parents=True)
    try:
        names, failed = _stage_set(payload, out, stage)
        write_json_atomic(journal, names)
    except Exception:
        if not journal.exists():
            remove_path(stage)
        raise
    finish_outputs(out)
    return [out.parent / name for name in (names[-1], *names[:-1])], failed


def _stage_set(payload: dict[str, Any], out: Path, stage: Path) -> tuple[list[str], Exception | None]:
    """Every file of the set written into ``stage``; their names, the results JSON last, and the error that kept the
    report from being made, if one did (its files then say so)."""
    arrays = payload.pop("items", None) or {}
    if arrays:
        items = write_items(stage / f"{out.stem}.items.npz", arrays)
        payload["items"] = {"file": items.name, "sha256": sha256(items), "arrays": sorted(arrays)}
    staged = write_json_atomic(stage / out.name, payload)
    try:
        plots, failed = write_plots(payload, staged), None
        blocks = report_blocks(payload, suite_sections(payload), plots)
    except Exception as err:  # the scores are kept whatever a presenter does
        failure = failure_of(err)
        said = f"{type(err).__name__}: {clipped(err, 200)}"
        why = f"{failure.who}: {failure.method}() failed ({said})" if failure is not None else said
        plots, failed = {}, err
        blocks = report_blocks(payload, [Paragraph(f"The report could not be made: {why}. The results JSON "
                                                   f"{out.name} holds the scores.")])
    return [*(p.name for p in plots), *([f"{out.stem}.items.npz"] if arrays else []),
            write_text_atomic(staged.with_suffix(".md"), to_markdown(blocks) + "\n").name,
            write_text_atomic(staged.with_suffix(".html"), to_html(blocks, stage)).name, out.name], failed
