"""What every section of ``gpu_check.py`` shares: the synthetic data and models, the device's clock and memory,
the deadline, and how a row says it failed."""

from __future__ import annotations

import inspect
import json
import math
import os
import random
import subprocess
import sys
import time
import traceback
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEADLINE = [math.inf]  # time.monotonic() past which what is left is skipped (--deadline)


TINY_SETTINGS = {"infocse": ("losses.aggregation_mlm.layers=1",)}  # what the 2-layer tiny model needs changed


PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


@cache
def synthetic_words(count: int = 3000) -> list[str]:
    """Distinct lower-case pseudo-words (2 to 4 of 12 syllables: 22,464 possible), each one WordPiece token of the
    synthetic vocabulary."""
    rng, syllables = random.Random(0), ["ka", "lo", "mi", "tes", "ra", "nu", "po", "sel", "di", "van", "be", "or"]
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


def save_tokenizer(folder: Path):
    """A bert-base-uncased-sized WordPiece tokenizer (30,522 entries) over the synthetic words and the prompts'."""
    from transformers import BertTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    prompt_words = ["this", "sentence", "of", "means", ":", '"', ".", "not"]
    vocab = special + prompt_words + synthetic_words()
    vocab += [f"[unused{i}]" for i in range(30522 - len(vocab))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # transformers 4 names the file vocab_file, transformers 5 vocab
    key = "vocab_file" if "vocab_file" in inspect.signature(BertTokenizerFast.__init__).parameters else "vocab"
    tokenizer = BertTokenizerFast(**{key: str(folder / "vocab.txt")}, do_lower_case=True)
    if len(tokenizer) != len(vocab):
        raise RuntimeError(f"the synthetic tokenizer has {len(tokenizer)} entries, not {len(vocab)}")
    tokenizer.save_pretrained(folder)
    return tokenizer


def sentences(count: int, seed: int = 0, words: tuple[int, int] = (30, 40)) -> list[str]:
    rng, vocabulary = random.Random(seed), synthetic_words()
    return [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(*words))) for _ in range(count)]


def bert_config(tiny: bool, **overrides):
    from transformers import BertConfig

    size = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64} if tiny \
        else {}
    return BertConfig(vocab_size=30522, **size, **overrides)


def save_bert(folder: Path, tiny: bool, masked_lm: bool = False, **config) -> Path:
    import torch
    from transformers import BertForMaskedLM, BertModel

    torch.manual_seed(0)
    (BertForMaskedLM if masked_lm else BertModel)(bert_config(tiny, **config)).save_pretrained(folder)
    save_tokenizer(folder)
    return folder


def write_dev_set(root: Path, pairs: int) -> Path:
    """A synthetic STS-B dev file in SentEval's layout, for the trainer's evaluation."""
    folder = root / "senteval" / "downstream" / "STS" / "STSBenchmark"
    folder.mkdir(parents=True, exist_ok=True)
    first, second = sentences(pairs, 1, (8, 20)), sentences(pairs, 2, (8, 20))
    rng = random.Random(3)
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{rng.uniform(0, 5):.3f}\t{a}\t{b}"
             for i, (a, b) in enumerate(zip(first, second))]
    (folder / "sts-dev.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_memory_mib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None


def reset_peak(device: str) -> None:
    """The peak since now: the memory of what went before (a previous row's model) freed first."""
    import gc

    import torch

    if device.startswith("cuda"):
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_tflops(device: str, override: float | None) -> float | None:
    import torch

    if override:
        return override
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return next((value for key, value in PEAK_BF16_TFLOPS.items() if key in name), None)


def set_mode(mode: str) -> bool:
    """TF32 on or off for the matmuls; returns whether the mode autocasts to bf16."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    return mode == "bf16"


def late() -> bool:
    """Whether the run is past its ``--deadline``: what is left is skipped, and said to be."""
    return time.monotonic() > DEADLINE[0]


def row_error() -> str:
    """The failing row's error, for its cell: the exception's last line (the whole traceback on stderr)."""
    text = traceback.format_exc()
    print(text, file=sys.stderr, flush=True)
    return text.strip().splitlines()[-1][:300]


def run_json(command: list[str], timeout: float) -> dict:
    """The last JSON line a benchmark subprocess (the same process tree, a fresh process: its own compilation caches
    and CUDA context) prints; its stderr's tail in the error where it fails."""
    run = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if run.returncode != 0:
        print(run.stderr[-5000:], file=sys.stderr, flush=True)
        raise RuntimeError(f"{Path(command[0]).name} exited {run.returncode}: {run.stderr.strip().splitlines()[-1:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def left(args) -> float:
    """Seconds a subprocess may take: what is left before the deadline (10 minutes without one)."""
    return max(DEADLINE[0] - time.monotonic(), 30.0) if math.isfinite(DEADLINE[0]) else 600.0


def write_rows(path: Path, count: int, seed: int) -> Path:
    """A JSON-lines table of ``count`` rows with every column a preset reads (text, paraphrase, negation, positive,
    hard_negative), each text filling the 32 tokens."""
    rows = []
    for text in sentences(count, seed=seed):
        other, negated = " ".join(reversed(text.split())), "not " + text
        rows.append({"text": text, "paraphrase": other, "negation": negated, "positive": other,
                     "hard_negative": negated})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def cselab_train(arguments: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cselab.cli", "train", *arguments], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def simcse_flops(model_dir: Path, batch: int, length: int = 32) -> float:
    """A simcse step's FLOPs (the module docstring's formula): two views of ``batch`` rows of ``length`` tokens."""
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModel.from_config(config)
    embedding = sum(p.numel() for p in model.get_input_embeddings().parameters())
    non_embedding = sum(p.numel() for p in model.parameters()) - embedding
    forward = 2 * non_embedding * length + 4 * config.num_hidden_layers * length ** 2 * config.hidden_size
    return 3 * forward * 2 * batch
