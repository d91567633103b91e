"""Fault injection: damaged run folders and caches, a different run on the same OUT, planted pickles, two writers,
nonsense values, and, class by class, every reader, loader and writer of a user's files (bad files, unusable
model folders, failing factories, links, identities, output sets, interrupts, full disks, degenerate data). Each
case ends either in the identical result or in a one-line error (exit 2) that names the file or value, with
nothing lost (the previous best checkpoint still loads) and no traceback. Run folders resumed, refused or
interrupted are tests/train/run/test_resume.py; the kills at random points are
tests/train/run/test_trainer.py::test_resume_after_a_kill_is_bit_identical_to_a_straight_run and
tests/augment/test_cache.py::test_resume_after_a_kill_gives_the_same_rows."""

import json
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cselab.augment.cache import AugmentConfig, build_cache
from cselab.cli import main
from cselab.data.augmented import load_cache
from tests.runs import SETTINGS, Killed, Payload, best_still_loads, copy_of, one_line_error, train_args

def write_corpus(path: Path, lines: int) -> Path:
    path.write_text("".join(f"The river number {i} flows to the sea.\n" for i in range(lines)))
    return path


@pytest.mark.slow
def test_a_damaged_cache_chunk_is_named_by_training_and_rebuilt_by_augment(tmp_path, capsys, tiny_bert_dir,
                                                                            data_dir):
    corpus = write_corpus(tmp_path / "c.txt", 120)
    config = AugmentConfig(backend="none", chunk_size=40)
    folder = build_cache(corpus, tmp_path / "cache", config, progress=False)
    rows = load_cache(folder).to_dict()
    chunk = folder / "chunk-00002.parquet"
    chunk.write_bytes(chunk.read_bytes()[:300])
    assert main(["train", "--model", str(tiny_bert_dir), "--data", str(folder), "--out", str(tmp_path / "run"),
                 *SETTINGS]) == 2
    assert f"{chunk}: damaged or missing" in one_line_error(capsys)
    again = ["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--set", "backend=none",
             "--set", "chunk_size=40"]
    assert main(again) == 0
    assert load_cache(folder).to_dict() == rows  # the chunk was rebuilt, the rows are those of the first build


def test_an_empty_cache_is_an_error_naming_the_skip_reasons(tmp_path, capsys):
    corpus = tmp_path / "binary.txt"
    corpus.write_bytes(b"\xff\xfe\x80\x81 \xc3\x28\n" * 5 + b"\n" * 3)  # not UTF-8, then empty lines
    assert main(["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--set", "backend=none"]) \
        == 2
    err = one_line_error(capsys)
    assert "no usable sentence" in err and "skipped input lines" in err


@pytest.mark.parametrize(("argv", "message"), [
    (["probe", "run", "--model", "bow", "--limit", "-5"], "argument --limit: -5 is out of range"),
    (["probe", "run", "--model", "bow", "--max-length", "0"], "argument --max-length: 0 is out of range"),
    (["probe", "run", "--model", "bow", "--batch-size", "0"], "argument --batch-size: 0 is out of range"),
    (["sweep", "--methods", "simcse", "--seeds", "0", "--out", "x"], "--seeds '0': no seed to run"),
    (["augment", "--set", "mer_band=[0.9,0.1]"], "mer_band: [0.9, 0.1] keeps no paraphrase"),
    (["augment", "--set", "max_chars=-1"], "max_chars: -1 is out of range"),
    (["train", "--set", "training.max_steps=-5", "--out", "x"], "training.max_steps: -5 is out of range"),
    (["probe", "run", "--model", "bow", "--device", "cuda:7"], "--device cuda:7: "),
])
def test_nonsense_values_are_refused_before_work_starts(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_info:  # argparse's own refusal
        code = exit_info.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_an_empty_idf_corpus_and_an_out_that_is_no_json_are_refused(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    assert main(["probe", "run", "--model", f"tfidf:{tmp_path / 'empty.txt'}", "--out", str(tmp_path / "r.json")]) \
        == 2
    assert "no sentence to take IDF weights from" in one_line_error(capsys)
    started = time.perf_counter()
    assert main(["probe", "run", "--model", "bow", "--out", str(tmp_path / "r.md")]) == 2
    assert "the results JSON's name must end in .json" in one_line_error(capsys)
    assert main(["probe", "run", "--model", "bow", "--out", str(tmp_path / "empty.txt" / "r.json")]) == 2
    assert "empty.txt is a file, not a folder" in one_line_error(capsys)
    assert time.perf_counter() - started < 5 and not list(tmp_path.glob("*.tmp"))  # refused before any scoring


# --- Classes of faults (issue 22): each reader, loader and writer of a class, walked -------------------------------

DAMAGES = {  # how a file can be wrong, as bytes; "folder" puts a folder in its place
    "not UTF-8": b'{"a": "\xff\xfe"}\n',
    "not JSON": b'{"a": 1,,}\n',
    "a list at the top": b"[1, 2, 3]\n",
    "a 5000-digit number": b'{"n": ' + b"9" * 5000 + b"}\n",
    "100,000 levels deep": b"[" * 100_000 + b"]" * 100_000,
    "folder": None,
}
YAML_DAMAGES = {
    "not UTF-8": b"method: \xff\xfe\n",
    "not YAML": b"method: [simcse\nviews: {\n",
    "a list at the top": b"- simcse\n- osscse\n",
    "empty": b"",
    "a bare string": b"simcse\n",
    "an anchor bomb": b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b]\n",
    "folder": None,
}


def plant(path: Path, content: bytes | None) -> None:
    """Put a damaged file (or a folder) where ``path`` was."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)


@pytest.fixture(scope="module")
def results_json(tmp_path_factory, data_dir):
    """A results JSON ``probe compare`` reads."""
    path = tmp_path_factory.mktemp("results") / "r.json"
    assert main(["probe", "run", "--model", "bow", "--suite", "sts", "--limit", "20", "--data-dir", str(data_dir),
                 "--out", str(path)]) == 0
    return path


def _json_reader(name: str, finished_run, tmp_path, tiny_bert_dir, tiny_cache, data_dir, results_json):
    """(the command, the file it reads) for each JSON reader of a user's file."""
    if name in ("run.json", "last/MANIFEST.json", "last/trainer_state.json"):
        out = copy_of(finished_run, tmp_path)
        return train_args(tiny_bert_dir, tiny_cache, data_dir, out), out / name
    if name == "cache manifest.json":
        cache = tmp_path / "cache"
        shutil.copytree(tiny_cache, cache)
        return train_args(tiny_bert_dir, cache, data_dir, tmp_path / "run"), cache / "manifest.json"
    if name in ("checkpoint cselab.json", "sentence-transformers modules.json"):
        model = tmp_path / "model"
        shutil.copytree(finished_run / "full" / "best", model)
        if name.startswith("sentence"):
            (model / "cselab.json").unlink()
        file = model / ("cselab.json" if name.startswith("checkpoint") else "modules.json")
        return ["probe", "run", "--model", str(model), "--limit", "20", "--data-dir", str(data_dir),
                "--out", str(tmp_path / "r.json")], file
    copy = tmp_path / "r.json"  # probe compare's results JSON
    shutil.copy(results_json, copy)
    return ["probe", "compare", str(results_json), str(copy)], copy


@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("reader", ["run.json", "last/MANIFEST.json", "last/trainer_state.json", "cache manifest.json",
                                    "checkpoint cselab.json", "sentence-transformers modules.json",
                                    "results JSON"])
def test_every_json_reader_refuses_every_bad_file_in_one_line(finished_run, tmp_path, tiny_bert_dir, tiny_cache,
                                                               data_dir, results_json, capsys, reader, damage):
    argv, path = _json_reader(reader, finished_run, tmp_path, tiny_bert_dir, tiny_cache, data_dir, results_json)
    plant(path, DAMAGES[damage])
    started = time.perf_counter()
    assert main(argv) == 2
    assert str(path) in one_line_error(capsys) and time.perf_counter() - started < 60
    if reader.startswith(("run", "last")):
        best_still_loads(path.parents[1] if reader.startswith("last") else path.parent)


@pytest.mark.parametrize("damage", YAML_DAMAGES)
@pytest.mark.parametrize("reader", ["method YAML", "OUT/config.yaml"])
def test_every_yaml_reader_refuses_every_bad_file_in_one_line(finished_run, tmp_path, tiny_bert_dir, tiny_cache,
                                                               data_dir, capsys, reader, damage):
    if reader == "method YAML":
        path = tmp_path / "method.yaml"
        argv = ["train", "--method", str(path), "--out", str(tmp_path / "run"), "--show-config"]
    else:
        out = copy_of(finished_run, tmp_path)
        path, argv = out / "config.yaml", train_args(tiny_bert_dir, tiny_cache, data_dir, out)
    plant(path, YAML_DAMAGES[damage])
    assert main(argv) == 2
    assert str(path) in one_line_error(capsys)


@pytest.mark.parametrize(("content", "message"), [
    ("extends: [simcse]\n", "extends: expected one preset name or YAML path"),
    ("extends: method.yaml\nmethod: loop\n", "extends goes round in a loop"),
    ("extends: simcse\nimports: [planted_raises]\n", "importing 'planted_raises' failed: RuntimeError: planted"),
    ("extends: simcse\nimports: [planted_syntax]\n", "importing 'planted_syntax' failed: SyntaxError"),
    ("extends: simcse\nimports: planted_raises\n", "imports: 'planted_raises' is not valid; expected a list"),
    ("extends: simcse\nlosses: {a/b: {kind: recall}}\n", "losses: the name 'a/b' is not allowed"),
    ("extends: simcse\nprofiles: [minilm]\n", "profiles: expected a mapping of profile names"),
])
def test_a_method_file_that_cannot_be_a_method_is_one_line(tmp_path, monkeypatch, capsys, content, message):
    (tmp_path / "planted_raises.py").write_text("raise RuntimeError('planted')\n")
    (tmp_path / "planted_syntax.py").write_text("def broken(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "method.yaml").write_text(content)
    assert main(["train", "--method", str(tmp_path / "method.yaml"), "--show-config"]) == 2
    assert message in one_line_error(capsys)


@pytest.mark.parametrize(("reader", "content", "message"), [
    ("corpus", "one sentence\n".encode("utf-16-le"), ":1: holds the control character U+0000"),
    ("corpus", b"fine\n\xff bad\n", ":2: byte 0xff is not valid utf-8"),
    ("testset", b'{"source": "a", "negation": "not a"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n",
     ":2: nested more than"),
    ("testset", b'{"source": "a", "negation": "not a"}\n\xff\n', ":2: byte 0xff is not valid utf-8"),
])
def test_text_files_with_bad_lines_are_named_with_the_line(tmp_path, tiny_bert_dir, data_dir, capsys, reader,
                                                           content, message):
    path = tmp_path / f"{reader}.txt"
    path.write_bytes(content)
    if reader == "corpus":
        argv = ["train", "--model", str(tiny_bert_dir), "--data", str(path), "--data-dir", str(data_dir),
                "--out", str(tmp_path / "run"), *SETTINGS]
    else:
        argv = ["probe", "run", "--model", "bow", "--suite", "bias", "--testset", str(path), "--limit", "20",
                "--data-dir", str(data_dir), "--out", str(tmp_path / "r.json")]
    assert main(argv) == 2
    assert f"{path}{message}" in one_line_error(capsys)


def _model_folder(kind: str, source: Path, tmp_path: Path) -> Path:
    folder = tmp_path / kind.replace(" ", "-")
    shutil.copytree(source, folder)
    weights = folder / "model.safetensors"
    if kind == "no tokenizer files":
        for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            (folder / name).unlink(missing_ok=True)
    elif kind == "no weights":
        weights.unlink()
    elif kind == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif kind == "empty folder":
        shutil.rmtree(folder)
        folder.mkdir()
    elif kind in ("a wider config", "a deeper config"):
        config = json.loads((folder / "config.json").read_text())
        config.update({"hidden_size": 64, "intermediate_size": 128} if kind == "a wider config"
                      else {"num_hidden_layers": 3})
        (folder / "config.json").write_text(json.dumps(config))
    elif kind == "a planted pickle":
        weights.unlink()
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(tmp_path / "ran")))
    return folder


