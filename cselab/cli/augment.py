"""``cselab augment``: build the cached training corpus, or a transformation test set."""

from __future__ import annotations

import argparse
import json
import random

from cselab.cli.options import add_data_dir, add_overrides, add_seed, whole_number
from cselab.errors import ConfigError, DataError


def register(augment: argparse.ArgumentParser) -> None:
    """``cselab augment`` and ``cselab augment testset``."""
    augment.add_argument("--corpus", default="wiki1m",
                         help="one-sentence-per-line file, a corpus name under the data root (default: wiki1m), "
                              "or hf:DATASET[:SPLIT[:COLUMN]] from the Hugging Face hub")
    augment.add_argument("--out", default="cache/augment", help="cache root; the cache goes to OUT/KEY (default: "
                                                               "cache/augment)")
    augment.add_argument("--backend",
                         help="back-translation backend: hf = the paper's WMT19 en-de/en-ru models with transformers' "
                              "generate (downloaded when missing), ctranslate2 = the same models converted for "
                              "CTranslate2 (int8 on the CPU, float16 on a GPU; the fast extra), apertium = "
                              "rule-based eng-spa, none, or one an installed package adds (docs/augment.md); auto = "
                              "the WMT19 models when found locally (ctranslate2 where installed, else hf), else "
                              "apertium with a warning (default: auto)")
    add_overrides(augment, "--set chunk_size=500 --set mer_band=[0.2,0.6] --set decoding=sample "
                           "--set compute_type=float32 (docs/augment.md lists the keys)")
    augment.add_argument("--num-shards", type=whole_number(1), default=1,
                         help="split the work over N independent processes")
    augment.add_argument("--shard-index", type=whole_number(0), default=0,
                         help="which of the N shards this process builds")
    augment.add_argument("--num-proc", type=whole_number(1), default=1,
                         help="local worker processes (with --num-shards 1)")
    add_data_dir(augment, "data root for corpus names")
    augment.set_defaults(handler=build, interrupted=lambda args: f"the chunks finished in {args.out} are kept; the "
                         "same command builds only the rest")
    commands = augment.add_subparsers(dest="augment_command", metavar="[testset|mine]")
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
    testset.add_argument("--size", type=whole_number(2), default=200, help="number of source sentences (default: 200)")
    testset.add_argument("--backend", default="auto",
                         help="back-translation backend for paraphrases, as for `cselab augment` (default: auto)")
    testset.add_argument("--mlm", default="bert-base-uncased",
                         help="masked LM for insertion and substitution, a hub name or folder; 'wordnet' makes them "
                              "offline (WordNet synonyms, degree adverbs); 'none' leaves them out "
                              "(default: bert-base-uncased)")
    add_seed(testset)
    add_data_dir(testset, "data root for corpus names")
    testset.set_defaults(handler=testset_command)
    _register_mine(commands)


