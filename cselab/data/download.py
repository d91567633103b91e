"""``cselab data download``: fetch the STS sets from the Hugging Face hub into the SentEval layout.

The hub copies are MTEB's (``mteb/sts12-sts`` ... ``mteb/sickr-sts``): original cased text,
no subset labels (each STS year is written as one subset, ``all``), and MTEB's SICK-R test
holds all 9,927 SICK pairs where SentEval's has 4,927. Scores therefore differ slightly from
those on SentEval's own files, which remain the reference (see SentEval's
``data/downstream/get_transfer_data.bash``).
"""

from __future__ import annotations

import os
from pathlib import Path

from cselab.atomic import write_text_atomic
from cselab.errors import ExternalToolError

HUB_STS = {"STS12-en-test": "mteb/sts12-sts", "STS13-en-test": "mteb/sts13-sts", "STS14-en-test": "mteb/sts14-sts",
           "STS15-en-test": "mteb/sts15-sts", "STS16-en-test": "mteb/sts16-sts"}
HUB_STSB = ("mteb/stsbenchmark-sts", {"train": "train", "dev": "validation", "test": "test"})
HUB_SICK = "mteb/sickr-sts"


def _clean(text: str) -> str:
    return " ".join(str(text).split())


def _load(name: str, split: str):
    from datasets import load_dataset

    try:
        return load_dataset(name, split=split)
    except Exception as err:
        raise ExternalToolError(f"could not fetch {name} ({split}) from the Hugging Face hub: {err}") from None


def download(data_dir: str | os.PathLike) -> list[Path]:
    """Write the STS12-16, STS-B and SICK-R hub copies under ``data_dir/senteval/downstream``."""
    base = Path(data_dir) / "senteval" / "downstream"
    written = []
    for folder, name in HUB_STS.items():
        rows = _load(name, "test")
        pairs = "".join(f"{_clean(r['sentence1'])}\t{_clean(r['sentence2'])}\n" for r in rows)
        gold = "".join(f"{float(r['score'])}\n" for r in rows)
        written.append(write_text_atomic(base / "STS" / folder / "STS.input.all.txt", pairs))
        written.append(write_text_atomic(base / "STS" / folder / "STS.gs.all.txt", gold))
    name, splits = HUB_STSB
    for ours, theirs in splits.items():
        rows = _load(name, theirs)
        text = "".join(f"hub\t{name}\t-\t{i}\t{float(r['score'])}\t{_clean(r['sentence1'])}\t{_clean(r['sentence2'])}\n"
                       for i, r in enumerate(rows))
        written.append(write_text_atomic(base / "STS" / "STSBenchmark" / f"sts-{ours}.csv", text))
    rows = _load(HUB_SICK, "test")
    text = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n" + "".join(
        f"{i}\t{_clean(r['sentence1'])}\t{_clean(r['sentence2'])}\t{float(r['score'])}\tNA\n"
        for i, r in enumerate(rows))
    written.append(write_text_atomic(base / "SICK" / "SICK_test_annotated.txt", text))
    return written
