"""Packed passes (cselab.encoders.packing): a padded batch's real tokens run as one row give every model type it
takes the padded pass's states at the real tokens (zeros at the padding), its pooled vectors and, to rounding, its
gradients; what it does not take is refused with the reason; gradient checkpointing recomputes a packed layer as it
ran; the config a checkpoint writes is the same.

Measured here (2026-12-03, torch 2.13 CPU, 1 and 2 threads): the states and BERT's pooler output equal the padded
pass's to the bit for every type, bidirectional Llama and Qwen2 too; the gradients differ from the padded pass's by at
most 1.1e-7 of the largest gradient (sums over the T real tokens instead of the rows x width, in other blocks), so
they are checked to 1e-6 of it. A position one off moves the gradients by 0.26 of it, one padding key attended by one
row by 3.4e-4 (its states by 3.7e-3)."""

import contextlib
import math

import pytest
import torch
from torch.utils.checkpoint import CheckpointError
from transformers import AutoModel, AutoTokenizer, BertModel, Qwen2Config

from cselab.encoders import packing
from cselab.encoders.transformer import TransformerEncoder
from tests.conftest import save_tiny_bert
from tests.packing_faults import plant

SENTENCES = ["a cat sat on the mat", "dogs run", "a quick brown fox jumps over the lazy dog and more", "he said twice"]
GRADIENTS = 1e-6  # of the largest gradient (measured: 1.1e-7)


def padded_batch(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [tokenizer(text)["input_ids"] for text in SENTENCES]
    width, pad = max(map(len, rows)), tokenizer.pad_token_id or 0
    return (torch.tensor([row + [pad] * (width - len(row)) for row in rows]),
            torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows]))


@pytest.fixture(scope="module")
def models(tiny_decoders, tiny_roberta_dir, tiny_bert_dir) -> dict:
    """Each verified type's tiny model (dropout on, in eval mode: the passes are compared without it)."""
    return {"bert": tiny_bert_dir, "roberta": tiny_roberta_dir, **tiny_decoders}


def passes(folder, bidirectional: bool = False, packed: bool = True):
    """The padded and the packed outputs (all hidden states) of the batch, and each one's gradients of the real
    tokens' squared last states."""
    model = AutoModel.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    encoder = TransformerEncoder(model, tokenizer, pooler="avg", bidirectional=bidirectional)
    input_ids, attention_mask = padded_batch(tokenizer)
    out = []
    for pack in (False, packed):
        outputs = encoder.run(model, input_ids, attention_mask, pack, output_hidden_states=True)
        loss = (outputs.last_hidden_state[attention_mask.bool()] ** 2).sum()
        out.append((outputs, torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)))
    return out, attention_mask.bool()


def gradient_deviation(a, b) -> float:
    scale = max(g.abs().max().item() for g in a if g is not None)
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True) if x is not None) / scale


@pytest.mark.parametrize(("kind", "bidirectional"), [("bert", False), ("roberta", False), ("llama", False),
                                                     ("llama", True), ("qwen2", False), ("qwen2", True),
                                                     ("gpt2", False), ("opt", False)])
def test_a_packed_pass_gives_the_padded_pass_s_states_and_gradients(kind, bidirectional, models):
    ((padded, padded_grads), (packed, packed_grads)), real = passes(models[kind], bidirectional)
    assert packed.last_hidden_state.shape == padded.last_hidden_state.shape
    assert torch.equal(packed.last_hidden_state[real], padded.last_hidden_state[real])
    assert not packed.last_hidden_state[~real].any()  # zeros at the padding
    assert len(packed.hidden_states) == len(padded.hidden_states)
    for ours, theirs in zip(packed.hidden_states, padded.hidden_states, strict=True):
        assert torch.equal(ours[real], theirs[real])
    if kind in ("bert", "roberta"):  # the 'cls' pooler reads it: from the padded states
        assert torch.equal(packed.pooler_output, padded.pooler_output)
    assert gradient_deviation(padded_grads, packed_grads) <= GRADIENTS


@pytest.mark.parametrize(("kind", "bidirectional"), [("bert", False), ("roberta", False), ("llama", True),
                                                     ("qwen2", False), ("gpt2", False), ("opt", False)])
