#!/usr/bin/env python3
"""LiteRT (ai-edge-litert, XNNPACK) as a peer of edgesdk: ONNX -> int8 / fp32 .tflite, and timing.

Runs with the peers environment's Python (``make peers-litert`` builds .peers-litert/), never
edgesdk's: TensorFlow and onnx2tf pin numpy, onnx and protobuf versions edgesdk's venv does not
have. It imports nothing of edgesdk; tools/bench_int8.py starts it as a subprocess.

    .peers-litert/bin/python tools/peers/litert_runner.py convert --onnx M.onnx --calib calib.npy
    .peers-litert/bin/python tools/peers/litert_runner.py time --model M.tflite --threads 1 --runs 50
    .peers-litert/bin/python tools/peers/litert_runner.py serve      # JSON lines on stdin/stdout

convert: onnx2tf writes the model NHWC (it transposes the NCHW graph and its input), a float32
.tflite and, calibrated on the given inputs, a full-integer quantized one: every op int8,
per-channel symmetric int8 weights, per-tensor asymmetric int8 activations, **int8 input and
output** (onnx2tf's ``*_full_integer_quant.tflite``, ``-iqd int8 -oqd int8``). int8 rather than
uint8: TFLite's quantization spec is int8 (per-channel weights exist only for int8; uint8 is the
legacy per-tensor scheme, and uint8 I/O only adds a requantize op at each end of an int8 graph).
int8 I/O rather than float32 I/O: the graph holds no Quantize/Dequantize op at its ends, and the
runner quantizes the input outside the timed call, so LiteRT's time is its int8 graph alone (a
few tens of microseconds less than edgesdk's and ONNX Runtime's, which quantize their float input
inside the run: the comparison leans, slightly, in LiteRT's favour). The calibration .npy is in the
ONNX layout (N, C, H, W), float32, the inputs exactly as edgesdk and ONNX Runtime are calibrated
with; it is transposed to NHWC for onnx2tf, with mean 0 and std 1 (onnx2tf's (x - mean) / std
normalisation left as the identity). The equivalent command line::

    onnx2tf -i M.onnx -o OUT -oiqt -qt per-channel -iqd int8 -oqd int8 \\
        -cind INPUT calib_nhwc.npy "[[[[0.0,...]]]]" "[[[[1.0,...]]]]"

The two .tflite files are cached under tests/.cache/litert/<model stem>-<key>/ with a meta.json
(versions, command, seconds) and onnx2tf's log; the key hashes the ONNX file, the calibration
data, the conversion settings and the onnx2tf and TensorFlow versions.

time / serve: ``ai_edge_litert.interpreter.Interpreter(model_path, num_threads=T)`` with its
default delegate, XNNPACK (LiteRT's one default delegate on CPU; the runner counts the DELEGATE
nodes it put in the graph: ``"xnnpack": true`` and ``"xnnpack_partitions"``, 1 when the delegate
took the whole graph). A timed call is set_tensor(input) + invoke() + get_tensor
(output), as edgesdk's Session.run and ONNX Runtime's run pass an input and return an output.
Outputs are given back dequantized to float32 and in the ONNX layout (a 4-D NHWC output is
transposed to NCHW), so the caller can compare them with fp32 (SQNR).

serve: one JSON object per line on stdin, one answer per line on stdout (LiteRT's and
TensorFlow's own prints go to stderr):
  {"op": "load", "id": K, "model": PATH, "threads": T}           -> {"ok": true, "xnnpack": ..., "input": ...}
  {"op": "feed", "id": K, "input": NPY}    the input timed calls run on (one sample, ONNX layout)
  {"op": "time", "id": K, "warmup": 2, "min_runs": 5, "min_time_s": 0.8}  -> {"ok": true, "seconds": [...]}
  {"op": "run", "id": K, "inputs": NPY, "outputs": NPY}  N samples in, N outputs (float32) written
  {"op": "quit"}
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "tests" / ".cache" / "litert"
SETTINGS = {"quant_type": "per-channel", "input_quant_dtype": "int8", "output_quant_dtype": "int8",
            "mean": 0.0, "std": 1.0, "variant": "full_integer_quant"}
# onnx2tf reads this file from its working directory for its own check data on image-like
# inputs, else fetches it from GitHub (no network here); with -cind given, our inputs are used
# for calibration and checks, so a placeholder of that name keeps it offline.
_PLACEHOLDER = "calibration_image_sample_data_20x128x128x3_float32.npy"


# -- convert ---------------------------------------------------------------------------------------
def _versions() -> dict[str, str]:
    from importlib.metadata import version
    return {p: version(p) for p in ("onnx2tf", "tensorflow", "ai-edge-litert", "onnx", "numpy")}


def _key(onnx_path: Path, calib: np.ndarray, versions: dict[str, str]) -> str:
    h = hashlib.sha256(onnx_path.read_bytes())
    h.update(np.ascontiguousarray(calib).tobytes())
    h.update(repr(calib.shape).encode())
    h.update(json.dumps([SETTINGS, versions["onnx2tf"], versions["tensorflow"]], sort_keys=True).encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _output_to(path: Path):
    """File descriptors 1 and 2 (Python's prints, TensorFlow's C++ logs) into ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def convert(onnx_path: Path, calib_path: Path, input_name: str | None, cache: Path) -> dict:
    """The int8 and fp32 .tflite of ``onnx_path`` (converted once, then from the cache)."""
    import onnx
    calib = np.load(calib_path).astype(np.float32)
    versions = _versions()
    if input_name is None:
        model = onnx.load(str(onnx_path), load_external_data=False)
        initializers = {i.name for i in model.graph.initializer}
        input_name = next(i.name for i in model.graph.input if i.name not in initializers)
    out = cache / f"{onnx_path.stem}-{_key(onnx_path, calib, versions)}"
    files = {"int8": out / "int8.tflite", "fp32": out / "fp32.tflite"}
    if (out / "meta.json").exists() and all(p.exists() for p in files.values()):
        meta = json.loads((out / "meta.json").read_text())
        return {**meta, **{k: str(p) for k, p in files.items()}, "cached": True}
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=cache))
    try:
        nhwc = calib.transpose(0, 2, 3, 1) if calib.ndim == 4 else calib
        channels = nhwc.shape[-1]
        np.save(work / "calib_nhwc.npy", np.ascontiguousarray(nhwc))
        np.save(work / _PLACEHOLDER, np.zeros((20, 128, 128, 3), np.float32))
        # onnx2tf saves its shape-inferred / simplified graph over the file it is given (its
        # onnx.save(..., input_onnx_file_path)): a copy, so the zoo's cached export stays the one
        # edgesdk and ONNX Runtime are measured on
        source = work / "input.onnx"
        shutil.copyfile(onnx_path, source)
        mean = np.full((1,) * (nhwc.ndim - 1) + (channels,), SETTINGS["mean"], np.float32)
        std = np.full_like(mean, SETTINGS["std"])
        command = (f"onnx2tf -i {onnx_path} -o OUT -oiqt -qt {SETTINGS['quant_type']} "
                   f"-iqd {SETTINGS['input_quant_dtype']} -oqd {SETTINGS['output_quant_dtype']} "
                   f"-cind {input_name} calib_nhwc.npy \"{mean.tolist()}\" \"{std.tolist()}\"")
        started = time.perf_counter()
        here = os.getcwd()
        os.chdir(work)
        failure = None
        try:
            with _output_to(work / "onnx2tf.log"):
                import onnx2tf
                onnx2tf.convert(input_onnx_file_path=str(source), output_folder_path=str(work / "saved_model"),
                                output_integer_quantized_tflite=True, quant_type=SETTINGS["quant_type"],
                                custom_input_op_name_np_data_path=[[input_name, str(work / "calib_nhwc.npy"),
                                                                    mean, std]],
                                input_quant_dtype=SETTINGS["input_quant_dtype"],
                                output_quant_dtype=SETTINGS["output_quant_dtype"], non_verbose=True)
        except BaseException as exc:  # onnx2tf reports errors with sys.exit(1)
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            os.chdir(here)
        seconds = time.perf_counter() - started
        produced = {"int8": f"*_{SETTINGS['variant']}.tflite", "fp32": "*_float32.tflite"}
        found = {k: sorted((work / "saved_model").glob(pattern)) for k, pattern in produced.items()}
        missing = [produced[k] for k, paths in found.items() if len(paths) != 1]
        if failure or missing:
            tail = (work / "onnx2tf.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"onnx2tf failed on {onnx_path} ({failure or 'no ' + ', '.join(missing)}); "
                             f"its log ends:\n{tail}")
        staged = work / "result"
        staged.mkdir()
        for k, paths in found.items():
            shutil.copyfile(paths[0], staged / files[k].name)
        shutil.copyfile(work / "onnx2tf.log", staged / "onnx2tf.log")
        meta = {"onnx": str(onnx_path), "input": input_name, "calibration_samples": int(calib.shape[0]),
                "settings": SETTINGS, "versions": versions, "command": command, "seconds": round(seconds, 1)}
        (staged / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        if out.exists():  # a partial result of an interrupted run
            shutil.rmtree(out)
        staged.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {**meta, **{k: str(p) for k, p in files.items()}, "cached": False}


# -- run and time ------------------------------------------------------------------------------------
class Model:
    """One .tflite in an Interpreter (XNNPACK, ``threads``), fed and read in the ONNX layout."""

    def __init__(self, path: str, threads: int) -> None:
        from ai_edge_litert.interpreter import Interpreter
        self.interpreter = Interpreter(model_path=path, num_threads=threads)
        self.interpreter.allocate_tensors()
        # The default delegate replaces the nodes it takes by DELEGATE nodes (LiteRT's own log
        # line about it comes once per process, so it cannot tell for a second model).
        self.delegate_partitions = sum(op["op_name"] == "DELEGATE" for op in self.interpreter._get_ops_details())
        self.path, self.threads = path, threads
        self.input = self.interpreter.get_input_details()[0]
        self.output = self.interpreter.get_output_details()[0]
        self.fed: np.ndarray | None = None

    def describe(self) -> dict:
        def io(d):
            return {"name": d["name"], "shape": [int(x) for x in d["shape"]], "dtype": np.dtype(d["dtype"]).name,
                    "scale": float(d["quantization"][0]), "zero_point": int(d["quantization"][1])}
        return {"model": self.path, "threads": self.threads, "xnnpack": self.delegate_partitions > 0,
                "xnnpack_partitions": self.delegate_partitions,
                "input": io(self.input), "output": io(self.output)}

    def prepared(self, x: np.ndarray) -> np.ndarray:
        """One sample in the ONNX layout (C, H, W) or (1, C, H, W) -> the interpreter's input:
        NHWC, and quantized with the input's scale and zero point for an int8 model."""
        shape = tuple(int(d) for d in self.input["shape"])
        x = np.asarray(x, np.float32).reshape((1,) + tuple(x.shape[-(len(shape) - 1):]))
        if x.ndim == 4 and x.shape != shape:
            x = x.transpose(0, 2, 3, 1)
        if x.shape != shape:
            raise SystemExit(f"{self.path}: input of shape {list(x.shape)}, the model takes {list(shape)}")
        dtype = np.dtype(self.input["dtype"])
        if dtype.kind in "iu":
            scale, zero = self.input["quantization"]
            info = np.iinfo(dtype)
            x = np.clip(np.round(x / scale) + zero, info.min, info.max)
        return np.ascontiguousarray(x.astype(dtype))

    def call(self, x: np.ndarray) -> np.ndarray:
        self.interpreter.set_tensor(self.input["index"], x)
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.output["index"])

    def dequantized(self, y: np.ndarray) -> np.ndarray:
        """An output as float32 in the ONNX layout."""
        if np.dtype(self.output["dtype"]).kind in "iu":
            scale, zero = self.output["quantization"]
            y = (y.astype(np.float32) - zero) * np.float32(scale)
        y = y.astype(np.float32)
        if y.ndim == 4:  # onnx2tf writes 4-D outputs NHWC
            y = y.transpose(0, 3, 1, 2)
        return y

    def time(self, warmup: int, min_runs: int, min_time_s: float, max_runs: int = 10_000) -> list[float]:
        """Seconds per call, as edgesdk.profile.latency.time_calls counts them."""
        if self.fed is None:
            raise SystemExit("time before feed: no input")
        x = self.fed
        for _ in range(warmup):
            self.call(x)
        samples: list[float] = []
        start = time.perf_counter()
        while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() - start < min_time_s):
            t0 = time.perf_counter()
            self.call(x)
            samples.append(time.perf_counter() - t0)
        return samples


