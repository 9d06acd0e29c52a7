#!/usr/bin/env python3
"""Latency of an edgesdk backend next to ONNX Runtime's, same model, same threads, same run.

    python tools/bench.py MODEL.onnx --backend reference --threads 1
    python tools/bench.py default            # the embedded digits model
    python tools/bench.py zoo --backend cpu --threads 1 2   # the five zoo models at 224x224 (LeNet 32x32)
    python tools/bench.py resnet18 --backend cpu            # one zoo model by name

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


# The models issue 5 sets targets for, batch 1 at their full-size input (exported through the
# test zoo's cache: tests/.cache/onnx, torch needed only for a first export).
ZOO_BENCH = ["mobilenet_v2", "resnet18", "mobilenet_v3_style", "squeezenet", "lenet5"]


def resolve_models(model: str) -> list[str]:
    """'default', 'zoo', a zoo model name or a path -> model files."""
    if model == "default":
        return [str(default_model_path())]
    names = ZOO_BENCH if model == "zoo" else [model] if not Path(model).suffix else []
    if not names:
        return [model]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from zoo import export_onnx, get_spec
    return [str(export_onnx(name, input_shape=get_spec(name).input_shape)) for name in names]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an .onnx file, 'default' (the embedded digits model), 'zoo' (the five "
                                 "benchmark models) or one zoo model name")
    p.add_argument("--backend", default="reference")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--threads", type=int, nargs="+", default=[1], help="one run per thread count")
    p.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds per runtime, all rounds together")
    p.add_argument("--input-shape", action="append", metavar="NAME=DxD...")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from edgesdk.cli.inputs import parse_input_shapes
    results = []
    try:
        for model in resolve_models(args.model):
            for threads in args.threads:
                r = bench(model, args.backend, threads, args.precision, args.rounds, args.min_time,
                          parse_input_shapes(args.input_shape))
                results.append(r)
                if not args.json:
                    print_result(r)
    except EdgeSDKError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    elif len(results) > 1:
        print_summary(results)
    return 0


def print_result(r: dict) -> None:
    e, o = r["edgesdk"], r["onnxruntime"]
    print(f"{Path(r['model']).name}  inputs {r['input_shapes']}  threads {r['threads']}  {r['machine']}")
    print(f"  edgesdk/{r['backend']} {r['precision']}: median {e['median_ms']:.3f} ms  min {e['min_ms']:.3f} ms  "
          f"(n={e['runs']})")
    print(f"  onnxruntime cpu     : median {o['median_ms']:.3f} ms  min {o['min_ms']:.3f} ms  (n={o['runs']})")
    print(f"  ratio edgesdk/onnxruntime: {r['ratio_median']:.2f}x median, {r['ratio_min']:.2f}x min", flush=True)


def print_summary(results: list[dict]) -> None:
    print(f"\n{'model':<40} {'threads':>7} {'edgesdk ms':>11} {'ort ms':>9} {'ratio':>6}")
    for r in results:
        print(f"{Path(r['model']).name.split('-')[0]:<40} {r['threads']:>7} {r['edgesdk']['median_ms']:>11.3f} "
              f"{r['onnxruntime']['median_ms']:>9.3f} {r['ratio_median']:>6.2f}")


if __name__ == "__main__":
    sys.exit(main())
