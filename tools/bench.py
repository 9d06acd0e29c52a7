#!/usr/bin/env python3
"""Latency of an edgesdk backend next to ONNX Runtime's, same model, same threads, same run.

    python tools/bench.py MODEL.onnx --backend reference --threads 1
    python tools/bench.py default            # the embedded digits model

Both runtimes are measured in alternating rounds inside one process (so machine noise hits both),
each round warming up and then repeating for a minimum time. The ratio is edgesdk's median over
ONNX Runtime's median: below 1.0 means edgesdk is faster.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgesdk import Session  # noqa: E402
from edgesdk.errors import EdgeSDKError  # noqa: E402
from edgesdk.models import default_model_path  # noqa: E402
from edgesdk.profile.latency import LatencyStats, time_calls  # noqa: E402


def ort_session(path: str, threads: int, input_shapes: dict):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def bench(model: str, backend: str, threads: int, precision: str, rounds: int, min_time: float,
          input_shapes: dict | None) -> dict:
    sess = Session(model, backend=backend, precision=precision, threads=threads, input_shapes=input_shapes)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in sess.input_shapes.items()}
    ort_sess = ort_session(model, threads, input_shapes or {})
    ours, theirs = [], []
    for _ in range(rounds):
        ours += time_calls(lambda: sess.run(feeds), warmup=2, min_runs=5, min_time_s=min_time / rounds)
        theirs += time_calls(lambda: ort_sess.run(None, feeds), warmup=2, min_runs=5, min_time_s=min_time / rounds)
    a, b = LatencyStats.from_seconds(ours), LatencyStats.from_seconds(theirs)
    return {"model": model, "backend": backend, "precision": precision, "threads": threads,
            "input_shapes": {k: list(v) for k, v in sess.input_shapes.items()},
            "edgesdk": a.to_dict(), "onnxruntime": b.to_dict(), "ratio_median": a.median_ms / b.median_ms,
            "ratio_min": a.min_ms / b.min_ms, "machine": f"{platform.machine()} {platform.processor() or ''}".strip()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an .onnx file, or 'default' for the embedded digits model")
    p.add_argument("--backend", default="reference")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds per runtime, all rounds together")
    p.add_argument("--input-shape", action="append", metavar="NAME=DxD...")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from edgesdk.cli import _parse_input_shapes
    model = str(default_model_path()) if args.model == "default" else args.model
    try:
        r = bench(model, args.backend, args.threads, args.precision, args.rounds, args.min_time,
                  _parse_input_shapes(args.input_shape))
    except EdgeSDKError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    e, o = r["edgesdk"], r["onnxruntime"]
    print(f"{Path(model).name}  inputs {r['input_shapes']}  threads {args.threads}  {r['machine']}")
    print(f"  edgesdk/{args.backend} {args.precision}: median {e['median_ms']:.3f} ms  min {e['min_ms']:.3f} ms  "
          f"(n={e['runs']})")
    print(f"  onnxruntime cpu     : median {o['median_ms']:.3f} ms  min {o['min_ms']:.3f} ms  (n={o['runs']})")
    print(f"  ratio edgesdk/onnxruntime: {r['ratio_median']:.2f}x median, {r['ratio_min']:.2f}x min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
