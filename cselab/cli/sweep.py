"""``cselab sweep``: train methods over seeds (and a grid), score each run, report mean ± std."""

from __future__ import annotations

import argparse

from cselab.cli.options import add_backbone, add_data_dir, add_overrides, add_profile, whole_number
from cselab.registry import MAX_SEED, MAX_SEEDS
from cselab.metrics import MIN_PAIRS


def register(parser: argparse.ArgumentParser) -> None:
    """``cselab sweep``."""
    parser.add_argument("--methods", required=True, help="comma-separated presets or YAML files, e.g. simcse,noise-neg")
    parser.add_argument("--seeds", default="3",
                        help="a number N (seeds 0..N-1), a comma-separated list, or a named set: thesis (the five of "
                             f"simcse-improvements.txt), sg-opt (the eight of sg-opt.txt Table 8); at most {MAX_SEEDS} "
                             f"seeds, each 0 to {MAX_SEED} (default: 3)")
    add_profile(parser, "each method's")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="a setting to vary; several --grid make every combination (not training.seed: "
                             "--seeds gives it)")
    add_overrides(parser, "--set training.max_steps=50 (every run)")
    add_backbone(parser)
    parser.add_argument("--data", help="augment cache folder, root of caches, or corpus (default: each method's "
                                       "own data, else cache/augment)")
    parser.add_argument("--out", required=True, help="sweep folder: runs/, results/, summary.{json,md,png}")
    add_data_dir(parser)
    parser.add_argument("--eval-limit", type=whole_number(MIN_PAIRS),
                        help="the dev scorer reads only the first N pairs (STS) or lines per file (transfer) "
                             "during training")
    parser.add_argument("--sts-limit", type=whole_number(MIN_PAIRS),
                        help="score only the first N pairs of each STS subset (quick checks)")
    parser.add_argument("--suites", default="sts",
                        help="the probe suites each run is scored with, joined by commas; sts is always among them "
                             "(default: sts; e.g. sts,bias adds Cont./Oppn., paraphrase over negation, CANNOT cosine)")
    parser.add_argument("--bias", action="store_true", help="the same as adding bias to --suites")
    parser.add_argument("--no-cache", action="store_true",
                        help="score without the embedding cache: encode afresh, keep no vectors (docs/probes.md)")
    parser.add_argument("--devices", help="comma-separated GPU ids: one worker process per GPU shares the runs")
    parser.set_defaults(handler=run, interrupted=lambda args: f"the scored runs in {args.out} are kept and the run "
                        "being trained keeps its last evaluation; the same command goes on from there")


def run(args: argparse.Namespace) -> None:
    from cselab.encoders.loading import resolve_backbone
    from cselab.experiments.sweep import SweepSpec, parse_seeds, run_parallel, run_sweep, summary_text

    spec = SweepSpec(methods=tuple(args.methods.split(",")), seeds=tuple(parse_seeds(args.seeds)), out=args.out,
                     model=resolve_backbone(args.model), grid=tuple(args.grid), data=args.data,
                     overrides=tuple(args.set), data_dir=args.data_dir, eval_limit=args.eval_limit,
                     sts_limit=args.sts_limit, profile=args.profile,
                     suites=tuple(args.suites.split(",")) + (("bias",) if args.bias else ()),
                     cache=not args.no_cache)
    summary = run_parallel(spec, args.devices.split(",")) if args.devices else run_sweep(spec)
    print(summary_text(summary))
    print(f"wrote {args.out}/summary.json, summary.md, summary.png")
