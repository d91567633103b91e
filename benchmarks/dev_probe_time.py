"""What one training-time evaluation costs: a dev set (``training.dev``, :mod:`cselab.probes.dev`) scored once on
an encoder, with its figures and wall time. A transfer dev set encodes every train/dev sentence of its tasks and
trains SentEval's classifiers; an STS one encodes a few thousand pairs.

    CSELAB_DATA_DIR=../shared/data python benchmarks/dev_probe_time.py --dev transfer-dev-avg [--model minilm]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from cselab.encoders import load_encoder
from cselab.probes.dev import dev_names, dev_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dev", default="transfer-dev-avg", choices=[n for n in dev_names() if n != "none"])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--limit", type=int, help="pairs (STS) or lines per file (transfer)")
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    encoder = load_encoder(args.model, device="cpu", cache=False)
    clock = time.perf_counter()
    probe = dev_set(args.dev, args.data_dir, args.limit)
    assert probe is not None  # (none is not a choice)
    read_s = time.perf_counter() - clock
    clock = time.perf_counter()
    result = probe.run(encoder)
    print(json.dumps({"dev": args.dev, "model": args.model, "scores": result.scores, "headline": result.headline,
                      "read_s": round(read_s, 1), "run_s": round(time.perf_counter() - clock, 1),
                      "cpus": os.cpu_count(), "machine": platform.machine()}, indent=1))


if __name__ == "__main__":
    main()