@pytest.mark.parametrize("command", ["probe", "train"])
@pytest.mark.parametrize("kind", ["no tokenizer files", "no weights", "truncated weights", "empty folder",
                                  "a wider config", "a deeper config", "a planted pickle"])
def test_a_model_folder_that_cannot_be_used_is_refused_before_work(tmp_path, tiny_bert_dir, tiny_cache, data_dir,
                                                                   capsys, command, kind):
    folder = _model_folder(kind, tiny_bert_dir, tmp_path)
    argv = (["probe", "run", "--model", str(folder), "--limit", "20", "--data-dir", str(data_dir), "--out",
             str(tmp_path / "r.json")] if command == "probe"
            else ["train", "--model", str(folder), "--data", str(tiny_cache), "--data-dir", str(data_dir),
                  "--out", str(tmp_path / "run"), *SETTINGS])
    assert main(argv) == 2
    assert str(folder) in one_line_error(capsys)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "r.json").exists()
    assert not (tmp_path / "run" / "last").exists()


FACTORIES = {  # a user's factory module, and what the one line says
    "import raises": ("raise RuntimeError('no GPU here')\n", "importing planted_factory failed: RuntimeError"),
    "does not parse": ("def make(:\n", "importing planted_factory failed: SyntaxError"),
    "factory raises": ("def make():\n    raise ValueError('bad config')\n", "make() failed: ValueError: bad config"),
    "needs an argument": ("def make(path):\n    return path\n", "make() failed: TypeError"),
    "encode raises": ("class E:\n    def encode(self, s):\n        raise KeyError('x')\n\n"
                      "def make():\n    return E()\n", "encode() failed: KeyError"),
    "one NaN vector": ("import numpy as np\nclass E:\n    def encode(self, s):\n        v = np.ones((len(s), 4))\n"
                       "        v[len(s) // 2] = np.nan\n        return v\n\ndef make():\n    return E()\n",
                       "holds NaN or infinite values"),
    "empty vectors": ("import numpy as np\nclass E:\n    def encode(self, s):\n        return np.zeros((len(s), 0))\n\n"
                      "def make():\n    return E()\n", "expected ("),
    "too few rows": ("import numpy as np\nclass E:\n    def encode(self, s):\n        return np.ones((1, 4))\n\n"
                     "def make():\n    return E()\n", "expected ("),
    "a 1-D array": ("import numpy as np\nclass E:\n    def encode(self, s):\n        return np.ones(4)\n\n"
                    "def make():\n    return E()\n", "returned an array of shape (4,)"),
}


@pytest.mark.parametrize("case", FACTORIES)
def test_a_factory_encoder_that_fails_or_gives_bad_vectors_is_one_line(tmp_path, data_dir, monkeypatch, capsys,
                                                                       case):
    code, message = FACTORIES[case]
    module = f"planted_factory_{abs(hash(case))}"
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["probe", "run", "--model", f"{module}:make", "--limit", "20", "--data-dir", str(data_dir),
                 "--out", str(tmp_path / "r.json")]) == 2
    assert message.replace("planted_factory", module) in one_line_error(capsys)
    assert not (tmp_path / "r.json").exists()  # no scores of null, no file


