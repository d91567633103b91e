"""``cselab train``: train a sentence encoder with a method preset (or a method YAML)."""

from __future__ import annotations

import argparse
import sys
import json
from pathlib import Path

from cselab.cli.options import add_backbone, add_data_dir, add_overrides, add_profile, whole_number
from cselab.errors import ConfigError
from cselab.files import read_json
from cselab.train.out.folder import RESTARTS
from cselab.metrics import MIN_PAIRS


def register(parser: argparse.ArgumentParser) -> None:
    """``cselab train``."""
    parser.add_argument("--method", default="simcse",
                        help="preset (see --list-methods), a method YAML file (e.g. a run's OUT/config.yaml, to "
                             "repeat it), or presets joined by + (osscse+byop-c: B's changes applied to A)")
    add_profile(parser)
    add_backbone(parser)
    parser.add_argument("--data", help="augment cache folder, a root holding caches (the newest finished one is "
                                       "used), or a corpus name or file (a text column only) (default: the method's "
                                       "own data, e.g. stsb-rows for sg, else cache/augment)")
    parser.add_argument("--out", help="run folder: config.yaml, best/, last/, log.jsonl (required to train)")
    add_overrides(parser, "--set training.max_steps=100 --set losses.info_nce.temperature=0.1")
    add_data_dir(parser, "data root for the dev scorer (training.dev)")
    parser.add_argument("--eval-limit", type=whole_number(MIN_PAIRS),
                        help="the dev scorer reads only the first N pairs (STS) or lines per file (transfer): quick "
                             "checks")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete the run's files in OUT first (config.yaml, run.json, best/, last/, log.jsonl) "
                             "and start afresh; without it, an existing OUT is resumed only when it holds this run")
    parser.add_argument("--restart-from", choices=RESTARTS,
                        help="when OUT/last is damaged: continue from OUT/best's weights with a fresh optimizer, "
                             "at the step best was saved")
    parser.add_argument("--report-to", default="", metavar="TRACKERS",
                        help="experiment trackers, joined by commas: tensorboard (OUT/tensorboard), wandb, mlflow, "
                             "trackio, comet_ml, aim, clearml, dvclive, swanlab (each configured by its own "
                             "environment variables; pip install 'cselab-toolkit[NAME]' for the first four)")
    parser.add_argument("--tensorboard", action="store_true", help="the former --report-to tensorboard")
    parser.add_argument("--list-methods", action="store_true", help="list the method presets and exit")
    parser.add_argument("--show-config", action="store_true",
                        help="print the method's resolved config (profile, --set and defaults applied) as YAML "
                             "and exit")
    parser.set_defaults(handler=run, interrupted=interrupted)


def run(args: argparse.Namespace) -> None:
    from cselab.train.config.methods import describe_presets, load_method

    if args.list_methods:
        presets = describe_presets()
        width = max(len(name) for name, _ in presets)
        for name, description in presets:
            print(f"{name:<{width}}  {description}")
        return
    method = load_method(args.method, args.set, args.profile)  # validated before any model loads
    if args.show_config:
        import yaml
        print(yaml.safe_dump(method.to_dict(), sort_keys=False, width=110), end="")
        return
    if not args.out:
        raise ConfigError("--out is required: the run folder (config.yaml, best/, last/, log.jsonl)")
    from cselab.encoders.specs import check_spec

    check_spec(args.model)  # a mistyped folder or an offline hub id: one line, before any model library loads
    check_loss_models(method)
    from transformers.utils import logging as transformers_logging

    from cselab.encoders.loading import resolve_backbone
    from cselab.train.run.options import RunOptions
    from cselab.train.recipe import train

    transformers_logging.disable_progress_bar()  # weight loading is quick; the training bar says what matters
    summary = train(method, resolve_backbone(args.model), args.data, args.out, RunOptions(
        data_dir=args.data_dir, eval_limit=args.eval_limit, report_to=reports(args), overwrite=args.overwrite,
        restart_from=args.restart_from))
    print(json.dumps(summary, indent=2))


def check_loss_models(method) -> None:
    """The models the method's losses name (DiffCSE's generator), checked as ``--model`` is: one line naming the
    key and how to give one, before any model library loads."""
    from cselab.encoders.specs import EncoderNotFoundError, check_spec
    from cselab.train.out.folder import loss_models

    for key, spec in loss_models(method).items():
        try:
            check_spec(spec)
        except EncoderNotFoundError as err:
            raise ConfigError(f"{key}: {err}; give a local one (--set {key}=PATH) or fetch {spec} where the hub "
                              "answers") from None


def reports(args: argparse.Namespace) -> list[str]:
    """``--report-to``'s trackers; ``--tensorboard`` adds TensorBoard, with a line saying it is the former flag."""
    names = [name.strip() for name in args.report_to.split(",") if name.strip()]
    if args.tensorboard:
        print("warning: --tensorboard is now --report-to tensorboard; the old flag will be removed", file=sys.stderr)
        names.append("tensorboard")
    return names


def interrupted(args: argparse.Namespace) -> str:
    """What an interrupted run kept, and how to go on."""
    if not args.out:
        return "nothing was written"
    state = Path(args.out) / "last" / "trainer_state.json"
    if not state.is_file():
        return f"{args.out} holds no saved state yet (the first is written at the first evaluation); the same " \
               "command starts the run again"
    try:
        step = read_json(state, ConfigError).get("step")
    except ConfigError:
        step = "?"
    return f"{args.out}/last holds the run at step {step} (its last evaluation); the same command resumes from there"

