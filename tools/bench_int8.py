#!/usr/bin/env python3
"""int8: accuracy (SQNR against fp32) and speed (against edgesdk fp32 and ONNX Runtime's int8).

    python tools/bench_int8.py accuracy                 # SQNR of every zoo model + PP-OCR, per method
    python tools/bench_int8.py accuracy --models resnet18 --methods minmax mse
    python tools/bench_int8.py speed --threads 1 2      # MobileNetV2 and ResNet-18 at 224x224

accuracy: each model is quantized by edgesdk's post-training quantization from 64 calibration
inputs and run on 16 held-out inputs; SQNR = 10 log10(sum fp32^2 / sum (int8 - fp32)^2) over all
outputs, in dB (the target is at least 30 dB). Inputs are standard normal (the zoo has random
weights; PP-OCR takes images in [-1, 1], given as uniform noise in that range).

speed: batch 1, one process, rounds interleaved: edgesdk cpu fp32, edgesdk cpu int8 (the model
quantized by edgesdk), ONNX Runtime fp32 and ONNX Runtime int8 (the same model quantized by
onnxruntime.quantization.quantize_static: QDQ, per-channel int8 weights, int8 activations, the
format ONNX Runtime recommends on x86). Medians in ms and the ratios the targets are stated in.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from edgesdk import Session  # noqa: E402
from edgesdk.loader import load_model  # noqa: E402
from edgesdk.passes import optimize  # noqa: E402
from edgesdk.profile.latency import time_calls  # noqa: E402
from edgesdk.quant.calibrate import METHODS  # noqa: E402
from edgesdk.quant.ptq import quantize_graph  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from bench import ort_session  # noqa: E402  (tools/bench.py: the same ONNX Runtime settings)

ACCURACY_MODELS = ["lenet5", "mobilenet_v2", "mobilenet_v3_style", "resnet18", "squeezenet", "oddnet",
                   "ppocr_v4_det", "ppocr_v4_rec", "ppocr_mobile_v2_cls"]
SPEED_MODELS = ["mobilenet_v2", "resnet18"]
CALIBRATION, HELD_OUT = 64, 16


def model_file(name: str, shape: tuple[int, ...] | None = None) -> str:
    from zoo import export_onnx, get_spec
    return str(export_onnx(name, input_shape=shape or get_spec(name).input_shape))


PPOCR_SHAPES = {"ppocr_v4_det": (1, 3, 96, 96), "ppocr_v4_rec": (1, 3, 48, 160), "ppocr_mobile_v2_cls": (1, 3, 48, 192)}


def ppocr_file(name: str) -> tuple[str, tuple[int, ...]]:
    """The PP-OCR file of the rapidocr_onnxruntime wheel (fetched by tools/real_models.py) and an input shape."""
    sys.path.insert(0, str(ROOT / "tools"))
    import real_models
    out_dir = ROOT / "tests" / ".cache" / "real_models" / real_models.C.RAPIDOCR.replace("==", "-")
    if not (out_dir / f"{name}.onnx").exists():
        real_models.fetch_rapidocr(ROOT / "tests" / ".cache" / "real_models" / "wheels", out_dir)
    return str(out_dir / f"{name}.onnx"), PPOCR_SHAPES[name]


def load(name: str):
    if name.startswith("ppocr_"):
        path, shape = ppocr_file(name)
        graph = load_model(path, {"x": shape}, None)
        low, high = -1.0, 1.0
    else:
        graph = load_model(model_file(name), None, None)
        low = high = None
    optimize(graph)
    return graph, (low, high)


def samples(graph, n: int, seed: int, bounds) -> np.ndarray:
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(seed)
    if bounds[0] is not None:
        return rng.uniform(bounds[0], bounds[1], (n,) + tuple(shape[1:])).astype(np.float32)
    return rng.standard_normal((n,) + tuple(shape[1:])).astype(np.float32)


def sqnr_db(reference: np.ndarray, approx: np.ndarray) -> float:
    noise = float(np.sum((approx.astype(np.float64) - reference) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(signal / noise)


def accuracy(args) -> list[dict]:
    rows = []
    for name in args.models:
        graph, bounds = load(name)
        calib, held = samples(graph, CALIBRATION, 0, bounds), samples(graph, HELD_OUT, 1, bounds)
        ref = Session(graph, backend="cpu", optimize=False)
        input_name = graph.inputs[0]
        want = [np.concatenate([ref.run({input_name: x[None]})[o].reshape(-1) for o in ref.output_names])
                for x in held]
        row = {"model": name}
        for method in args.methods:
            started = time.perf_counter()
            qgraph, report = quantize_graph(graph, calib, method=method)
            q = Session(qgraph, backend=args.backend, optimize=False)
            got = [np.concatenate([q.run({input_name: x[None]})[o].reshape(-1) for o in q.output_names]) for x in held]
            row[method] = round(sqnr_db(np.concatenate(want), np.concatenate(got)), 1)
            row[f"{method}_float_ops"] = len(report.float_ops)
            row[f"{method}_seconds"] = round(time.perf_counter() - started, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def ort_quantized(path: str, calib: np.ndarray, input_name: str, out_dir: Path) -> str:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {input_name: x[None]}
    out = out_dir / (Path(path).stem + ".qdq.onnx")
    quantize_static(path, str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return str(out)


def speed(args) -> list[dict]:
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = model_file(name, (1, 3, 224, 224))
            graph = load_model(path, None, None)
            optimize(graph)
            bounds = (None, None)
            calib = samples(graph, CALIBRATION, 0, bounds)
            qgraph, _ = quantize_graph(graph, calib, method="minmax")
            ort_q = ort_quantized(path, calib, graph.inputs[0], Path(tmp))
            x = {graph.inputs[0]: samples(graph, 1, 2, bounds)}
            for threads in args.threads:
                runners = {
                    "edgesdk_fp32": Session(graph, backend="cpu", threads=threads, optimize=False).run,
                    "edgesdk_int8": Session(qgraph, backend="cpu", threads=threads, optimize=False).run,
                    "ort_fp32": (lambda s: (lambda feeds: s.run(None, feeds)))(ort_session(path, threads)),
                    "ort_int8": (lambda s: (lambda feeds: s.run(None, feeds)))(ort_session(ort_q, threads)),
                }
                times = {k: [] for k in runners}
                for _ in range(args.rounds):
                    for key, run in runners.items():
                        times[key] += time_calls(lambda: run(x), warmup=2, min_runs=5,
                                                 min_time_s=args.min_time / args.rounds)
                med = {k: 1000 * float(np.median(v)) for k, v in times.items()}
                row = {"model": name, "threads": threads, **{f"{k}_ms": round(v, 3) for k, v in med.items()},
                       "int8_speedup_vs_edgesdk_fp32": round(med["edgesdk_fp32"] / med["edgesdk_int8"], 2),
                       "edgesdk_int8_over_ort_int8": round(med["edgesdk_int8"] / med["ort_int8"], 2)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--models", nargs="+", default=ACCURACY_MODELS)
    a.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    a.add_argument("--backend", default="reference")
    s = sub.add_parser("speed")
    s.add_argument("--models", nargs="+", default=SPEED_MODELS)
    s.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    s.add_argument("--rounds", type=int, default=5)
    s.add_argument("--min-time", type=float, default=4.0, help="seconds per runtime per thread count")
    args = p.parse_args(argv)
    print(f"# {platform.processor() or platform.machine()} {time.strftime('%Y-%m-%d')} "
          f"python tools/bench_int8.py {' '.join(argv if argv is not None else sys.argv[1:])}", flush=True)
    (accuracy if args.what == "accuracy" else speed)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
