#!/usr/bin/env python3
"""Time to open a packed model next to ONNX's load + ONNX Runtime session creation.

    python tools/bench_package_open.py                       # full-size MobileNetV2 from the zoo
    python tools/bench_package_open.py --model m.onnx --runs 15

The ONNX model is imported (edgesdk.loader.load_model), optimised (edgesdk.passes.optimize) and
saved as a package once; then, alternating in one process so machine noise hits all of them:
``load_package`` (with and without the checksum), ``onnx.load`` + ``InferenceSession`` on the
loaded proto, and ``onnx.load`` + ``InferenceSession`` on the file path. The ratio is the package
open time over the faster ONNX Runtime variant (medians).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from edgesdk.loader import load_model  # noqa: E402
from edgesdk.package import load_package, save_package  # noqa: E402
from edgesdk.passes import optimize  # noqa: E402


def onnx_runtime_open(path: Path, from_proto: bool) -> None:
    import onnx
    import onnxruntime as ort
    model = onnx.load(str(path))
    source = model.SerializeToString() if from_proto else str(path)
    ort.InferenceSession(source, providers=["CPUExecutionProvider"])


def medians(candidates: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(runs):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="ONNX file (default: zoo MobileNetV2 at 1x3x224x224)")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.model:
        onnx_path = Path(args.model)
    else:
        from zoo import export_onnx
        onnx_path = Path(export_onnx("mobilenet_v2", input_shape=(1, 3, 224, 224)))
    graph = load_model(onnx_path)
    optimize(graph)
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "model.edgepkg"
        info = save_package(graph, package)
        load_package(package)  # warm the page cache and imports, as for the ONNX side below
        onnx_runtime_open(onnx_path, True)
        t = medians({
            "load_package": lambda: load_package(package),
            "load_package_no_checksum": lambda: load_package(package, verify=False),
            "onnx_load_ort_session_proto": lambda: onnx_runtime_open(onnx_path, True),
            "onnx_load_ort_session_path": lambda: onnx_runtime_open(onnx_path, False),
        }, args.runs)
    baseline = min(t["onnx_load_ort_session_proto"], t["onnx_load_ort_session_path"])
    report = {
        "model": str(onnx_path), "package_bytes": info.file_size, "runs": args.runs,
        "seconds": t,
        "ratio": t["load_package"] / baseline,
        "ratio_no_checksum": t["load_package_no_checksum"] / baseline,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{onnx_path.name}: package {info.file_size / 1e6:.1f} MB, median of {args.runs} runs")
    for name, seconds in t.items():
        print(f"  {name:30s} {seconds * 1e3:8.2f} ms")
    print(f"  ratio load_package / ONNX Runtime open: {report['ratio']:.3f} "
          f"(without checksum {report['ratio_no_checksum']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
