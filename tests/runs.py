"""What the tests of run folders, resumes and faults share: the CLI's training arguments, a kill, a planted pickle."""

import shutil
from pathlib import Path

from cselab.encoders import load_encoder

SETTINGS = ["--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.lr=1e-4",
            "--set", "training.eval_steps=2", "--set", "training.max_steps=4"]


def data_for(preset: str, cache):
    """What a test trains ``preset`` on: the tiny augment cache, or the preset's own table (the supervised presets'
    triplets are no cache's columns)."""
    from cselab.data.tables import is_table
    from cselab.train.config.methods import load_method

    own = load_method(preset).data
    return None if own and is_table(own) else cache


def models_for(preset: str, folder: Path) -> list[str]:
    """The ``--set`` overrides that give ``preset``'s losses the models they name: a tiny random masked LM for a
    generator (DiffCSE), a tiny random BERT for a teacher (RankCSE), each with the tiny BERT's vocabulary and written
    in ``folder`` once."""
    from cselab.train.config.methods import load_method
    from cselab.train.out.folder import loss_models

    return [f"{key}={tiny_model(folder / key.rsplit('.', 1)[1], key.endswith('generator'))}"
            for key in loss_models(load_method(preset))]


#: The presets of decoder LMs: their templates name an end token and their losses a next-token head, which no BERT has.
DECODER_PRESETS = ("prompteol", "echo", "llm2vec-mntp", "llm2vec")


def base_for(preset: str, tiny_bert, folder: Path) -> tuple[str, list[str]]:
    """The base model a test trains ``preset`` from, and the overrides it needs there: the tiny BERT; for a decoder
    preset a tiny random Llama causal LM; for a method whose loss reads the base model's masked-LM weights (InfoCSE's
    aggregation), a tiny masked-LM BERT of the same draw with its frozen part cut to one layer."""
    from cselab.train.config.methods import load_method

    if preset in DECODER_PRESETS:
        if not (folder / "causal-llama" / "config.json").exists():
            from tests.conftest import save_tiny_decoder

            save_tiny_decoder(folder / "causal-llama", "llama", head=True)
        return str(folder / "causal-llama"), []
    if not any(params.get("kind", name) == "aggregation_mlm" for name, params in load_method(preset).losses.items()):
        return str(tiny_bert), []
    if not (folder / "masked-base" / "config.json").exists():
        from transformers import BertForMaskedLM

        from tests.conftest import save_tiny_bert

        save_tiny_bert(folder / "masked-base", BertForMaskedLM, hidden=32, layers=2)
    return str(folder / "masked-base"), ["losses.aggregation_mlm.layers=1"]


def tiny_model(folder: Path, masked_lm: bool) -> Path:
    """A random one-layer BERT (hidden 32; a masked LM or an encoder) with bert-base-uncased's vocabulary, saved in
    ``folder`` once."""
    if not (folder / "config.json").exists():
        from transformers import BertForMaskedLM, BertModel

        from tests.conftest import save_tiny_bert

        save_tiny_bert(folder, BertForMaskedLM if masked_lm else BertModel, hidden=32, layers=1)
    return folder


def train_args(model, cache, data_dir, out, *extra):
    return ["train", "--method", "simcse", "--model", str(model), "--data", str(cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--out", str(out), *SETTINGS, *extra]


class Killed(BaseException):
    """Stands for a kill right after a save."""


def train_killed_after_first_save(argv: list[str]) -> None:
    """``cselab ARGV`` (a train command) killed right after its first save (the trainer's evaluate-and-save)."""
    import pytest

    from cselab.cli import main
    from cselab.train.recipe import Trainer

    save = Trainer.evaluate_and_save

    def save_then_die(self, *args):
        save(self, *args)
        raise Killed

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Killed):
        patch.setattr(Trainer, "evaluate_and_save", save_then_die)
        main(argv)


def straight_and_resumed(root: Path, argv_for) -> Path:
    """``root`` with the train command ``argv_for(out)`` run straight into ``root/full``, and into ``root/half`` killed
    after its first save (at step 2), then run again to resume."""
    import json

    from cselab.cli import main

    assert main(argv_for(root / "full")) == 0
    train_killed_after_first_save(argv_for(root / "half"))
    assert json.loads((root / "half" / "last" / "trainer_state.json").read_text())["step"] == 2
    assert main(argv_for(root / "half")) == 0
    return root


def copy_of(finished_run, tmp_path, name="half") -> Path:
    out = tmp_path / name
    shutil.copytree(finished_run / name, out)
    return out


def one_line_error(capsys) -> str:
    """The one ``error:`` line (progress bars aside), without a traceback."""
    err = capsys.readouterr().err
    errors = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def best_still_loads(out: Path) -> None:
    assert load_encoder(str(out / "best"), device="cpu").encode(["still here"]).shape == (1, 32)


class Payload:
    """Unpickling this runs code: it creates a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def without_package(monkeypatch, package: str) -> None:
    """Imports of ``package`` (and its modules) fail from now on in this test, as where it is not installed."""
    import builtins

    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == package or name.startswith(f"{package}."):
            raise ImportError(f"No module named {package!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