def serve() -> int:
    """The JSON-lines loop (see the module docstring); answers go to the real stdout, everything
    else printed meanwhile to stderr."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # TensorFlow's and LiteRT's prints must not interleave with the answers
    sys.stdout = sys.stderr
    models: dict[str, Model] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "quit":
                answers.write(json.dumps({"ok": True}) + "\n")
                return 0
            if op == "load":
                models[request["id"]] = model = Model(request["model"], int(request["threads"]))
                answer = {"ok": True, **model.describe()}
            elif op == "feed":
                model = models[request["id"]]
                model.fed = model.prepared(np.load(request["input"]))
                answer = {"ok": True}
            elif op == "time":
                seconds = models[request["id"]].time(int(request.get("warmup", 2)), int(request.get("min_runs", 5)),
                                                     float(request.get("min_time_s", 1.0)))
                answer = {"ok": True, "seconds": seconds}
            elif op == "run":
                model = models[request["id"]]
                xs = np.load(request["inputs"])
                ys = np.stack([model.dequantized(model.call(model.prepared(x))) for x in xs])
                np.save(request["outputs"], ys)
                answer = {"ok": True, "shape": list(ys.shape)}
            else:
                answer = {"ok": False, "error": f"unknown op {op!r}"}
        except (KeyError, ValueError, OSError, SystemExit) as exc:
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("convert", help="ONNX -> int8 and fp32 .tflite (cached); JSON on stdout")
    c.add_argument("--onnx", type=Path, required=True)
    c.add_argument("--calib", type=Path, required=True, help=".npy of N calibration inputs, ONNX layout, float32")
    c.add_argument("--input-name", help="the ONNX input (default: the first graph input)")
    c.add_argument("--cache-dir", type=Path, default=CACHE)
    t = sub.add_parser("time", help="median ms of a .tflite; JSON on stdout")
    t.add_argument("--model", required=True)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--runs", type=int, default=50)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--input", type=Path, help=".npy of one input, ONNX layout (default: standard normal)")
    sub.add_parser("serve", help="JSON lines on stdin/stdout (what tools/bench_int8.py uses)")
    args = p.parse_args(argv)
    if args.what == "serve":
        return serve()
    if args.what == "convert":
        print(json.dumps(convert(args.onnx.resolve(), args.calib, args.input_name, args.cache_dir)))
        return 0
    model = Model(args.model, args.threads)
    shape = [int(d) for d in model.input["shape"]]
    x = np.load(args.input) if args.input else np.random.default_rng(2).standard_normal(
        [shape[0], shape[3], shape[1], shape[2]] if len(shape) == 4 else shape).astype(np.float32)
    model.fed = model.prepared(x)
    seconds = model.time(args.warmup, args.runs, 0.0, max_runs=args.runs)
    print(json.dumps({**model.describe(), "runs": len(seconds), "median_ms": 1000 * float(np.median(seconds)),
                      "min_ms": 1000 * float(np.min(seconds))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