def test_with_dropout_on_a_packed_pass_draws_the_padded_pass_s_masks(kind, bidirectional, models):
    """In training mode, seed for seed, a packed pass's states are the padded pass's to the bit (its dropout draws
    over the padded batch); drawn over the packed row instead (the planted fault), they are not, for every type
    with a dropout outside attention."""
    attention_only = kind in ("llama", "qwen2")  # their only dropout: attention's, off in the tiny configs
    model = AutoModel.from_pretrained(models[kind], **({"attention_dropout": 0.1} if attention_only else {}))
    tokenizer = AutoTokenizer.from_pretrained(models[kind])
    encoder = TransformerEncoder(model, tokenizer, pooler="avg", bidirectional=bidirectional)
    model.train()
    input_ids, attention_mask = padded_batch(tokenizer)
    real = attention_mask.bool()

    def states(packed: bool):
        torch.manual_seed(7)
        outputs = encoder.run(model, input_ids, attention_mask, packed)
        grads = torch.autograd.grad((outputs.last_hidden_state[real] ** 2).sum(), list(model.parameters()),
                                    allow_unused=True)
        return outputs.last_hidden_state[real], grads

    (padded, padded_grads), (packed, packed_grads) = states(False), states(True)
    assert torch.equal(packed, padded)
    assert gradient_deviation(padded_grads, packed_grads) <= GRADIENTS
    torch.manual_seed(8)
    assert not torch.equal(encoder.run(model, input_ids, attention_mask, False).last_hidden_state[real], padded)
    if attention_only:
        return  # attention's dropout runs on the re-padded batch: nothing is drawn over the packed row
    with pytest.MonkeyPatch.context() as patch:  # another seed draws other masks: dropout is on
        patch.setattr(packing, "dropout_masks", lambda *args: contextlib.nullcontext())
        assert not torch.equal(states(True)[0], padded)


@pytest.mark.parametrize("planted", ["position", "padding"])
def test_a_packed_pass_that_is_one_position_off_or_reads_one_pad_is_caught(planted, models, monkeypatch):
    """The comparison above sees a real change: every position one further, or the first row attending to its first
    padding token."""
    plant(planted, monkeypatch)  # the padding: "dogs run" ([CLS] dogs run [SEP]) attends to its first pad
    ((padded, padded_grads), (packed, packed_grads)), real = passes(models["bert"])
    assert not torch.equal(packed.last_hidden_state[real], padded.last_hidden_state[real])
    assert gradient_deviation(padded_grads, packed_grads) > 10 * GRADIENTS


def test_pooled_vectors_of_a_packed_pass_are_the_padded_pass_s(models):
    """Every pooler (and pooled layers) reads the padded-back states as it reads a padded pass's."""
    model = AutoModel.from_pretrained(models["bert"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(models["bert"])
    for pooler, prompt in [("cls", None), ("cls_before_pooler", None), ("avg", None), ("avg_first_last", None),
                           ("mask", 'This sentence : "{}" means [MASK] .'), ("last", None), ("weighted_mean", None)]:
        encoder = TransformerEncoder(model, tokenizer, pooler=pooler, prompt=prompt)
        input_ids, attention_mask = encoder.pad(encoder.tokenize(SENTENCES))
        ours = encoder.forward_batch(input_ids, attention_mask, layers="all", layer_pooler="max", packed=True)
        theirs = encoder.forward_batch(input_ids, attention_mask, layers="all", layer_pooler="max")
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a, b), pooler


def test_a_batch_without_padding_runs_padded_and_the_config_is_left_as_it_was(models, tmp_path):
    model = AutoModel.from_pretrained(models["bert"]).eval()
    model.save_pretrained(tmp_path / "before")
    ids = torch.tensor([[101, 2000, 102], [101, 2001, 102]])
    assert packing.pack(model, ids, torch.ones_like(ids)) is None
    input_ids, attention_mask = padded_batch(AutoTokenizer.from_pretrained(models["bert"]))
    packed = packing.pack(model, input_ids, attention_mask)
    assert packed is not None and len(packed.index) == attention_mask.sum()
    with pytest.raises(RuntimeError, match="boom"), packing.switched(model.config, packing.NAME):
        raise RuntimeError("boom")
    packing.forward(model, input_ids, packed)
    assert model.config._attn_implementation == "sdpa"
    model.save_pretrained(tmp_path / "after")
    assert (tmp_path / "after" / "config.json").read_bytes() == (tmp_path / "before" / "config.json").read_bytes()
    with pytest.raises(RuntimeError, match="runs in cselab's packed passes only"):
        packing.attention(model, *[torch.zeros(1, 2, 3, 4)] * 3, None)


def test_what_a_packed_pass_does_not_rebuild_is_refused(models, tmp_path):
    bert = AutoModel.from_pretrained(models["bert"])
    assert packing.refusal(bert) is None
    eager = AutoModel.from_pretrained(models["bert"], attn_implementation="eager")
    assert "runs 'eager' attention, and a packed pass attends through SDPA" in packing.refusal(eager)
    assert "distilbert is not among the model types" in packing.config_refusal(
        type("Config", (), {"model_type": "distilbert"})())
    windowed = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    assert "sliding-window layers" in packing.config_refusal(windowed)


def test_gradient_checkpointing_recomputes_a_packed_layer_with_its_packed_attention(models):
    """transformers recomputes a layer in the backward pass, after the packed pass has switched its attention back:
    the checkpoint's context gives the recomputation the attention its pass ran (without it, SDPA over the packed row
    saves other tensors, which torch refuses: measured for both models here)."""
    from cselab.train.run.setup import checkpoint_activations

    def gradients(folder, checkpointed: bool, context: bool = True):
        model = AutoModel.from_pretrained(folder)
        if checkpointed:
            checkpoint_activations(model, "tiny", packed=context)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        input_ids, attention_mask = padded_batch(tokenizer)
        encoder = TransformerEncoder(model, tokenizer, pooler="avg")
        model.train()  # (checkpointing runs in training mode; dropout is off below)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        states = encoder.run(model, input_ids, attention_mask, True).last_hidden_state
        return torch.autograd.grad((states[attention_mask.bool()] ** 2).sum(), list(model.parameters()),
                                   allow_unused=True)

    for kind in ("bert", "llama"):
        plain = gradients(models[kind], False)
        assert gradient_deviation(plain, gradients(models[kind], True)) <= GRADIENTS
        try:  # (torch sees the recomputation save other tensors, where it does)
            unguarded = gradient_deviation(plain, gradients(models[kind], True, context=False))
        except CheckpointError:
            unguarded = math.inf
        assert unguarded > 1e-3


def test_gradient_checkpointing_redraws_a_packed_layer_s_dropout_as_its_pass_drew_it(models):
    """With dropout on, a packed and checkpointed pass's gradients are the padded pass's, seed for seed: the
    recomputed layer draws its masks over the padded batch again (without that, the planted fault, other masks)."""
    from cselab.train.run.setup import checkpoint_activations

    def gradients(checkpointed: bool, packed: bool):
        model = AutoModel.from_pretrained(models["bert"])
        tokenizer = AutoTokenizer.from_pretrained(models["bert"])
        encoder = TransformerEncoder(model, tokenizer, pooler="avg")
        if checkpointed:
            checkpoint_activations(model, "tiny", packed=True)
        model.train()
        input_ids, attention_mask = padded_batch(tokenizer)
        torch.manual_seed(7)
        states = encoder.run(model, input_ids, attention_mask, packed).last_hidden_state
        return torch.autograd.grad((states[attention_mask.bool()] ** 2).sum(), list(model.parameters()),
                                   allow_unused=True)

    padded = gradients(False, False)
    assert gradient_deviation(padded, gradients(True, True)) <= GRADIENTS
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing, "recomputed", lambda config, implementation, active: packing.switched(
            config, implementation))
        try:
            unguarded = gradient_deviation(padded, gradients(True, True))
        except CheckpointError:  # (torch sees the recomputation draw other tensors, where it does)
            unguarded = math.inf
    assert unguarded > 1e-3