def _register_mine(commands) -> None:
    mine = commands.add_parser(
        "mine", help="hard negatives for (anchor, positive) pairs, mined from a corpus by an encoder",
        description="For each anchor, the corpus texts nearest to it that are not its positives, with false "
                    "negatives filtered (absolute or relative margin to the positive's score, a maximum score), "
                    "written as a training table (anchor, positive, negative) that `cselab train --data` reads: "
                    "sentence-transformers' mine_hard_negatives, the same negatives (docs/augment.md).",
        epilog="Example:\n  cselab augment mine --pairs pairs.csv --corpus wiki1m --model minilm "
               "--set relative_margin=0.05\n  cselab train --method simcse-sup --data cache/mined/KEY/mined.csv",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mine.add_argument("--pairs", required=True,
                      help="the (anchor, positive) pairs: a table file (CSV, TSV, JSONL, Parquet), hf:NAME[:SPLIT] or "
                           "a derived table; its columns anchor/positive, sent0/sent1, or named with --anchor-column "
                           "and --positive-column")
    mine.add_argument("--anchor-column", help="the pairs' anchor column (default: found by name)")
    mine.add_argument("--positive-column", help="the pairs' positive column (default: found by name)")
    mine.add_argument("--corpus", help="more candidate negatives beside the positives: a corpus name under the data "
                                       "root (wiki1m) or a one-sentence-per-line file (default: the positives alone)")
    mine.add_argument("--model", default="minilm", help="the encoder that ranks candidates: any probe run --model "
                                                        "(default: minilm)")
    mine.add_argument("--out", default="cache/mined", help="output root; the table goes to OUT/KEY/mined.csv "
                                                           "(default: cache/mined)")
    add_overrides(mine, "num_negatives=1 --set relative_margin=0.05 --set range_min=10 (docs/augment.md lists "
                        "the keys)")
    add_data_dir(mine, "data root for corpus and table names")
    mine.set_defaults(handler=mine_command, interrupted=lambda args: "the vectors encoded so far are kept in the "
                      "embedding cache; the same command goes on from them")


def build(args: argparse.Namespace) -> None:
    """Build the cache (the ``testset`` subcommand has its own handler)."""
    from cselab.augment.cache import AugmentConfig, build_cache, build_cache_parallel
    from cselab.augment.source import resolve_corpus
    from cselab.data.augmented import MANIFEST, read_manifest

    overrides = args.set + ([f"backend={args.backend}"] if args.backend else [])
    config = AugmentConfig.from_overrides(overrides).resolved()  # once, so that every shard agrees
    corpus = resolve_corpus(args.corpus, args.data_dir)
    if args.num_proc > 1 and args.num_shards != 1:
        raise ConfigError("use either --num-proc (local) or --num-shards/--shard-index (cluster), not both")
    if args.num_shards > 1:
        folder = build_cache(corpus, args.out, config, args.num_shards, args.shard_index)
    else:
        folder = build_cache_parallel(corpus, args.out, config, args.num_proc)
    if not (folder / MANIFEST).exists():
        print(f"shard {args.shard_index} of {args.num_shards} done in {folder}; the manifest is written when all are")
        return
    print(f"cache {folder}\n{json.dumps(read_manifest(folder)['summary'], indent=2)}")


def testset_command(args: argparse.Namespace) -> None:
    from cselab.augment.backtranslate import make_translator, resolve_backend
    from cselab.augment.edits import MaskedLMEditor, WordNetEditor
    from cselab.augment.negation import Negator
    from cselab.augment.source import read_source, resolve_corpus
    from cselab.augment.testset import build_testset, write_testset

    lines = [line.text for line in read_source(resolve_corpus(args.corpus, args.data_dir)) if line.text]
    if len(lines) < 2:
        raise DataError(f"{args.corpus}: a test set needs at least two usable sentences")
    sentences = random.Random(args.seed).sample(lines, min(args.size, len(lines)))
    translator = make_translator(resolve_backend(args.backend))
    editor = {"none": lambda: None, "wordnet": lambda: WordNetEditor(seed=args.seed)}.get(
        args.mlm, lambda: MaskedLMEditor(args.mlm, seed=args.seed))()
    records = build_testset(sentences, Negator(style=args.negation_style), translator, editor, seed=args.seed)
    path = write_testset(records, args.out)
    counts = {kind: sum(kind in r for r in records) for kind in
              ("paraphrase", "negation", "insertion", "deletion", "substitution", "random")}
    print(f"wrote {path}: {len(records)} sources; transformations made: {counts}")


def mine_command(args: argparse.Namespace) -> None:
    from cselab.augment.mining import MiningConfig, inputs, mine_to_folder
    from cselab.data import load_corpus
    from cselab.data.tables import column_map, load_table, training_columns
    from cselab.encoders import load_encoder
    from cselab.overrides import from_overrides

    config = from_overrides(MiningConfig, args.set, "num_negatives=1")
    table = load_table(args.pairs, args.data_dir)
    given = {ours: column for ours, column in (("text", args.anchor_column), ("positive", args.positive_column))
             if column} or None
    columns, _ = training_columns(table, column_map(table, ["text", "positive"], given))
    pairs = [(a, p) for a, p in zip(columns["text"], columns["positive"]) if p]
    corpus = load_corpus(args.corpus, args.data_dir) if args.corpus else None
    if args.corpus and not corpus:
        raise DataError(f"--corpus {args.corpus}: no sentences in it")
    inputs(pairs, config, corpus, table.name)  # refused before a model loads
    encoder = load_encoder(args.model, data_dir=args.data_dir)
    folder, manifest, made = mine_to_folder(pairs, encoder, config, args.out, corpus, where=table.name)
    said = "mined" if made else "already mined (same pairs, corpus, encoder and settings)"
    print(f"{said}: {folder / 'mined.csv'}: {manifest['rows']} rows from {manifest['pairs']} pairs; removed by the "
          f"filters: {json.dumps(manifest['removed'])}; search {manifest['search']}")
