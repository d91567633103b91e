"""Starting a run on ``OUT``, all its file work before the trainer is built: the training rows read, the base model's
length and weights checked, the run's identity checked against ``OUT`` (or written there, with the config), what a
killed save left removed, ``OUT/last`` verified, and the parts set up (:func:`~cselab.train.run.setup.setup`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from cselab.encoders.loading import after_pooling, model_folder
from cselab.encoders.packing import config_refusal
from cselab.encoders.pretrained import auto_config, check_max_length, weight_files
from cselab.provenance import provenance
from cselab.registry import build_plugin
from cselab.train.config.method import MethodConfig
from cselab.train.run import folder as run_folder
from cselab.train.run import sharding
from cselab.train.run.card import base_license
from cselab.train.run.checkpoint import Checkpoints
from cselab.train.run.launch import start_trackers
from cselab.train.run.options import RunOptions
from cselab.train.run.data import training_rows
from cselab.train.run.execution import plan
from cselab.train.model import TrainingEncoder
from cselab.train.objective import Objective
from cselab.train.run.setup import TokenIdsMaker, TrainingSetup, setup
from cselab.train.token_ids import ids_root, run_ids

logger = logging.getLogger(__name__)


@dataclass
class Started:
    """What :func:`start` found and built: the parts, the data's description, the saves and what to resume."""

    parts: TrainingSetup
    source: dict[str, Any]
    checkpoints: Checkpoints
    last: Path | None  # OUT/last, verified; None: nothing to resume
    counters: dict[str, Any] | None
    facts: dict[str, Any]  # the run's identity and provenance (OUT/run.json) and its data source: the model card's
    base_normalizes: bool = False  # the base model ends in Normalize: so does every checkpoint of the run


def base_normalizes(model: str) -> bool:
    """Whether the base model's vectors are normalised after pooling (its sentence-transformers Normalize module,
    kept in the run's checkpoints: cosine is unchanged, a dot product sees unit vectors as with the base). Other
    modules after pooling (a Dense) are not trained or kept; a warning names them."""
    modules = after_pooling(model)
    dropped = [name for name in modules if name != "Normalize"]
    if dropped:
        logger.warning("%s: its module(s) after pooling (%s) are not part of cselab's training; the run's "
                       "checkpoints end at the pooler%s, so their vectors are not in the base model's output space",
                       model, ", ".join(dropped), " and Normalize" if "Normalize" in modules else "")
    return "Normalize" in modules


def token_ids_of(accelerator: Accelerator, method: MethodConfig, rows, source: dict[str, Any]) -> TokenIdsMaker:
    """How the run's token ids are made (:mod:`cselab.train.token_ids`): by the main process first, kept under
    the data's ids folder, which the others then read."""
    def make(encoder: TrainingEncoder, objective: Objective):
        with accelerator.main_process_first():
            return run_ids(encoder, objective.forward_keys, objective.texts, dict(method.texts or {}), rows,
                           ids_root(source))
    return make


def start(accelerator: Accelerator, method: MethodConfig, model: str, data, out: Path, options: RunOptions
          ) -> Started:
    """Open ``out`` for a run of ``method`` from ``model`` on ``data`` as ``options`` say; a different run already there
    is refused before a model loads, and so is a tracker that cannot start."""
    data_dir, eval_limit, reporting = options.data_dir, options.eval_limit, options.reporting
    out.mkdir(parents=True, exist_ok=True)
    rows, source = training_rows(method, data, data_dir)
    check_max_length(str(model), method.training.max_length, "training.max_length")  # before OUT records the run
    for name, view in method.views.items():  # a token augment lengthens a row (word repetition)
        if view.tokens is not None:
            check_max_length(str(model), build_plugin("token_augment", view.tokens).longest(
                method.training.max_length), f"views.{name}.tokens (training.max_length, lengthened)")
    weights = weight_files(str(model))
    normalizes = base_normalizes(str(model))
    # a lever it cannot take, a method that cannot train sharded: refused
    execution = plan(method, accelerator.device.type, accelerator.num_processes, sharding.requested(),
                     config_refusal(auto_config(str(model))))
    mine = run_folder.run_identity(method, model, source, data_dir, eval_limit, weights)
    made = {**provenance(str(accelerator.device), weights), "execution": execution.describe()}
    run_folder.check_or_write(out, mine, method.to_dict(), write=accelerator.is_main_process, provenance=made)
    checkpoints = Checkpoints(out, accelerator)
    checkpoints.remove_partials()
    last, counters = (None, None) if options.restart_from == "best" else checkpoints.verified_last()
    if reporting:
        start_trackers(accelerator, method.to_dict(), mine, out)
    try:
        parts = setup(method, str(model), rows, source.get("path") or source.get("name"), accelerator.num_processes,
                      data_dir, eval_limit, execution, token_ids_of(accelerator, method, rows, source))
    except BaseException:
        if reporting:
            accelerator.end_training()
        raise
    return Started(parts, source, checkpoints, last, counters, {"identity": mine, "provenance": made, "source": source,
                                                               "base_license": base_license(model_folder(str(model)))},
                   normalizes)