def test_a_lora_wrapped_backbone_packs_too(models):
    from peft import LoraConfig, get_peft_model

    model = AutoModel.from_pretrained(models["llama"]).eval()
    torch.manual_seed(0)
    wrapped = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj", "gate_proj"],
                                               init_lora_weights=False))
    tokenizer = AutoTokenizer.from_pretrained(models["llama"])
    encoder = TransformerEncoder(wrapped, tokenizer, pooler="last")
    input_ids, attention_mask = padded_batch(tokenizer)
    ours = encoder.forward_batch(input_ids, attention_mask, packed=True)
    theirs = encoder.forward_batch(input_ids, attention_mask)
    assert packing.refusal(wrapped) is None and torch.equal(ours, theirs)


def test_an_input_augment_sees_the_padded_batch_and_draws_its_numbers(models):
    """A hook on the word embeddings gets the padded batch's (rows, width, dim) in a packed pass too, so that a noise
    drawn over it is the padded pass's: the same vectors, seed for seed; without the re-padding (the planted fault),
    other draws."""
    model = AutoModel.from_pretrained(models["bert"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(models["bert"])
    encoder = TransformerEncoder(model, tokenizer, pooler="avg")
    input_ids, attention_mask = padded_batch(tokenizer)
    seen = []

    def noise(embeddings):
        seen.append(embeddings.shape)
        return embeddings + torch.randn_like(embeddings)

    def vectors(packed: bool):
        torch.manual_seed(3)
        return encoder.forward_batch(input_ids, attention_mask, input_augment=noise, packed=packed)

    padded = vectors(False)
    assert torch.allclose(vectors(True), padded, atol=1e-6) and seen[0] == seen[1] == input_ids.shape + (32,)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("cselab.encoders.transformer.padded_augment", lambda augment, embeddings: augment(embeddings))
        assert not torch.allclose(vectors(True), padded, atol=1e-3)


def test_a_tiny_bert_without_a_pooler_layer_packs(tmp_path):
    folder = save_tiny_bert(tmp_path / "bert", BertModel, hidden=32, layers=1)
    model = BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    input_ids, attention_mask = padded_batch(tokenizer)
    outputs = packing.forward(model, input_ids, packing.pack(model, input_ids, attention_mask))
    assert outputs.pooler_output is None and outputs.last_hidden_state.shape[:2] == input_ids.shape
