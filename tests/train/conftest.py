"""Fixtures of the training tests: a small finished augment cache."""

from pathlib import Path

import pytest

from cselab.augment.cache import AugmentConfig, _write_chunk, write_manifest

SUBJECTS = ["The old bridge", "My neighbour", "The committee", "A small bird", "The river", "Our team"]
VERBS = ["crosses the valley", "likes fresh bread", "meets every week", "sings at dawn", "flows to the sea"]


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory) -> Path:
    """A finished augment cache of 96 rows, a third of them without paraphrase or negation."""
    folder = tmp_path_factory.mktemp("cache") / "key"
    folder.mkdir()
    texts = [f"{SUBJECTS[i % 6]} {VERBS[i % 5]} in {1900 + i}." for i in range(96)]
    rows = {"id": list(range(96)), "text": texts,
            "paraphrase": [None if i % 3 == 0 else f"In {1900 + i}, {t[:-9].lower()}." for i, t in enumerate(texts)],
            "paraphrase_mer": [None if i % 3 == 0 else 0.5 for i in range(96)],
            "negation": [None if i % 3 == 1 else t.replace(" in ", " not in ", 1) for i, t in enumerate(texts)],
            "negation_rule": [None if i % 3 == 1 else "test" for i in range(96)],
            "negation_reason": [None] * 96}
    _write_chunk(folder, 0, rows, [])
    write_manifest(folder, AugmentConfig(backend="none"), "synthetic", "0" * 64, 1)
    return folder
