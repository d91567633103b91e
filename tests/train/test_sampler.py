"""training.sampler: no_duplicates: no text twice in a batch, deterministic from seed and epoch, resumed alike."""

import pytest
from safetensors.torch import load_file

from cselab.cli import main
from cselab.errors import TrainingError
from cselab.train.batches import EpochOrder, NoDuplicateBatches, row_texts
from cselab.train.run.data import ColumnRows
from tests.runs import train_killed_after_first_save

# 60 rows, 20 distinct texts: rows i and i + 20 and i + 40 are the same sentence
TEXTS = [f"sentence {i % 20} here" for i in range(60)]


def batches(epoch: int, batch_size: int = 8, texts=TEXTS) -> list[list[int]]:
    sampler = NoDuplicateBatches(EpochOrder(len(texts), 42), batch_size, row_texts(ColumnRows({"text": texts}),
                                                                                   [("text", None)]))
    sampler.sampler.set_epoch(epoch)
    return list(sampler)


def test_no_batch_holds_a_text_twice_and_the_epoch_has_its_full_count():
    for epoch in range(3):
        found = batches(epoch)
        assert len(found) == 60 // 8
        for batch in found:
            assert len(batch) == 8 and len({TEXTS[i] for i in batch}) == 8
        assert len({i for batch in found for i in batch}) == 56  # every row at most once


def test_the_batches_are_the_same_for_a_seed_and_epoch_and_differ_between_epochs():
    assert batches(1) == batches(1) and batches(1) != batches(2)


def test_a_random_epoch_of_the_same_rows_has_duplicates():
    """What the sampler removes is there: the epoch order alone batches some text twice."""
    order = list(EpochOrder(60, 42))
    plain = [order[k:k + 8] for k in range(0, 56, 8)]
    assert any(len({TEXTS[i] for i in batch}) < 8 for batch in plain)


def test_prompts_make_other_texts():
    rows = ColumnRows({"text": ["a", "a", "b"], "negation": ["x", "", "a"]})
    assert row_texts(rows, [("text", None), ("text", "P {}"), ("negation", None)]) == [
        ("\0a", "P {}\0a", "\0x"), ("\0a", "P {}\0a"), ("\0b", "P {}\0b", "\0a")]


def test_the_prepared_loader_passes_the_epoch_to_the_sampler():
    """The trainer sets the epoch on accelerate's loader; it must reach the order the batches are drawn from."""
    from accelerate import Accelerator

    from cselab.train.config.methods import load_method
    from cselab.train.batches import training_loader

    config = load_method("simcse", ["training.batch_size=8", "training.sampler=no_duplicates"]).training
    loader = Accelerator(cpu=True).prepare(training_loader(ColumnRows({"text": TEXTS}), config, []))
    loader.set_epoch(3)
    assert loader.batch_sampler.sampler.epoch == 3 or loader.batch_sampler.batch_sampler.sampler.epoch == 3


def test_too_many_duplicates_are_refused_before_any_step():
    with pytest.raises(TrainingError, match="fills only 2 of its 3 batches of 8 rows without a text twice"):
        batches(0, texts=[f"s {i % 9}" for i in range(24)])


@pytest.mark.slow
def test_a_resumed_no_duplicates_run_ends_with_the_straight_runs_weights(tiny_bert_dir, data_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Sentence number {i % 30} is here.\n" for i in range(120)))  # 7 batches an epoch
    args = ["train", "--method", "simcse", "--model", str(tiny_bert_dir), "--data", str(corpus), "--data-dir",
            str(data_dir), "--set", "training.batch_size=16", "--set", "training.max_length=24", "--set",
            "training.eval_steps=2", "--set", "training.max_steps=10", "--set", "training.dev=none", "--set",
            "training.sampler=no_duplicates"]
    assert main([*args, "--out", str(tmp_path / "straight")]) == 0
    train_killed_after_first_save([*args, "--out", str(tmp_path / "resumed")])
    assert main([*args, "--out", str(tmp_path / "resumed")]) == 0
    straight, resumed = (load_file(str(tmp_path / name / "last" / "model.safetensors"))
                         for name in ("straight", "resumed"))
    assert all((straight[k] - resumed[k]).abs().max() < 1e-5 for k in straight)