@pytest.mark.slow
def test_a_sweep_reuses_only_the_results_of_the_same_run(tiny_bert_dir, tiny_cache, data_dir, tmp_path, capsys,
                                                          caplog):
    base = ["sweep", "--methods", "simcse", "--seeds", "1", "--data", str(tiny_cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--sts-limit", "20", "--out", str(tmp_path / "s"), "--set", "training.batch_size=16",
            "--set", "training.max_length=24", "--set", "training.eval_steps=2"]
    assert main([*base, "--model", str(tiny_bert_dir), "--set", "training.max_steps=2"]) == 0
    capsys.readouterr()
    # another setting, another model: the run folder holds another run, and the sweep says so
    assert main([*base, "--model", str(tiny_bert_dir), "--set", "training.max_steps=3"]) == 2
    assert "a different run: training.max_steps (3 now, 2 in this OUT)" in one_line_error(capsys)
    other = tmp_path / "other-model"
    shutil.copytree(tiny_bert_dir, other)
    assert main([*base, "--model", str(other), "--set", "training.max_steps=2"]) == 2
    assert "a different run: base_model" in one_line_error(capsys)
    # a damaged result of the same run is scored again, with a warning
    result = tmp_path / "s" / "results" / "simcse-seed0.json"
    before = json.loads(result.read_text())
    result.write_text(result.read_text()[:40])
    assert main([*base, "--model", str(tiny_bert_dir), "--set", "training.max_steps=2"]) == 0
    assert "scoring the run again" in caplog.text and json.loads(result.read_text()) == before


def test_methods_whose_runs_would_share_a_folder_are_refused(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    for path in (tmp_path / "a" / "simcse.yaml", tmp_path / "a_simcse.yaml"):
        path.write_text("extends: simcse\nmethod: x\n")
    methods = f"{tmp_path / 'a' / 'simcse.yaml'},{tmp_path / 'a_simcse.yaml'}"
    assert main(["sweep", "--methods", methods, "--seeds", "1", "--out", str(tmp_path / "s")]) == 2
    assert "would share the run folder" in one_line_error(capsys)
    assert main(["sweep", "--methods", "simcse,simcse", "--seeds", "1", "--out", str(tmp_path / "s")]) == 2
    assert "would share the run folder" in one_line_error(capsys)


def _payload_spec(path: Path) -> str:
    return json.loads(path.read_text())["model"]["spec"]


@pytest.mark.slow
def test_probe_outputs_are_written_as_a_set_whatever_the_moment_of_a_kill(tmp_path, data_dir, monkeypatch):
    from cselab.probes import runner

    out = tmp_path / "r.json"
    argv = ["probe", "run", "--suite", "sts", "--limit", "20", "--data-dir", str(data_dir), "--out", str(out)]
    assert main(["probe", "run", "--model", "bow", *argv[2:]]) == 0
    old = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_replace, moves, journal = os.replace, [], tmp_path / ".r.json.moving"

    def replace_then_die(source, target):  # killed once the first file of the new set has moved into place
        if moves:
            raise Killed
        if journal.exists():
            moves.append(target)
        real_replace(source, target)

    for moment in ("while writing", "while moving"):
        if moment == "while writing":
            monkeypatch.setattr(runner, "write_text_atomic", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        else:
            monkeypatch.undo()
            monkeypatch.setattr(runner.os, "replace", replace_then_die)
        with pytest.raises(Killed):
            main(["probe", "run", "--model", "tfidf", *argv[2:]])
        monkeypatch.undo()
        runner.finish_outputs(out)  # what the next probe run at this --out does first
        if moment == "while writing":  # no journal yet: the previous set, untouched
            assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old
        else:  # the journal was written: the new set, completed
            assert _payload_spec(out) == "tfidf" and "tfidf" in (tmp_path / "r.md").read_text()
            assert "bow" not in (tmp_path / "r.md").read_text()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _disk_full(*args, **kwargs):
    raise OSError(28, "No space left on device", str(args[0]) if args else None)


@pytest.mark.parametrize("stage", ["augment", "probe"])
def test_a_full_disk_is_one_line_and_nothing_is_lost(tmp_path, data_dir, monkeypatch, capsys, stage):
    if stage == "augment":
        from cselab.augment import cache

        monkeypatch.setattr(cache, "_write_chunk", _disk_full)
        (tmp_path / "c.txt").write_text("A man plays the guitar.\nThe cat sat on the mat.\n")
        assert main(["augment", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "cache"),
                     "--set", "backend=none"]) == 2
        assert "no space left on the device" in one_line_error(capsys)
        return
    import tempfile

    from cselab.probes import runner

    out, spare = tmp_path / "out", tmp_path / "tmp"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))  # where the scores go when --out cannot take them
    real = runner.write_json_atomic

    def full_under_out(path, payload):
        return _disk_full(path) if Path(path).is_relative_to(out) else real(path, payload)

    monkeypatch.setattr(runner, "write_json_atomic", full_under_out)
    assert main(["probe", "run", "--model", "bow", "--limit", "20", "--data-dir", str(data_dir), "--out",
                 str(out / "r.json")]) == 2
    error = one_line_error(capsys)
    assert f"--out {out / 'r.json'}: cannot be written (No space left on device)" in error
    rescued = Path(error.split("written to ")[1].split(" (and beside it)")[0])
    assert rescued.is_relative_to(spare) and rescued.with_suffix(".md").exists()
    assert json.loads(rescued.read_text())["sts"]["avg"] is not None
    assert not (out / "r.json").exists() and not list(out.glob(".*"))


def test_degenerate_evaluation_sets_are_named(tmp_path, tiny_bert_dir, tiny_cache, data_dir, capsys):
    root = tmp_path / "data"
    stsb = root / "senteval" / "downstream" / "STS" / "STSBenchmark"
    stsb.mkdir(parents=True)
    for name in ("sts-train.csv", "sts-dev.csv", "sts-test.csv"):
        shutil.copy(data_dir / "senteval" / "downstream" / "STS" / "STSBenchmark" / name, stsb / name)
    (stsb / "sts-test.csv").write_text("")
    assert main(["probe", "run", "--model", "bow", "--tasks", "stsb", "--data-dir", str(root), "--out",
                 str(tmp_path / "r.json")]) == 2
    assert f"{stsb / 'sts-test.csv'}: 0 scored pair(s)" in one_line_error(capsys)
    with pytest.raises(SystemExit) as refused:  # argparse: a limit of one pair
        main(train_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "run")[:-len(SETTINGS)] + ["--eval-limit", "1"])
    assert refused.value.code == 2 and "expected a whole number >= 2" in capsys.readouterr().err


def test_a_cache_that_lacks_what_the_method_reads_is_refused_before_training(tmp_path, tiny_bert_dir, tiny_cache,
                                                                            data_dir, capsys):
    (tmp_path / "m.yaml").write_text("extends: simcse\nviews:\n  positive: {column: nosuch}\n")
    argv = ["train", "--model", str(tiny_bert_dir), "--data-dir", str(data_dir), "--out", str(tmp_path / "run"),
            *SETTINGS]
    assert main([*argv, "--method", str(tmp_path / "m.yaml"), "--data", str(tiny_cache)]) == 2
    assert "the cache has no column 'nosuch'" in one_line_error(capsys)
    (tmp_path / "c.txt").write_text("".join(f"Sentence number {i} is here.\n" for i in range(40)))
    assert main(["augment", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "cache"),
                 "--set", "backend=none"]) == 0
    capsys.readouterr()
    assert main([*argv, "--method", "simcse-bt", "--data", str(tmp_path / "cache")]) == 2
    assert "no row of the cache has a paraphrase" in one_line_error(capsys)
    assert not (tmp_path / "run" / "last").exists()


