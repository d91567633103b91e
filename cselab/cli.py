"""Command line: ``cselab probe run ...``, ``cselab data ...``; ``probe`` is ``cselab probe``."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone

from cselab import __version__

SUITES = ("sts",)


def _add_probe_commands(probe: argparse.ArgumentParser) -> None:
    commands = probe.add_subparsers(dest="probe_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run", help="score an encoder on a probe suite",
        description="Score an encoder on a probe suite; print a table and write a results JSON.",
        epilog="Examples:\n  probe run --model minilm --suite sts\n"
               "  probe run --model bert-base-uncased --pooler cls_before_pooler --out bert.json\n"
               "  probe run --model tfidf --tasks sts12,stsb",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--model", required=True, metavar="SPEC",
                     help="alias (minilm), lexical baseline (bow, tfidf, tfidf:PATH), model folder, "
                          "cselab checkpoint or Hugging Face hub name")
    run.add_argument("--pooler", help="cls, cls_before_pooler, avg, avg_first_last, avg_top2 or mask "
                                      "(default: the folder's own, else avg)")
    run.add_argument("--prompt", help='prompt template, e.g. \'This sentence : "{}" means [MASK] .\'')
    run.add_argument("--max-length", type=int, help="tokens per sentence, longer ones are truncated")
    run.add_argument("--suite", choices=SUITES, default="sts", help="which probes to run (default: sts)")
    run.add_argument("--tasks", help="comma-separated subset of the suite's tasks, e.g. sts12,stsb")
    run.add_argument("--limit", type=int, help="score only the first N pairs of each subset (quick checks)")
    run.add_argument("--out", default="results.json", help="results JSON to write (default: results.json)")
    run.add_argument("--data-dir", help="data root (default: $CSELAB_DATA_DIR)")
    run.add_argument("--batch-size", type=int, default=64)
    run.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    run.add_argument("--dtype", default="auto", choices=("auto", "float32", "float16", "bfloat16"),
                     help="weights' type for inference (auto: bf16/fp16 on GPU, fp32 on CPU)")
    run.add_argument("--seed", type=int, default=0)
    run.set_defaults(handler=_probe_run)


def _probe_run(args: argparse.Namespace) -> None:
    import torch
    from transformers.utils import logging as transformers_logging

    from cselab.atomic import write_json_atomic
    from cselab.data import data_root
    from cselab.encoders import load_encoder
    from cselab.probes.report import sts_table
    from cselab.probes.results import checksums, package_versions
    from cselab.probes.sts import STS_SUITE, run_sts

    torch.manual_seed(args.seed)
    transformers_logging.disable_progress_bar()  # weight loading is quick; keep the table readable
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    encoder = load_encoder(args.model, pooler=args.pooler, prompt=args.prompt, max_length=args.max_length,
                           device=args.device, dtype=args.dtype, data_dir=args.data_dir)
    tasks = [task.strip() for task in args.tasks.split(",")] if args.tasks else list(STS_SUITE)
    scores, files = run_sts(encoder, tasks, data_dir=args.data_dir, batch_size=args.batch_size, limit=args.limit)
    root = data_root(args.data_dir)
    payload = {
        "cselab_version": __version__,
        "suite": args.suite,
        "model": encoder.describe(),
        "metric": "Spearman's rho x 100 of cosine similarity against gold scores",
        "scores": scores,
        "limit": args.limit,
        "seed": args.seed,
        "started": started.isoformat(timespec="seconds"),
        "wall_time_s": round(time.perf_counter() - clock, 2),
        "versions": package_versions(),
        "data": {"root": str(root.resolve()), "sha256": checksums(files, root)},
    }
    print(sts_table(scores, args.model))
    print(f"\nwrote {write_json_atomic(args.out, payload)} ({payload['wall_time_s']} s)")


def _add_data_commands(data: argparse.ArgumentParser) -> None:
    commands = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="list the named data sets and their sizes under the data root")
    listing.add_argument("--data-dir", help="data root (default: $CSELAB_DATA_DIR)")
    listing.set_defaults(handler=_data_list)
    fetch = commands.add_parser(
        "download", help="fetch STS12-16, STS-B and SICK-R from the Hugging Face hub",
        description="Fetch MTEB's hub copies of STS12-16, STS-B and SICK-R into DIR/senteval/downstream "
                    "(needs a network and `pip install 'cselab[hub]'`).")
    fetch.add_argument("--data-dir", required=True, help="folder to write the data root into")
    fetch.set_defaults(handler=_data_download)


def _data_list(args: argparse.Namespace) -> None:
    from cselab.data import STS_TASKS, load_sts

    for task in STS_TASKS.values():
        sizes = ", ".join(f"{split} {sum(len(s) for s in load_sts(task.key, split, args.data_dir))}"
                          for split in task.splits)
        print(f"{task.key:6} {task.name:16} {sizes:34} {task.description}")


def _data_download(args: argparse.Namespace) -> None:
    from cselab.data.download import download

    for path in download(args.data_dir):
        print(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cselab", description="Contrastive sentence embeddings: augment, train, probe.")
    parser.add_argument("--version", action="version", version=f"cselab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_probe_commands(commands.add_parser("probe", help="score encoders (STS, ...)",
                                            description="Score any encoder."))
    _add_data_commands(commands.add_parser("data", help="list or fetch data sets",
                                           description="The data sets under the data root."))
    return parser


def main(argv: list[str] | None = None) -> int:
    from cselab.data import DataFormatError, DataNotFoundError
    from cselab.encoders import EncoderNotFoundError

    args = build_parser().parse_args(argv)
    try:
        args.handler(args)
    except (DataNotFoundError, DataFormatError, EncoderNotFoundError, KeyError, ValueError, RuntimeError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0


def probe_main(argv: list[str] | None = None) -> int:
    """The ``probe`` command: ``probe run ...`` is ``cselab probe run ...``."""
    return main(["probe", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
