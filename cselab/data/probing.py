"""SentEval's probing-task files: ``tr|va|te<TAB>label<TAB>tokenized sentence`` per line, ordered by part.

The official files (SentEval's ``data/probing/``) and those ``probe build-probing`` writes have this form.
Labels are numbered in sorted order of the training labels, as SentEval numbers them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cselab.data.errors import DataFormatError
from cselab.data.readers import read_lines
from cselab.data.transfer import LabelledText

PARTS = {"tr": "train", "va": "dev", "te": "test"}


def read_probing_file(path: str | Path, task: str = "", limit: int | None = None
                      ) -> tuple[dict[str, LabelledText], list[str]]:
    """The train/dev/test splits of one task file and its label names (``limit``: first N lines of each part)."""
    path = Path(path)
    rows: dict[str, list[tuple[int, str, str]]] = {name: [] for name in PARTS.values()}
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.rstrip().split("\t")
        if len(fields) < 3:
            raise DataFormatError(path, number, f"expected 3 tab-separated fields (part, label, sentence), "
                                                f"found {len(fields)}")
        if fields[0] not in PARTS:
            raise DataFormatError(path, number, f"part {fields[0]!r} is not tr, va or te")
        part = rows[PARTS[fields[0]]]
        if limit is None or len(part) < limit:
            part.append((number, fields[1], " ".join(fields[-1].split())))
    for name, part in rows.items():
        if not part:
            raise DataFormatError(path, 1, f"no {name} lines")
    names = sorted({label for _, label, _ in rows["train"]})
    index = {label: i for i, label in enumerate(names)}
    splits = {}
    for name, part in rows.items():
        if limit is not None:  # a quick check's short training part may miss labels: drop their rows
            part[:] = [row for row in part if row[1] in index]
        for number, label, _ in part:
            if label not in index:
                raise DataFormatError(path, number, f"label {label!r} does not occur in the training part")
        splits[name] = LabelledText(task or path.stem, name, [s for _, _, s in part],
                                    np.array([index[label] for _, label, _ in part]), files=(path,))
    return splits, names