@pytest.mark.parametrize("command", ["train", "augment", "sweep", "probe"])
def test_an_out_that_is_a_file_or_inside_one_is_refused_before_work(tmp_path, tiny_bert_dir, data_dir, capsys,
                                                                     command):
    file = tmp_path / "a-file"
    file.write_text("x")
    argv = {"train": ["train", "--model", str(tiny_bert_dir), *SETTINGS],
            "augment": ["augment", "--corpus", str(file), "--set", "backend=none"],
            "sweep": ["sweep", "--methods", "simcse", "--seeds", "1", "--model", str(tiny_bert_dir)],
            "probe": ["probe", "build-probing", "--corpus", str(file)]}[command]
    for out, message in ((file, "a file, where a folder goes"), (file / "x", "a-file is a file, not a folder")):
        assert main([*argv, "--out", str(out)]) == 2
        assert message in one_line_error(capsys)
    assert file.read_text() == "x"


def test_a_lock_that_is_a_folder_and_a_utf16_corpus_are_named(finished_run, tmp_path, tiny_bert_dir, tiny_cache,
                                                              data_dir, capsys):
    out = copy_of(finished_run, tmp_path)
    (out / ".lock").mkdir()
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out)) == 2
    assert ".lock: a folder where the run's lock file goes" in one_line_error(capsys)
    corpus = tmp_path / "utf16.txt"
    corpus.write_text("A man plays the guitar.\nThe cat sat on the mat.\n", encoding="utf-16")
    assert main(["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--set", "backend=none"]) == 2
    assert "control_character" in one_line_error(capsys)  # each line skipped with its reason, none kept


def test_a_checkpoint_whose_settings_have_the_wrong_type_is_named(finished_run, tmp_path, data_dir, capsys):
    model = tmp_path / "model"
    shutil.copytree(finished_run / "full" / "best", model)
    info = json.loads((model / "cselab.json").read_text())
    (model / "cselab.json").write_text(json.dumps({**info, "max_length": "32"}))
    assert main(["probe", "run", "--model", str(model), "--limit", "20", "--data-dir", str(data_dir), "--out",
                 str(tmp_path / "r.json")]) == 2
    assert "cselab.json: max_length: '32' is not valid; expected a whole number >= 1" in one_line_error(capsys)


# --- Classes of faults (issue 34): lengths, numbers, outputs, permissions, full disks, concurrent writers ----------

def _tokens_beyond(data_dir, tmp_path, tiny_bert_dir, tiny_cache, case):
    """(argv, the one line's words) of a length beyond what a model takes."""
    if case == "training.max_length":
        return ([*train_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "run"), "--set",
                 "training.max_length=200"], "training.max_length: 200 is more than the 128 tokens")
    return (["probe", "run", "--model", str(tiny_bert_dir), "--max-length", "200", "--limit", "20", "--data-dir",
             str(data_dir), "--out", str(tmp_path / "r.json")], "max_length 200: more than the 128 tokens")


@pytest.mark.parametrize("case", ["training.max_length", "probe --max-length"])
def test_a_length_beyond_the_models_positions_is_refused_before_work(tmp_path, tiny_bert_dir, tiny_cache, data_dir,
                                                                      capsys, case):
    argv, message = _tokens_beyond(data_dir, tmp_path, tiny_bert_dir, tiny_cache, case)
    assert main(argv) == 2
    assert message in one_line_error(capsys)  # the tiny BERT has 128 position embeddings
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "run" / "run.json").exists()


