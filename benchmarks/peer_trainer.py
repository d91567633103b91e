"""cselab's trainer beside sentence-transformers' on the same work, for ``gpu_check.py``'s ``peer`` section.

The same work: the same random BERT folder, [CLS] vectors with no head (``encoder.pooler=cls_before_pooler``,
``encoder.head=null`` in cselab; a ``Pooling`` of mode ``cls`` in sentence-transformers), each sentence paired with
itself, InfoNCE at temperature 0.05 (``MultipleNegativesRankingLoss(scale=20)``), the same batch, 32 tokens, bf16
autocast on CUDA and no evaluation. Each library's own entry point runs it: ``SentenceTransformerTrainer.train`` and
``cselab``'s ``train``, each with a callback that reads the clock after every optimizer step (the device synchronised
first). That it is the same work is shown on a first batch with dropout off: both libraries' losses of it, in fp32.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

# simcse's objective on sentence-transformers' model: the last layer's [CLS] state, no head (cselab's ``cls`` would
# add BERT's pooler layer, as SimCSE's code names it)
SAME_WORK = ("encoder.pooler=cls_before_pooler", "encoder.head=null")


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def st_model(model_dir: Path, device: str, max_length: int):
    """A SentenceTransformer of ``model_dir``'s transformer and [CLS] pooling."""
    from sentence_transformers import SentenceTransformer, models

    width = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    transformer = models.Transformer(str(model_dir), max_seq_length=max_length)
    return SentenceTransformer(modules=[transformer, models.Pooling(width, pooling_mode="cls")], device=device)


def st_first_batch_loss(model_dir: Path, device: str, texts: list[str], max_length: int) -> float:
    """sentence-transformers' MultipleNegativesRankingLoss(scale=20) of ``texts`` paired with themselves, in fp32."""
    import torch
    from sentence_transformers import losses

    model = st_model(model_dir, device, max_length)
    loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
    features = {key: value.to(device) if hasattr(value, "to") else value  # 6.x adds a few plain values
                for key, value in model.tokenize(texts).items()}
    with torch.no_grad():
        return float(loss([features, dict(features)], None))


def steps_per_s(times: list[float], skip: int) -> float:
    """Optimizer steps per second over the clock readings after the first ``skip`` steps."""
    return (len(times) - 1 - skip) / (times[-1] - times[skip])


def st_train(model_dir: Path, device: str, texts: list[str], batch: int, steps: int, bf16: bool, work: Path
             ) -> list[float]:
    """``SentenceTransformerTrainer`` for ``steps`` steps on (s, s) pairs; the clock after each step."""
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformerTrainer, SentenceTransformerTrainingArguments,
                                       losses)
    from transformers import TrainerCallback

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            times.append(time.perf_counter())

    model = st_model(model_dir, device, 32)
    arguments = SentenceTransformerTrainingArguments(
        output_dir=str(work), per_device_train_batch_size=batch, max_steps=steps, learning_rate=3e-5, warmup_steps=0,
        bf16=bf16, eval_strategy="no", save_strategy="no", logging_strategy="no", report_to="none",
        dataloader_drop_last=True, seed=42, disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=model, args=arguments, loss=losses.MultipleNegativesRankingLoss(
        model, scale=20.0), train_dataset=Dataset.from_dict({"anchor": texts, "positive": texts}), callbacks=[Clock()])
    trainer.train()
    return times


def cselab_train(model_dir: Path, device: str, corpus: Path, batch: int, steps: int, bf16: bool, out: Path
                 ) -> list[float]:
    """``cselab``'s ``train`` of ``simcse`` (the same work) for ``steps`` steps on ``corpus``; the clock after each
    step."""
    from cselab.train.config.methods import load_method
    from cselab.train.run.callbacks import Callback
    from cselab.train.run.options import RunOptions
    from cselab.train.run.trainer import train

    times: list[float] = []

    class Clock(Callback):
        def on_step(self, state, control):
            synchronize(device)
            times.append(time.perf_counter())

    method = load_method("simcse", [*SAME_WORK, f"training.batch_size={batch}", f"training.max_steps={steps}",
                                    "training.max_length=32", "training.dev=none", f"training.eval_steps={steps}",
                                    f"training.mixed_precision={'bf16' if bf16 else 'no'}"])
    train(method, str(model_dir), str(corpus), out, RunOptions(progress=False, callbacks=[Clock()]))
    return times
