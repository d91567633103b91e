"""Every named data set cselab reads from the data root, with its size there: what ``cselab data list`` prints and
docs/data.md lists (a test keeps the two the same)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from cselab.errors import DataError
from cselab.data.named import STS_TASKS, DataDir, load_cannot, load_corpus, load_sts
from cselab.data.root import data_root
from cselab.data.tables import DERIVED, load_table
from cselab.data.transfer import ALL_TRANSFER_TASKS, load_transfer


@dataclass(frozen=True)
class NamedSet:
    """A named set: the key commands take, what it is, and its size under the data root (or why there is none)."""

    key: str
    kind: str
    size: str
    description: str


def _sizes(sizes: dict[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in sizes.items())


def _sts(key: str, data_dir: DataDir) -> str:
    return _sizes({split: sum(len(s) for s in load_sts(key, split, data_dir)) for split in STS_TASKS[key].splits})


def _cannot(data_dir: DataDir) -> str:
    return _sizes({s.name: len(s) for s in load_cannot(data_dir)})


def _corpus(key: str, data_dir: DataDir) -> str:
    return f"{len(load_corpus(key, data_dir)):,} sentences"


def _transfer(task: str, data_dir: DataDir) -> str:
    return _sizes({split: len(part) for split, part in load_transfer(task, data_dir).items()})


def _entries() -> Iterator[tuple[str, str, str, Callable[[DataDir], str]]]:
    """(key, kind, description, size) of every named set."""
    for key, task in STS_TASKS.items():
        yield key, "STS", task.description, partial(_sts, key)
    yield "wiki1m", "corpus", "Wikipedia sentences, one per line (wiki/wiki1m_for_simcse.txt, or a prefix sample)", \
        partial(_corpus, "wiki1m")
    for key, description in (("stsb-rows", "STS-B's train, dev and test sentences, both of every row, repeats "
                                           "kept (SG/SG-OPT's training text)"),
                             ("stsb-sentences", "the same sentences, each once"),
                             ("stsb-raw-rows", "stsb-rows from STS-B's original release (sts_raw/STSBenchmark: cased, "
                                               "untokenised; SG/SG-OPT's official profile)")):
        yield key, "corpus", description, partial(_corpus, key)
    yield "cannot", "negation", "CANNOT negation pairs (contrast/cannot/*.tsv), per source; also a training table", \
        _cannot
    yield "sick-entailment", "table", DERIVED["sick-entailment"], \
        lambda d: f"{len(load_table('sick-entailment', d)):,} pairs"
    for name in ALL_TRANSFER_TASKS:
        yield name.lower(), "transfer", f"SentEval transfer task {name}", partial(_transfer, name)


def named_sets(data_dir: DataDir = None) -> list[NamedSet]:
    """Every named set, its size read under the data root; a set that is missing or unreadable there says why
    instead of stopping the list (a missing data root itself is an error)."""
    data_root(data_dir)
    found = []
    for key, kind, description, size in _entries():
        try:
            shown = size(data_dir)
        except DataError as err:  # missing, malformed, not UTF-8, unreadable: said on the set's own line
            shown = f"not available: {err}"
        found.append(NamedSet(key, kind, shown, description))
    return found


def set_keys() -> list[str]:
    """The keys of every named set (no data read)."""
    return [key for key, *_ in _entries()]
