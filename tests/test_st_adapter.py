"""cselab's losses inside sentence-transformers (``cselab.integrations.sentence_transformers``), on a checkpoint a
cselab run wrote, loaded with ``SentenceTransformer``: each loss equal to sentence-transformers' own on one batch
(InfoNCE to ``MultipleNegativesRankingLoss(scale=1/tau)``, with hard negatives too; CoSENT to ``CoSENTLoss``; a
Matryoshka-wrapped CoSENT to ``MatryoshkaLoss``), three steps of ``SentenceTransformerTrainer`` with cselab's
losses, and the losses it cannot serve refused in one line."""

import pytest
import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MatryoshkaLoss, MultipleNegativesRankingLoss

from cselab.errors import ConfigError
from cselab.integrations.sentence_transformers import CselabLoss
from cselab.train.config.methods import load_method
from cselab.train.run.options import RunOptions
from cselab.train.recipe import train

TEXTS = ["a man plays a guitar", "a dog runs on the beach", "the market fell sharply", "two kids swim in a lake",
         "a woman slices an onion", "the train left the station"]
OTHERS = ["someone is playing music", "an animal is running", "stocks dropped today", "children are swimming",
          "a cook is cutting vegetables", "the train departed"]
NEGATIVES = ["nobody plays anything", "the dog sleeps at home", "the market rose", "the kids stay dry",
             "a man eats an onion", "the train never left"]
SCORES = torch.tensor([4.2, 3.8, 4.6, 4.0, 3.1, 4.8])


@pytest.fixture(scope="module")
def cselab_checkpoint(tmp_path_factory, tiny_bert_dir, tiny_cache, data_dir):
    """OUT/best of a two-step cselab run (SimCSE, mean pooling) on the tiny BERT."""
    out = tmp_path_factory.mktemp("st") / "run"
    method = load_method("simcse", ["encoder.pooler=avg", "encoder.head=null", "training.batch_size=16",
                                    "training.max_length=24", "training.max_steps=2", "training.eval_steps=2"])
    train(method, str(tiny_bert_dir), tiny_cache, out, RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    return out / "best"


@pytest.fixture
def model(cselab_checkpoint):
    return SentenceTransformer(str(cselab_checkpoint), device="cpu").eval()  # dropout off: one batch, two losses


def features(model, *columns):
    return [model.tokenize(column) for column in columns]


@pytest.mark.slow
def test_info_nce_equals_multiple_negatives_ranking_loss(model):
    ours = CselabLoss(model, "info_nce", temperature=0.05)
    theirs = MultipleNegativesRankingLoss(model, scale=20.0)
    torch.testing.assert_close(ours(features(model, TEXTS, OTHERS), None),
                               theirs(features(model, TEXTS, OTHERS), None))
    with_negatives = CselabLoss(model, "info_nce", columns=3, temperature=0.05)
    torch.testing.assert_close(with_negatives(features(model, TEXTS, OTHERS, NEGATIVES), None),
                               theirs(features(model, TEXTS, OTHERS, NEGATIVES), None))
    planted = CselabLoss(model, "info_nce", temperature=0.06)(features(model, TEXTS, OTHERS), None)
    assert not torch.isclose(planted, theirs(features(model, TEXTS, OTHERS), None))


def test_cosent_and_its_matryoshka_equal_sentence_transformers(model):
    pairs = features(model, TEXTS, OTHERS)
    torch.testing.assert_close(CselabLoss(model, "cosent")(pairs, SCORES), CoSENTLoss(model)(pairs, SCORES))
    ours = CselabLoss(model, "cosent", matryoshka={"dims": [32, 16, 8], "weights": [1.0, 0.5, 2.0]})
    theirs = MatryoshkaLoss(model, CoSENTLoss(model), matryoshka_dims=[32, 16, 8], matryoshka_weights=[1.0, 0.5, 2.0])
    torch.testing.assert_close(ours(pairs, SCORES), theirs(pairs, SCORES))


@pytest.mark.slow
def test_sentence_transformers_trainer_trains_with_cselab_losses(cselab_checkpoint, tmp_path):
    model = SentenceTransformer(str(cselab_checkpoint), device="cpu")
    before = [p.detach().clone() for p in model.parameters()]
    data = Dataset.from_dict({"anchor": TEXTS * 4, "paraphrase": OTHERS * 4, "negation": NEGATIVES * 4})
    loss = CselabLoss(model, "two_way_margin", alpha=0.05, beta=0.2, weight=10.0)  # OssCSE's margin loss
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, learning_rate=1e-3,
                                                per_device_train_batch_size=8, report_to=[], use_cpu=True,
                                                logging_steps=1, save_strategy="no", seed=0)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(value == value for value in losses)  # logged each step, no NaN
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_what_the_adapter_cannot_serve_is_refused_in_one_line(model):
    with pytest.raises(ConfigError, match="'mlm'\\): the loss reads tokens or texts, the initial weights or models "):
        CselabLoss(model, "mlm")
    with pytest.raises(ConfigError, match="'info_nce'\\): the loss reads tokens or texts"):  # a guide reads texts
        CselabLoss(model, "info_nce", transform={"kind": "guided", "guide": "minilm"})
    with pytest.raises(ConfigError, match="CselabLoss\\('info_nce'\\).temprature: unknown key \\(did you mean "):
        CselabLoss(model, "info_nce", temprature=0.05)
    with pytest.raises(ConfigError, match="4 columns, and the loss reads 3 \\(anchor, paraphrase, negation\\)"):
        CselabLoss(model, "two_way_margin", columns=4)
    with pytest.raises(ValueError, match="built for 2 columns \\(anchor, positive\\); the batch has 3: pass columns=3"):
        CselabLoss(model, "info_nce")(features(model, TEXTS, OTHERS, NEGATIVES), None)
    with pytest.raises(ValueError, match="reads each row's score: the dataset needs a label column"):
        CselabLoss(model, "cosent")(features(model, TEXTS, OTHERS), None)