@pytest.mark.parametrize("command", ["augment", "build-probing"])
def test_a_line_longer_than_spacys_max_length_is_skipped_with_its_reason(tmp_path, capsys, command):
    corpus = tmp_path / "c.txt"
    long_line = "word " * 200_001  # 1,000,005 characters: spaCy refuses more than 1,000,000
    corpus.write_text("A man plays the guitar.\n" + long_line + "\nThe cat sat on the mat.\n")
    if command == "augment":
        assert main(["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--set", "backend=none",
                     "--set", "max_chars=2000000"]) == 0
        (folder,) = (tmp_path / "cache").iterdir()
        rows = load_cache(folder).to_dict()
        assert rows["negation_reason"][1] == "too_long_to_parse" and rows["negation"][0] is not None
    else:
        assert main(["probe", "build-probing", "--corpus", str(corpus), "--out", str(tmp_path / "probing")]) == 0
        assert json.loads((tmp_path / "probing" / "probing.json").read_text())["sentences"] == 3


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--set", "training.seed=-1", "--show-config"], "training.seed: -1 is out of range"),
    (["train", "--set", "training.seed=4294967296", "--show-config"], "training.seed: 4294967296 is out of range"),
    (["probe", "compare", "a.json", "--seed", "-1"], "argument --seed: -1 is out of range"),
    (["probe", "run", "--model", "bow", "--seed", "4294967296"], "argument --seed: 4294967296 is out of range"),
    (["probe", "compare", "a.json", "--resamples", "1000000000"], "argument --resamples: 1000000000 is out of range"),
    (["sweep", "--methods", "simcse", "--seeds", "1000000000", "--out", "x"], "1000000000 seeds, more than the 1000"),
    (["sweep", "--methods", "simcse", "--seeds", "0,-1", "--out", "x"], "seed -1 is out of range"),
])
def test_negative_huge_and_unbounded_numbers_are_refused_at_the_option(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_info:  # argparse's own refusal
        code = exit_info.code
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e30"])
def test_a_cache_size_that_is_no_finite_positive_number_is_one_line(value, tiny_bert_dir, data_dir, tmp_path,
                                                                     monkeypatch, capsys):
    monkeypatch.setenv("CSELAB_CACHE_MAX_MB", value)
    assert main(["probe", "run", "--model", str(tiny_bert_dir), "--limit", "20", "--data-dir", str(data_dir),
                 "--out", str(tmp_path / "r.json")]) == 2
    assert f"CSELAB_CACHE_MAX_MB={value!r}: expected a number of megabytes above 0" in one_line_error(capsys)


def _namespace(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``script`` (sh) run as root of a user and mount namespace of its own, where it may mount a small or read-only
    file system; the test is skipped on a machine that does not allow that."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("this machine does not let a user mount a file system of its own (unshare -rm)")
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_a_disk_that_fills_during_a_save_is_one_line_leaves_no_temporary_and_the_rerun_finishes(
        tmp_path, tiny_bert_dir, tiny_cache, data_dir):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    command = shlex.join([sys.executable, "-m", "cselab.cli", *train_args(tiny_bert_dir, tiny_cache, data_dir,
                                                                             mount / "run")])
    # 48 MiB, 38 of them taken: the first save (best 4.7 MiB, then last: weights 4, optimizer 8) runs out of room;
    # without the filler, the run's two saves (at most about 34 MiB at once) fit
    script = (f'mount -t tmpfs -o size=48m none "$1" || exit 99\nhead -c 38m /dev/zero > "$1/filler"\n'
              f'{command} 2> "$2/first.err"; echo $? > "$2/first.code"; ls -a "$1/run" > "$2/listing"\n'
              f'rm "$1/filler"\n{command} 2> "$2/second.err"; echo $? > "$2/second.code"\n'
              f'cp "$1/run/last/trainer_state.json" "$2/state.json"')
    ran = _namespace(script, str(mount), str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    first = (tmp_path / "first.err").read_text()
    errors = [line for line in first.replace("\r", "\n").splitlines() if line.startswith("error: ")]
    assert (tmp_path / "first.code").read_text().strip() == "2" and "Traceback" not in first, first[-2000:]
    assert len(errors) == 1 and "no space left on the device to save the run" in errors[0]
    listing = (tmp_path / "listing").read_text().split()
    assert "last.tmp" not in listing and "best.tmp" not in listing and "best" in listing
    assert (tmp_path / "second.code").read_text().strip() == "0", (tmp_path / "second.err").read_text()[-2000:]
    assert json.loads((tmp_path / "state.json").read_text())["step"] == 4


@pytest.mark.slow
def test_an_out_on_a_read_only_file_system_is_refused_before_work(tmp_path, data_dir):
    mount = tmp_path / "read-only"
    mount.mkdir()
    command = shlex.join([sys.executable, "-m", "cselab.cli", "probe", "run", "--model", "bow", "--limit", "20",
                          "--data-dir", str(data_dir), "--out", str(mount / "results" / "r.json")])
    ran = _namespace(f'mount -t tmpfs -o ro,size=1m none "$1" || exit 99\nexec {command}', str(mount), timeout=120)
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error: ")]
    assert ran.returncode == 2 and len(errors) == 1 and "Traceback" not in ran.stderr, ran.stderr[-2000:]
    assert f"--out {mount / 'results' / 'r.json'}: {mount} cannot be written (a read-only file system)" in errors[0]


def test_probe_compare_never_writes_over_an_input_and_checks_its_out_before_work(results_json, tmp_path, capsys):
    copy = tmp_path / "b.json"
    shutil.copy(results_json, copy)
    shutil.copy(results_json.with_suffix(".items.npz"), tmp_path / "b.items.npz")
    before = copy.read_bytes()
    for out, message in ((copy, f"--out {copy}: is {copy}, a file this command reads"),
                         (tmp_path / "b.items.npz", "a file this command reads"),
                         (copy / "x.md", "b.json is a file, not a folder")):
        started = time.perf_counter()
        assert main(["probe", "compare", str(results_json), str(copy), "--out", str(out)]) == 2
        assert message in one_line_error(capsys) and time.perf_counter() - started < 5
    assert copy.read_bytes() == before


@pytest.mark.parametrize("field", [("sts", "avg"), ("sts", "STS12", "all")])
def test_a_results_file_whose_figure_is_text_is_refused_by_compare_in_one_line(results_json, tmp_path, capsys,
                                                                                  field):
    """A figure a results JSON holds as a string is named, not printed as a figure (it was, once reports were
    blocks: the regression the audit found)."""
    payload = json.loads(results_json.read_text())
    node = payload
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = "79.5"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(payload))
    assert main(["probe", "compare", str(results_json), str(bad)]) == 2
    error = one_line_error(capsys)
    assert f"{bad}: not a results JSON of `probe run`" in error and "a figure must be a number" in error


@pytest.mark.parametrize("line_break", ["\r", "\n", "\u2028"])
def test_a_label_with_a_line_break_stays_in_its_row(results_json, tmp_path, capsys, line_break):
    other = tmp_path / "b.json"
    shutil.copy(results_json, other)
    shutil.copy(results_json.with_suffix(".items.npz"), tmp_path / results_json.with_suffix(".items.npz").name)
    assert main(["probe", "compare", str(results_json), str(other), "--label", f"1=first{line_break}run"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| first run")]
    assert rows and all(line.endswith("|") for line in rows) and "first\r" not in out


@pytest.fixture
def unreadable(monkeypatch):
    """Makes a file unreadable: its mode 000, or, for root (whom no mode stops), the error the system would give
    when anything opens it."""
    import builtins
    import io

    def make(path: Path) -> Path:
        if os.geteuid() != 0:
            path.chmod(0)
            return path
        real = builtins.open

        def refused(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and Path(file).resolve() == path.resolve():
                raise PermissionError(13, "Permission denied", str(file))
            return real(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", refused)
        monkeypatch.setattr(io, "open", refused)
        return path

    return make


@pytest.mark.parametrize("command", ["augment", "train", "probe run tfidf", "build-probing"])
def test_a_corpus_without_read_permission_is_one_line_naming_it(tmp_path, tiny_bert_dir, data_dir, capsys,
                                                                unreadable, command):
    corpus = unreadable(write_corpus(tmp_path / "corpus.txt", 40))
    argv = {"augment": ["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--set", "backend=none"],
            "train": ["train", "--model", str(tiny_bert_dir), "--data", str(corpus), "--data-dir", str(data_dir),
                      "--out", str(tmp_path / "run"), *SETTINGS],
            "probe run tfidf": ["probe", "run", "--model", f"tfidf:{corpus}", "--limit", "20", "--data-dir",
                                str(data_dir), "--out", str(tmp_path / "r.json")],
            "build-probing": ["probe", "build-probing", "--corpus", str(corpus), "--out", str(tmp_path / "p")]}[command]
    assert main(argv) == 2
    error = one_line_error(capsys)
    assert str(corpus) in error and ("permission denied" in error.lower())


@pytest.mark.slow
def test_two_augment_runs_on_one_folder_at_once_end_in_one_cache(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 400)
    command = [sys.executable, "-m", "cselab.cli", "augment", "--corpus", str(corpus), "--out", str(tmp_path / "k"),
               "--set", "backend=none", "--set", "chunk_size=25"]
    runs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [(run.wait(timeout=600), run.stderr.read()) for run in runs]
    assert sorted(code for code, _ in results) in ([0, 0], [0, 2]), results
    for code, err in results:
        assert "Traceback" not in err, err[-2000:]
        if code == 2:
            assert "being written by pid" in err
    (folder,) = (tmp_path / "k").iterdir()
    fresh = build_cache(corpus, tmp_path / "fresh", AugmentConfig(backend="none", chunk_size=25), progress=False)
    assert load_cache(folder).to_dict() == load_cache(fresh).to_dict() and not list(folder.glob(".*"))


@pytest.mark.parametrize(("extra", "message"), [
    (["--seeds", "0,4294967296"], "seed 4294967296 is out of range"),
    (["--seeds", "1", "--grid", "training.lr=0.0001,abc"], "training.lr: 'abc' is not valid"),
    (["--seeds", "1", "--grid", "training.seed=1,2"], "--grid training.seed: a sweep's seeds are given with --seeds"),
    (["--seeds", "1", "--set", "training.seed=5"], "--set training.seed: a sweep's seeds are given with --seeds"),
])
def test_every_value_of_a_sweep_is_checked_before_anything_trains(tmp_path, tiny_bert_dir, tiny_cache, data_dir,
                                                                  capsys, extra, message):
    assert main(["sweep", "--methods", "simcse", *extra, "--model", str(tiny_bert_dir), "--data", str(tiny_cache),
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "s"), "--set", "training.max_steps=2"]) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "s" / "runs").exists()


@pytest.mark.slow
def test_a_sweep_scores_again_a_run_whose_test_file_was_corrected_since(tiny_bert_dir, tiny_cache, data_dir,
                                                                         tmp_path, caplog):
    root = tmp_path / "data"  # the real data root, STS-B's folder a copy of its own
    sts = root / "senteval" / "downstream" / "STS"
    sts.mkdir(parents=True)
    for entry in (data_dir / "senteval" / "downstream").iterdir():
        if entry.name != "STS":
            (sts.parent / entry.name).symlink_to(entry)
    for entry in (data_dir / "senteval" / "downstream" / "STS").iterdir():
        if entry.name == "STSBenchmark":
            shutil.copytree(entry, sts / entry.name)
        else:
            (sts / entry.name).symlink_to(entry)
    argv = ["sweep", "--methods", "simcse", "--seeds", "1", "--model", str(tiny_bert_dir), "--data", str(tiny_cache),
            "--data-dir", str(root), "--eval-limit", "20", "--sts-limit", "20", "--out", str(tmp_path / "s"),
            "--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.eval_steps=2",
            "--set", "training.max_steps=2"]
    assert main(argv) == 0
    result = tmp_path / "s" / "results" / "simcse-seed0.json"
    before = json.loads(result.read_text())
    assert "senteval/downstream/STS/STSBenchmark/sts-test.csv" in before["made_by"]["data"]
    test_file = sts / "STSBenchmark" / "sts-test.csv"
    lines = test_file.read_text().splitlines(keepends=True)
    fields = lines[0].split("\t")
    fields[4] = "0.000" if fields[4] != "0.000" else "5.000"  # the first pair's gold score, corrected in place
    test_file.write_text("\t".join(fields) + "".join(lines[1:]))
    assert main(argv) == 0
    assert "scored from data files that changed since (senteval/downstream/STS/STSBenchmark/sts-test.csv)" in \
        caplog.text
    after = json.loads(result.read_text())
    assert after["scores"]["STS-B"] != before["scores"]["STS-B"]
    assert after["scores"]["STS12"] == before["scores"]["STS12"]  # the same checkpoint, scored again


@pytest.mark.parametrize("command", ["train into its model", "train into its cache", "probe run over its test set"])
def test_an_out_that_names_what_the_command_reads_is_refused_before_work(tmp_path, tiny_bert_dir, tiny_cache,
                                                                          data_dir, capsys, command):
    model, cache = tmp_path / "model", tmp_path / "cache"
    shutil.copytree(tiny_bert_dir, model)
    shutil.copytree(tiny_cache, cache)
    before = {p: p.read_bytes() for folder in (model, cache) for p in folder.rglob("*") if p.is_file()}
    if command.startswith("train"):
        out = model / "run" if command.endswith("model") else cache
        argv = train_args(model, cache, data_dir, out)
        message = f"--out {out}: " + ("inside" if command.endswith("model") else "is")
    else:
        testset = tmp_path / "set.json"
        testset.write_text('{"source": "A man plays.", "paraphrase": "A man is playing.", "negation": "No man plays."}'
                           '\n')
        argv = ["probe", "run", "--model", "bow", "--suite", "bias", "--testset", str(testset), "--limit", "20",
                "--data-dir", str(data_dir), "--out", str(testset)]
        before[testset], message = testset.read_bytes(), f"--out {testset}: is {testset}, a file this command reads"
    assert main(argv) == 2
    assert message in one_line_error(capsys)
    assert {p: p.read_bytes() for p in before} == before


def test_an_augment_build_that_another_live_process_holds_is_refused_naming_it(tmp_path, capsys, caplog):
    corpus = write_corpus(tmp_path / "c.txt", 60)
    argv = ["augment", "--corpus", str(corpus), "--out", str(tmp_path / "k"), "--set", "backend=none"]
    assert main(argv) == 0
    (folder,) = (tmp_path / "k").iterdir()
    (folder / "manifest.json").unlink()  # unfinished again
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lock = folder / ".lock-shard-0-of-1"
    try:
        lock.write_text(json.dumps({"pid": holder.pid, "host": os.uname().nodename, "process_start": None,
                                    "started": "2026-11-25T10:00:00+00:00"}))
        assert main(argv) == 2
        assert f"{folder}: being written by pid {holder.pid}" in one_line_error(capsys)
        assert not (folder / "manifest.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert main(argv) == 0 and "taking over the lock" in caplog.text  # its holder is gone
    assert (folder / "manifest.json").exists() and not lock.exists()


# --- the surfaces added since the last audit, class by class (issue 46) ----------------------------------------------

def _table_train(tmp_path, tiny_bert_dir, data_dir, name: str, content: bytes, *extra: str) -> list[str]:
    table = tmp_path / name
    table.write_bytes(content)
    return ["train", "--method", "simcse", "--model", str(tiny_bert_dir), "--data", str(table), "--out",
            str(tmp_path / "run"), "--data-dir", str(data_dir), "--eval-limit", "20", *SETTINGS, *extra]


TEXTS = "".join(f"The river number {i} flows to the sea.\n" for i in range(40)).encode()
TABLES = {  # name -> (file, content, what the one line says)
    "a header that repeats a column": ("t.csv", b"text,positive,text\n" + b"a,b,c\n" * 40,
                                       "t.csv:1: the header repeats the column name(s) 'text'"),
    "a cell over the csv module's limit": ("t.csv", b"text\n" + b"x" * 200_000 + b"\n" + TEXTS,
                                           "t.csv:2: not a readable CSV row (field larger than field limit"),
    "a .parquet that is not parquet": ("t.parquet", b"text\n" + TEXTS, "t.parquet: not a readable parquet file"),
}


@pytest.mark.parametrize("case", TABLES)
def test_a_table_that_cannot_be_read_as_its_header_says_is_one_line(tmp_path, tiny_bert_dir, data_dir, capsys, case):
    name, content, message = TABLES[case]
    assert main(_table_train(tmp_path, tiny_bert_dir, data_dir, name, content)) == 2
    assert message in one_line_error(capsys) and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_hard_negatives_on_some_rows_only_train_to_the_end(tmp_path, tiny_bert_dir, data_dir):
    """Most batches of 4 hold no hard negative: a step without one weighs none (it crashed, and so did every
    retry)."""
    rows = [{"text": f"Sentence {i} is here.", "positive": f"Sentence {i} is there.",
             "hard_negative": "No sentence is anywhere." if i == 0 else ""} for i in range(32)]
    content = "".join(json.dumps(row) + "\n" for row in rows).encode()
    argv = _table_train(tmp_path, tiny_bert_dir, data_dir, "t.jsonl", content, "--method", "simcse-sup", "--set",
                        "losses.info_nce.hard_negative_weight=1.0", "--set", "training.batch_size=4",
                        "--set", "training.max_steps=8", "--set", "training.eval_steps=8")
    assert main(argv) == 0
    assert json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())["step"] == 8


def test_an_epoch_no_duplicates_cannot_fill_is_refused_before_the_first_step(tmp_path, tiny_bert_dir, data_dir,
                                                                             capsys):
    """Texts A, A, B, C in batches of 2: an epoch whose order ends with the two A's cannot be filled. A seed whose
    first epoch fills and whose second does not: the run is refused before it trains (it trained the first epoch,
    then failed at the second, and every retry failed there again)."""
    from cselab.train.batches import EpochOrder, NoDuplicateBatches

    texts = [("A",), ("A",), ("B",), ("C",)]

    def fills(seed: int, epoch: int) -> bool:
        order = EpochOrder(4, seed)
        order.set_epoch(epoch)
        try:
            list(NoDuplicateBatches(order, 2, texts))
        except Exception:
            return False
        return True
    seed = next(s for s in range(200) if fills(s, 0) and not fills(s, 1))
    content = "".join(json.dumps({"text": t}) + "\n" for (t,) in texts).encode()
    argv = _table_train(tmp_path, tiny_bert_dir, data_dir, "t.jsonl", content, "--set", "training.batch_size=2",
                        "--set", "training.sampler=no_duplicates", "--set", f"training.seed={seed}",
                        "--set", "training.epochs=2", "--set", "training.max_steps=4")
    assert main(argv) == 2
    assert "no_duplicates: epoch 1 fills only" in one_line_error(capsys) and not (tmp_path / "run").exists()


def _mteb_result(tmp_path, data_dir, folder=None) -> Path:
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    task = f"STSBenchmark={folder}" if folder else "CselabSTSB"
    assert main(["probe", "run", "--model", "bow", "--suite", "mteb", "--mteb-tasks", task, "--limit", "20",
                 "--data-dir", str(data_dir), "--out", str(out)]) == 0
    return out


MTEB_FOLDERS = {  # test.jsonl's rows -> the one line
    "no score column": ([{"sentence1": "a b", "sentence2": "a c"}] * 3, "split 'test' has no column 'score'"),
    "string scores": ([{"sentence1": "a b", "sentence2": "a c", "score": "high"}] * 3,
                      "split 'test', row 1: score 'high' is not a finite number"),
    "a single pair": ([{"sentence1": "a b", "sentence2": "a c", "score": 3.0}], "holds 1 pair; a correlation needs"),
}


@pytest.mark.parametrize("case", MTEB_FOLDERS)
def test_an_mteb_folder_mteb_cannot_score_is_one_line(tmp_path, data_dir, capsys, case):
    pytest.importorskip("mteb")
    rows, message = MTEB_FOLDERS[case]
    (tmp_path / "stsb").mkdir()
    (tmp_path / "stsb" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["probe", "run", "--model", "bow", "--suite", "mteb", "--mteb-tasks",
                 f"STSBenchmark={tmp_path / 'stsb'}", "--data-dir", str(data_dir),
                 "--out", str(tmp_path / "r.json")]) == 2
    assert message in one_line_error(capsys)


def test_an_mteb_folder_edited_between_two_runs_is_not_paired_item_by_item(tmp_path, data_dir, capsys):
    pytest.importorskip("mteb")
    folder = tmp_path / "stsb"
    folder.mkdir()
    rows = [{"sentence1": f"a man plays {i}", "sentence2": f"a man sings {i % 7}", "score": float(i % 5)}
            for i in range(30)]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = _mteb_result(tmp_path, data_dir, folder)
    rows[0]["score"] = 4.5  # edited in place: the same items, another gold score
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    second = _mteb_result(tmp_path, data_dir, folder)
    capsys.readouterr()
    assert main(["probe", "compare", str(first), str(second), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "were not scored on the same items of the mteb suite" in printed and "dataset:STSBenchmark" in printed


def _exported(tmp_path, results: Path, edit) -> Path:
    payload = json.loads(results.read_text())
    edit(payload["mteb"])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(payload))
    return path


def _rename_task(section):
    section["tasks"]["../../../escaped"] = section["tasks"].pop("CselabSTSB")


EXPORTS = {  # how the results JSON is damaged -> the one line
    "a revision that climbs out of OUT": (lambda s: s["model_meta"].update(revision="../../../../escaped"),
                                          "mteb.model_meta.revision '../../../../escaped': not a name"),
    "a task name that climbs out of OUT": (_rename_task, "the task name '../../../escaped': not a name"),
    "a model name that climbs out of OUT": (lambda s: s["model_meta"].update(name="../x"),
                                            "the model name's part '..': not a name"),
    "no model_meta": (lambda s: s.pop("model_meta"), "mteb.model_meta is missing or not a mapping"),
    "a task result that is no mapping": (lambda s: s["tasks"].update(CselabSTSB=[1, 2]),
                                         "mteb.tasks.CselabSTSB: expected a mapping"),
}


@pytest.mark.parametrize("case", EXPORTS)
def test_export_mteb_refuses_what_would_write_outside_out_or_cannot_be_written(tmp_path, data_dir, capsys, case):
    pytest.importorskip("mteb")
    edit, message = EXPORTS[case]
    results = _exported(tmp_path, _mteb_result(tmp_path, data_dir), edit)
    out = tmp_path / "deep" / "er" / "export"
    before = {path for path in tmp_path.rglob("*")}
    assert main(["probe", "export-mteb", str(results), str(out)]) == 2
    assert message in one_line_error(capsys)
    assert {path for path in tmp_path.rglob("*")} == before  # nothing written, inside OUT or out of it


@pytest.mark.slow
def test_export_mteb_to_an_out_that_is_a_file_or_read_only_is_one_line(tmp_path, data_dir, capsys):
    pytest.importorskip("mteb")
    results = _mteb_result(tmp_path, data_dir)
    (tmp_path / "file").write_text("x")
    assert main(["probe", "export-mteb", str(results), str(tmp_path / "file")]) == 2
    assert "OUT " + str(tmp_path / "file") + ": a file, where a folder goes" in one_line_error(capsys)
    mount = tmp_path / "read-only"
    mount.mkdir()
    command = shlex.join([sys.executable, "-m", "cselab.cli", "probe", "export-mteb", str(results), str(mount / "x")])
    ran = _namespace(f'mount -t tmpfs -o ro,size=1m none "$1" || exit 99\nexec {command}', str(mount), timeout=120)
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error: ")]
    assert ran.returncode == 2 and len(errors) == 1 and "Traceback" not in ran.stderr, ran.stderr[-2000:]
    assert "cannot be written (a read-only file system)" in errors[0]


def test_a_progress_interval_past_what_a_timer_can_wait_is_one_line(monkeypatch, data_dir, tmp_path, capsys):
    monkeypatch.setenv("CSELAB_PROGRESS_EVERY", "1e300")
    assert main(["probe", "run", "--model", "bow", "--limit", "20", "--data-dir", str(data_dir),
                 "--out", str(tmp_path / "r.json")]) == 2
    assert "CSELAB_PROGRESS_EVERY='1e300': expected a number of seconds above 0 and at most" in one_line_error(capsys)


@pytest.mark.parametrize(("config", "environment", "outcome"), [
    ("- data_dir: /somewhere\n", False, "expected a mapping of settings (data_dir: DIR), got a list"),
    ("data_dir: [unclosed\n", True, None),  # the environment comes first: the broken file is never read
])
def test_the_user_config_is_read_in_its_documented_place_in_the_order(tmp_path, monkeypatch, data_dir, capsys,
                                                                       config, environment, outcome):
    (tmp_path / "config" / "cselab").mkdir(parents=True)
    (tmp_path / "config" / "cselab" / "config.yaml").write_text(config)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    if environment:
        monkeypatch.setenv("CSELAB_DATA_DIR", str(data_dir))
    else:
        monkeypatch.delenv("CSELAB_DATA_DIR", raising=False)
    code = main(["data", "list"])
    if outcome is None:
        assert code == 0 and "stsb" in capsys.readouterr().out
    else:
        assert code == 2 and outcome in one_line_error(capsys)


@pytest.mark.slow
def test_a_run_refused_for_a_folder_without_weights_runs_once_they_are_there(tmp_path, tiny_bert_dir, tiny_cache,
                                                                             data_dir, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    weights = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").unlink()
    argv = train_args(model, tiny_cache, data_dir, tmp_path / "run")
    assert main(argv) == 2
    one_line_error(capsys)
    assert not (tmp_path / "run" / "run.json").exists() and not (tmp_path / "run" / "config.yaml").exists()
    (model / "model.safetensors").write_bytes(weights)
    assert main(argv) == 0  # not "another run"


def test_probe_compare_labels_that_would_be_lost_or_break_a_table(results_json, tmp_path, capsys):
    copy = tmp_path / "b.json"
    shutil.copy(results_json, copy)
    shutil.copy(results_json.with_suffix(".items.npz"), tmp_path / results_json.with_suffix(".items.npz").name)
    assert main(["probe", "compare", str(results_json), str(copy), "--label", "1=first", "--label",
                 f"{results_json}=again"]) == 2
    assert "is labelled twice, by its file (again) and by its position 1 (first)" in one_line_error(capsys)
    assert main(["probe", "compare", str(results_json), str(copy), "--label", "1=a|b", "--label", "2=c"]) == 0
    printed = capsys.readouterr().out
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in printed.splitlines()
             if line.startswith("| a\\|b")]  # every table row of the label: the label whole, a figure beside it
    assert len(cells) >= 2 and all(row[0] == "a\\|b" and re.fullmatch(r"-?\d+\.\d+", row[1]) for row in cells), cells
    assert "{name}" not in printed and "{spec}" not in printed


def test_data_list_names_a_set_it_cannot_read_on_its_own_line(tmp_path, data_dir, capsys):
    root = tmp_path / "root"
    shutil.copytree(data_dir / "senteval", root / "senteval")
    shutil.copytree(data_dir / "wiki", root / "wiki")
    (root / "senteval" / "downstream" / "SICK" / "SICK_train.txt").write_bytes(b"\xff\xfe\x80 x\n")
    assert main(["data", "list", "--data-dir", str(root)]) == 0
    listing = capsys.readouterr().out.splitlines()
    table = next(line for line in listing if line.startswith("sick-entailment "))
    assert "not available" in table and "SICK_train.txt:1: not UTF-8 text" in table  # it ended the listing
    assert any(line.startswith("trec ") and "train" in line for line in listing)  # the sets after it still listed


@pytest.mark.slow
def test_a_broken_plugin_module_in_the_checkout_is_one_line(tmp_path):
    """A module that does not parse, dropped into a copy of the package's plug-in folder (the checkout itself is left
    alone: other test processes import it)."""
    import cselab

    shutil.copytree(Path(cselab.__file__).parent, tmp_path / "cselab", ignore=shutil.ignore_patterns("__pycache__"))
    broken = tmp_path / "cselab" / "train" / "plugins" / "zz_broken.py"
    broken.write_text("def broken(:\n")
    ran = subprocess.run([sys.executable, "-m", "cselab.cli", "train", "--show-config"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr[-2000:]
    # found when the first method is read (its name first), in one line naming the file and line
    assert ran.stderr.startswith("error: simcse: ") and len(ran.stderr.strip().splitlines()) == 1
    assert f"{broken}:1: the plug-in module cannot be imported (SyntaxError" in ran.stderr


@pytest.mark.parametrize("case", ["OUT/tensorboard is a file", "a tracker that refuses to start"])
def test_a_tracker_that_cannot_start_is_one_line_before_the_model_loads(tmp_path, tiny_bert_dir, tiny_cache,
                                                                        data_dir, monkeypatch, capsys, case):
    from cselab.train.run import setup

    loaded = []
    monkeypatch.setattr(setup, "build_encoder", lambda *a, **k: loaded.append(1))
    out = tmp_path / "run"
    if case == "OUT/tensorboard is a file":
        out.mkdir()
        (out / "tensorboard").write_text("x")
        message = "--report-to tensorboard: its folder " + str(out / "tensorboard") + ": a file, where a folder goes"
    else:
        from accelerate.tracking import TensorBoardTracker

        def refuse(self, *args, **kwargs):
            raise ValueError("tracking URI file:/x is not supported")
        monkeypatch.setattr(TensorBoardTracker, "store_init_configuration", refuse)
        message = "--report-to tensorboard: the tracker could not start (ValueError: tracking URI file:/x"
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, out, "--report-to", "tensorboard")) == 2
    assert message in one_line_error(capsys) and not loaded
    assert not (out / "run.json").exists()


def test_output_into_a_closed_pipe_ends_quietly():
    for argv in (["train", "--list-methods"], ["probe", "run", "--help"]):
        process = subprocess.Popen([sys.executable, "-m", "cselab.cli", *argv], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        process.stdout.close()  # the reader is gone before the command writes
        err = process.stderr.read().decode()
        assert process.wait(timeout=300) in (0, 141) and "Traceback" not in err and "Exception" not in err, err


def _fewer_rows(folder: Path, model_class, rows: int) -> Path:
    """The model in ``folder`` saved again with ``rows`` embedding rows (its tokenizer left as it is)."""
    config = model_class.config_class.from_pretrained(folder)
    config.vocab_size = rows
    model_class(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("case", ["a tokenizer past the embeddings", "a decoder's end token past them"])
@pytest.mark.parametrize("command", ["train", "probe"])
def test_a_tokenizer_whose_ids_pass_the_models_embeddings_is_refused_before_work(tmp_path, tiny_cache, data_dir,
                                                                                 capsys, case, command):
    """By class: every model cselab loads is checked against the tokenizer that feeds it (an IndexError deep in the
    forward pass before)."""
    from transformers import BertModel, LlamaModel

    from tests.conftest import save_tiny_bert, save_tiny_decoder

    if case == "a tokenizer past the embeddings":  # bert-base-uncased's 30,522 tokens, 1,000 rows
        folder = _fewer_rows(save_tiny_bert(tmp_path / "model", BertModel, hidden=32, layers=1), BertModel, 1000)
        expected = "ids reach 30521"
    else:  # the tiny Llama with an end token (its padding too) added to its tokenizer past the model's rows
        from transformers import AutoTokenizer

        folder = save_tiny_decoder(tmp_path / "model", "llama")
        tokenizer = AutoTokenizer.from_pretrained(folder)
        rows = len(tokenizer)
        tokenizer.add_special_tokens({"eos_token": "<|end|>"})
        tokenizer.save_pretrained(folder)
        folder = _fewer_rows(folder, LlamaModel, rows)
        expected = "'<|end|>'"
    argv = (train_args(folder, tiny_cache, data_dir, tmp_path / "run") if command == "train" else
            ["probe", "run", "--model", str(folder), "--pooler", "avg", "--suite", "sts", "--limit", "10",
             "--data-dir", str(data_dir), "--no-cache", "--out", str(tmp_path / "r.json")])
    assert main(argv) == 2
    error = one_line_error(capsys)
    assert f"{folder}: the tokenizer's ids reach" in error and "embedding rows: they are not a pair" in error
    assert expected in error and not (tmp_path / "run" / "best").exists()


def test_a_generator_of_fewer_ids_than_the_models_is_refused_before_training(tmp_path, tiny_bert_dir, tiny_cache,
                                                                              data_dir, capsys):
    from transformers import BertForMaskedLM

    from tests.conftest import save_tiny_bert

    generator = _fewer_rows(save_tiny_bert(tmp_path / "generator", BertForMaskedLM, hidden=32, layers=1),
                            BertForMaskedLM, 20000)
    argv = train_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "run", "--set",
                      f"losses.rtd.generator={generator}")
    argv[argv.index("simcse")] = "diffcse"
    assert main(argv) == 2
    assert f"losses.rtd.generator: {generator}: the tokenizer's ids reach 30521" in one_line_error(capsys)


@pytest.mark.parametrize(("setting", "message"), [
    ("encoder.adapter={kind: lora, target_modules: ''}", "encoder.adapter.target_modules: '' is not valid"),
    ("encoder.adapter={kind: lora, target_modules: []}", "encoder.adapter.target_modules: an empty list is no value"),
    ("encoder.adapter={kind: lora, target_modules: ['']}",
     r"encoder.adapter.target_modules\[0\]: an empty string is no value"),
    ("encoder.prompt=''", "encoder.prompt: an empty string is no value"),
    ("views.anchor.prompt=''", "views.anchor.prompt: an empty string is no value"),
    ("views.anchor.layers=[]", "views.anchor.layers: an empty list is no value"),
    ("data=''", "data: an empty string is no value"),
])
def test_an_empty_value_is_refused_where_it_would_be_read_as_none(setting, message, capsys):
    """By class (every checked setting of every schema): an empty string or list where code would take it for no
    value (peft's default modules for an empty target_modules, and a saved config that records nothing) is one line;
    a setting whose default is empty, or that says so (training.no_decay: [] decays every weight), takes one."""
    assert main(["train", "--method", "simcse", "--set", setting, "--show-config"]) == 2
    assert re.search(message, one_line_error(capsys))
    assert main(["train", "--method", "simcse", "--set", "training.no_decay=[]", "--set", "description=''",
                 "--show-config"]) == 0


@pytest.mark.parametrize("option", ["--transfer-tasks", "--tasks", "--mteb-tasks"])
def test_an_empty_task_list_is_refused_not_scored_as_nothing(option, tmp_path, capsys):
    suite = {"--transfer-tasks": "transfer", "--tasks": "sts", "--mteb-tasks": "mteb"}[option]
    # "," names no task: the list rule; "" itself is refused by the parser (tests/test_empty_values.py)
    assert main(["probe", "run", "--model", "bow", "--suite", suite, option, ",", "--out", str(tmp_path / "r.json")]) \
        == 2
    error = one_line_error(capsys)
    assert ("needs --mteb-tasks NAME" if suite == "mteb" else "an empty list is no value") in error
    assert not (tmp_path / "r.json").exists()
