#!/usr/bin/env python3
"""Time to open a packed model next to ONNX's load + ONNX Runtime session creation.

    python tools/bench_package_open.py                       # full-size MobileNetV2 from the zoo
    python tools/bench_package_open.py --model m.onnx --runs 15
    python tools/bench_package_open.py --first-open 7        # also the first open in new processes

The ONNX model is imported (edgesdk.loader.load_model), optimised (edgesdk.passes.optimize) and
saved as a package once; then, alternating in one process so machine noise hits all of them:
``load_package`` (with and without the checksum), ``onnx.load`` + ``InferenceSession`` on the
loaded proto, and ``onnx.load`` + ``InferenceSession`` on the file path. The ratio is the package
open time over the faster ONNX Runtime variant (medians).

Opening the same file again and again reuses memory the allocator already holds; a process opens
its model once, into fresh pages (load_package reads the file into private memory). With
``--first-open N`` each side is also timed as the first open in N new processes (imports and a
tiny warm-up done first, so that only the open itself is timed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from edgesdk.loader import load_model  # noqa: E402
from edgesdk.models import default_model_path  # noqa: E402
from edgesdk.package import load_package, save_package  # noqa: E402
from edgesdk.passes import optimize  # noqa: E402


DIGITS = default_model_path()  # the tiny model each new process warms up on


def onnx_runtime_open(path: Path, from_proto: bool) -> None:
    import onnx
    import onnxruntime as ort
    model = onnx.load(str(path))
    source = model.SerializeToString() if from_proto else str(path)
    ort.InferenceSession(source, providers=["CPUExecutionProvider"])


# Run in a new process: warm up on a tiny model (code paths, lazy imports), then time one open.
_FIRST_OPEN = textwrap.dedent("""
    import sys, time
    side, model, warm = sys.argv[1:4]
    if side == "package":
        from edgesdk.package import load_package as open_model
    else:
        import onnx, onnxruntime as ort
        def open_model(path):
            ort.InferenceSession(onnx.load(str(path)).SerializeToString(), providers=["CPUExecutionProvider"])
    open_model(warm)
    start = time.perf_counter()
    open_model(model)
    print(time.perf_counter() - start)
""")


def first_opens(side: str, model: Path, warm: Path, processes: int) -> float:
    """Median time of the first open of ``model`` in ``processes`` new processes."""
    times = []
    for _ in range(processes):
        out = subprocess.run([sys.executable, "-c", _FIRST_OPEN, side, str(model), str(warm)], check=True,
                             capture_output=True, text=True, cwd=ROOT).stdout
        times.append(float(out.split()[-1]))
    return statistics.median(times)


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
    parser.add_argument("--first-open", type=int, default=0, metavar="N",
                        help="also time the first open in N new processes")
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
        first = {}
        if args.first_open:
            warm = Path(tmp) / "warm.edgepkg"
            save_package(load_model(DIGITS), warm)
            first = {"load_package": first_opens("package", package, warm, args.first_open),
                     "onnx_load_ort_session_proto": first_opens("onnx", onnx_path, DIGITS, args.first_open)}
    baseline = min(t["onnx_load_ort_session_proto"], t["onnx_load_ort_session_path"])
    report = {
        "model": str(onnx_path), "package_bytes": info.file_size, "runs": args.runs,
        "seconds": t,
        "ratio": t["load_package"] / baseline,
        "ratio_no_checksum": t["load_package_no_checksum"] / baseline,
    }
    if first:
        report.update(first_open_processes=args.first_open, first_open_seconds=first,
                      first_open_ratio=first["load_package"] / first["onnx_load_ort_session_proto"])
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{onnx_path.name}: package {info.file_size / 1e6:.1f} MB, median of {args.runs} runs")
    for name, seconds in t.items():
        print(f"  {name:30s} {seconds * 1e3:8.2f} ms")
    print(f"  ratio load_package / ONNX Runtime open: {report['ratio']:.3f} "
          f"(without checksum {report['ratio_no_checksum']:.3f})")
    if first:
        print(f"first open in a new process, median of {args.first_open}:")
        for name, seconds in first.items():
            print(f"  {name:30s} {seconds * 1e3:8.2f} ms")
        print(f"  ratio: {report['first_open_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
