#!/usr/bin/env python3
"""int8: accuracy (SQNR against fp32) and speed (against edgesdk fp32 and ONNX Runtime's int8).

    python tools/bench_int8.py accuracy                 # SQNR of every zoo model + PP-OCR, per method
    python tools/bench_int8.py accuracy --models resnet18 --methods minmax mse
    python tools/bench_int8.py accuracy --models real   # the exported real-model catalog (tools/real_models.py)
    python tools/bench_int8.py accuracy --models ppocr_v4_rec --ort   # and ONNX Runtime's int8 beside it
    python tools/bench_int8.py speed --threads 1 2      # MobileNetV2 and ResNet-18 at 224x224
    python tools/bench_int8.py speed --threads 1 --peers litert   # LiteRT required (make peers-litert)
    python tools/bench_int8.py speed --models real --threads 1 --peers none   # the real catalog, ORT beside
    EDGESDK_CPU_ISA=avx2 python tools/bench_int8.py speed --weight-bits 7 --peers none   # 7-bit weights

accuracy: each model is quantized by edgesdk's post-training quantization from 64 calibration
inputs and run on 16 held-out inputs (the int8 model on --backend, cpu by default); SQNR =
10 log10(sum fp32^2 / sum (int8 - fp32)^2) over all outputs, in dB (the target is at least 30 dB).
Inputs are standard normal for the zoo and the real-model catalog (random weights) and printed
text for PP-OCR (trained weights; ``text_images``), where each row also gives what an OCR user
sees (``task_agreement``: det mask IoU, rec lines decoded alike, cls labels alike). ``--ort`` adds
ONNX Runtime's int8 of the same file on the same inputs (quantize_static, QDQ, per-channel, min-max).

speed: batch 1, rounds interleaved: edgesdk cpu fp32, edgesdk cpu int8 (the model quantized by
edgesdk), ONNX Runtime fp32 and ONNX Runtime int8 (the same model quantized by
onnxruntime.quantization.quantize_static: QDQ, per-channel int8 weights, int8 activations, the
format ONNX Runtime recommends on x86) and, with the LiteRT peer, LiteRT int8 and fp32: the ONNX
model converted by onnx2tf (NHWC; full-integer quantization calibrated on the same 64 inputs as
edgesdk and ONNX Runtime, per-channel int8 weights, int8 activations, int8 input and output) run
by ai_edge_litert's Interpreter with its default XNNPACK delegate and num_threads = the thread
count (tools/peers/litert_runner.py says why int8 I/O, and caches the conversion).

LiteRT lives in its own environment (.peers-litert/, ``make peers-litert``: TensorFlow and onnx2tf
pin numpy/onnx/protobuf versions edgesdk's venv must not get), so it runs in a second process,
tools/peers/litert_runner.py serve, driven over a pipe. Every runtime is timed in blocks
(time_calls: 2 warm-up calls, then at least 5 calls and min_time / rounds seconds); a round is one
block of each runtime, the LiteRT blocks in its process, and the order is reversed every other
round (edgesdk, ONNX Runtime, LiteRT, then LiteRT, ONNX Runtime, edgesdk), so drift in the
machine's speed reaches every runtime alike. One process computes at a time: the other waits on
the pipe. ``--peers auto`` (the default) adds LiteRT when .peers-litert exists and says, on a '#'
line, that it was skipped and how to install it when it does not; ``--peers litert`` requires it.

Medians in ms and the ratios the targets are stated in (edgesdk int8 / ONNX Runtime int8 and
edgesdk int8 / LiteRT int8: below 1 is edgesdk faster), and the SQNR in dB of every int8 runtime
(and of LiteRT fp32, which checks the conversion itself) against edgesdk fp32 on 16 held-out
inputs, so that a broken conversion shows beside its time.

--weight-bits 7 quantizes weights to [-64, 64] (edgesdk's --int8-weight-bits 7 and ONNX Runtime's
reduce_range=True; LiteRT's conversion keeps 8-bit weights): the layers then run edgesdk's narrow
vpmaddubsw GEMM on the avx2 and avx512 levels. Each row names the kernel level edgesdk ran
(EDGESDK_CPU_ISA forces a lower one; the peers always run the machine's best).
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
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
from edgesdk.native import active_isa as edgesdk_isa  # noqa: E402
from edgesdk.passes import optimize  # noqa: E402
from edgesdk.profile.latency import time_calls  # noqa: E402
from edgesdk.quant.calibrate import METHODS  # noqa: E402
from edgesdk.quant.float_fallback import output_sqnr_db  # noqa: E402
from edgesdk.quant.ptq import quantize_graph  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from bench import ort_session  # noqa: E402  (tools/bench.py: the same ONNX Runtime settings)

ACCURACY_MODELS = ["lenet5", "mobilenet_v2", "mobilenet_v3_style", "resnet18", "squeezenet", "oddnet",
                   "ppocr_v4_det", "ppocr_v4_rec", "ppocr_mobile_v2_cls"]
SPEED_MODELS = ["mobilenet_v2", "resnet18"]
CALIBRATION, HELD_OUT = 64, 16
SETTLE_S = 0.3  # pause before each timed block (speed)


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


# PP-OCR's own preprocessing of an RGB image in [0, 1]: det normalizes with ImageNet's mean and
# std, rec and cls map to [-1, 1] (rapidocr_onnxruntime's config.yaml).
PPOCR_KIND = {"ppocr_v4_det": "det", "ppocr_v4_rec": "rec", "ppocr_mobile_v2_cls": "cls"}
TEXT_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.,:-/ "


def load(name: str):
    """(optimized graph, inputs kind): None for the zoo and the real-model catalog (standard
    normal inputs: random weights), "det" / "rec" / "cls" for PP-OCR (printed text)."""
    if name.startswith("ppocr_"):
        graph = load_model(onnx_file(name), {"x": PPOCR_SHAPES[name]}, None)
        kind = PPOCR_KIND[name]
    else:
        graph = load_model(onnx_file(name), None, None)
        kind = None
    optimize(graph)
    return graph, kind


def onnx_file(name: str) -> str:
    """The ONNX file of a PP-OCR, real-catalog or zoo model name."""
    if name.startswith("ppocr_"):
        return ppocr_file(name)[0]
    return real_model_file(name) if name in real_model_names() else model_file(name)


def samples(graph, n: int, seed: int, kind: str | None) -> np.ndarray:
    shape = graph.tensors[graph.inputs[0]].shape
    if kind is not None:
        return text_images(kind, shape, n, seed)
    return np.random.default_rng(seed).standard_normal((n,) + tuple(shape[1:])).astype(np.float32)


def text_images(kind: str, shape, n: int, seed: int) -> np.ndarray:
    """``n`` images of printed text shaped like ``shape`` (N, 3, H, W), preprocessed as PP-OCR
    does: for "det" a page of 1-5 lines of 4-13 characters at 10-19 px, for "rec" and "cls" one
    line of 6-15 characters at 26-39 px (for "cls" half of them upside down), dark ink on a light
    background of random shades. Trained weights see what they were trained on: on uniform noise
    det's output is a sigmoid saturated at 0 and no SQNR of it means anything. Pillow's own font
    (FreeType, shipped in its wheel) draws the text: no font or image is downloaded."""
    from PIL import Image, ImageDraw, ImageFont
    _, _, h, w = shape
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, h, w), np.float32)
    letters = list(TEXT_ALPHABET)

    def word(lo: int, hi: int) -> str:
        return "".join(rng.choice(letters, int(rng.integers(lo, hi))))
    for k in range(n):
        paper, ink = int(rng.integers(170, 256)), int(rng.integers(0, 90))
        image = Image.new("RGB", (w, h), (paper, paper - int(rng.integers(0, 20)), paper))
        draw = ImageDraw.Draw(image)
        if kind == "det":
            y = int(rng.integers(0, h // 4))
            while y < h - 10:
                size = int(rng.integers(10, 20))
                draw.text((int(rng.integers(0, w // 3)), y), word(4, 14), fill=(ink,) * 3,
                          font=ImageFont.load_default(size=size))
                y += size + int(rng.integers(4, 16))
        else:
            size = int(rng.integers(26, 40))
            draw.text((int(rng.integers(0, 12)), (h - size) // 2 - 2), word(6, 16), fill=(ink,) * 3,
                      font=ImageFont.load_default(size=size))
            if kind == "cls" and rng.random() < 0.5:
                image = image.rotate(180)
        x = np.asarray(image, np.float32) / np.float32(255)
        if kind == "det":
            x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
        else:
            x = (x - np.float32(0.5)) / np.float32(0.5)
        out[k] = x.transpose(2, 0, 1)
    return out


def real_model_names() -> list[str]:
    """The real-model catalog (tools/real_models/catalog.py) without PP-OCR, which comes from
    its wheel here: torchvision, timm and ultralytics architectures with random weights."""
    import real_models  # tools/real_models.py, which imports tools/real_models/catalog.py as C
    return [s.name for s in real_models.C.CATALOG if s.source != "rapidocr"]


def real_model_file(name: str) -> str:
    """The legacy-exporter opset-17 ONNX file of a catalog model, from the export cache
    (``python tools/real_models.py export`` fills it; it needs the export venv)."""
    from real_models import C
    spec = C.BY_NAME[name]
    path = C.export_dir(spec, C.load_versions()) / f"{C.export_stem(spec, 'legacy', 17)}.onnx"
    if not path.exists():
        raise FileNotFoundError(f"{path} is not exported: python tools/real_models.py export --models {name}")
    return str(path)


def sqnr_db(reference: np.ndarray, approx: np.ndarray) -> float:
    return output_sqnr_db([reference], [approx])  # the figure --min-sqnr searches on


def accuracy(args) -> list[dict]:
    rows = []
    for name in _expand_models(args.models):
        graph, kind = load(name)
        calib, held = samples(graph, CALIBRATION, 0, kind), samples(graph, HELD_OUT, 1, kind)
        ref = Session(graph, backend="cpu", optimize=False)
        input_name = graph.inputs[0]
        want = _run_all(ref, input_name, held)
        row = {"model": name}
        for method in args.methods:
            started = time.perf_counter()
            qgraph, report = quantize_graph(graph, calib, method=method, weight_bits=args.weight_bits,
                                            min_sqnr=args.min_sqnr)
            got = _run_all(Session(qgraph, backend=args.backend, optimize=False), input_name, held)
            row[method] = round(sqnr_db(np.concatenate(want), np.concatenate(got)), 1)
            if kind is not None:
                row[f"{method}_task"] = task_agreement(kind, want, got)
            row[f"{method}_float_ops"] = len(report.float_ops)
            if report.float_fallback is not None:  # --min-sqnr: measured on the calibration inputs, not held out
                fb = report.float_fallback
                row[f"{method}_all_int8_calib"] = fb["int8_sqnr_db"]
                row[f"{method}_kept_float"] = len(fb["tensors"])
                row[f"{method}_float_macs"] = fb["float_macs_share"]
                row[f"{method}_plans"] = fb["evaluations"]
            row[f"{method}_seconds"] = round(time.perf_counter() - started, 1)
        if args.ort:
            with tempfile.TemporaryDirectory() as tmp:
                source = _fixed_shape_file(name, graph, Path(tmp))
                import onnxruntime as ort
                ort.set_default_logger_severity(3)  # the quantizer's sessions list every unused initializer
                q = ort.InferenceSession(ort_quantized(source, calib, input_name, Path(tmp), args.weight_bits),
                                         providers=["CPUExecutionProvider"])
                got = [np.concatenate([o.reshape(-1) for o in q.run(None, {input_name: x[None]})]) for x in held]
            row["ort_minmax"] = round(sqnr_db(np.concatenate(want), np.concatenate(got)), 1)
            if kind is not None:
                row["ort_minmax_task"] = task_agreement(kind, want, got)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _expand_models(names: list[str]) -> list[str]:
    """``names`` with "real" expanded to the exported real-model catalog ('#' lines name what is
    not exported)."""
    out = []
    for name in names:
        if name != "real":
            out.append(name)
            continue
        for real in real_model_names():
            try:
                real_model_file(real)
                out.append(real)
            except FileNotFoundError as e:
                print(f"# {real} skipped: {e}", flush=True)
    return out


def _run_all(sess: Session, input_name: str, xs: np.ndarray) -> list[np.ndarray]:
    """Every output of each input, flattened and joined (one vector per input)."""
    return [np.concatenate([sess.run({input_name: x[None]})[o].reshape(-1) for o in sess.output_names]) for x in xs]


def task_agreement(kind: str, want: list[np.ndarray], got: list[np.ndarray]) -> float:
    """What an OCR user sees, int8 against fp32 over the held-out inputs: det, the intersection
    over union of the text masks (probability > 0.3, DBNet's threshold, summed over all inputs);
    rec, the share of lines whose greedy CTC decoding (argmax per step, repeats merged, blank 0
    dropped) is the same string; cls, the share with the same label."""
    if kind == "det":
        a, b = np.concatenate(want) > 0.3, np.concatenate(got) > 0.3
        union = np.count_nonzero(a | b)
        return round(np.count_nonzero(a & b) / union, 3) if union else 1.0
    if kind == "rec":
        def text(v: np.ndarray) -> list[int]:
            ids = v.reshape(-1, REC_CLASSES).argmax(1)
            return [int(c) for i, c in enumerate(ids) if c != 0 and (i == 0 or c != ids[i - 1])]
        return round(float(np.mean([text(w) == text(g) for w, g in zip(want, got)])), 3)
    return round(float(np.mean([w.argmax() == g.argmax() for w, g in zip(want, got)])), 3)


REC_CLASSES = 6625  # PP-OCRv4 rec's output: (1, steps, 6625) probabilities (blank, 6623 characters, space)


def _fixed_shape_file(name: str, graph, tmp: Path) -> str:
    """The model's ONNX file with the input shape the bench uses written in (PP-OCR's files have
    dynamic height and width, which ONNX Runtime's quantizer keeps)."""
    import onnx
    model = onnx.load(onnx_file(name))
    shape = graph.tensors[graph.inputs[0]].shape
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, shape):
        dim.ClearField("dim_param")
        dim.dim_value = value
    out = tmp / f"{name}.onnx"
    onnx.save(model, out)
    return str(out)


def ort_quantized(path: str, calib: np.ndarray, input_name: str, out_dir: Path, weight_bits: int = 8) -> str:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {input_name: x[None]}
    out = out_dir / (Path(path).stem + ".qdq.onnx")
    quantize_static(path, str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, reduce_range=weight_bits == 7)
    return str(out)


PEERS_LITERT = ROOT / ".peers-litert"
LITERT_RUNNER = ROOT / "tools" / "peers" / "litert_runner.py"
LITERT_INSTALL = "make peers-litert (a separate venv: TensorFlow, onnx2tf, ai-edge-litert; see tools/peers/)"


class LiteRT:
    """tools/peers/litert_runner.py in the peers environment: ``convert`` once per model (a
    subprocess; cached by the runner), then one ``serve`` process for loading, feeding, timing
    and running .tflite models, request by request over a pipe."""

    def __init__(self, log: Path) -> None:
        self.python = str(PEERS_LITERT / "bin" / "python")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log, "wb")  # TensorFlow's and LiteRT's chatter, kept for when something fails
        self.proc = subprocess.Popen([self.python, str(LITERT_RUNNER), "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)

    def convert(self, onnx_path: str, calib: np.ndarray, tmp: Path) -> dict:
        calib_file = tmp / f"{Path(onnx_path).stem}.calib.npy"
        np.save(calib_file, calib)
        print(f"# LiteRT: {Path(onnx_path).name} -> int8 .tflite (calibrated on {len(calib)} inputs) and fp32 "
              f".tflite by onnx2tf (minutes, unless cached)", flush=True)
        done = subprocess.run([self.python, str(LITERT_RUNNER), "convert", "--onnx", onnx_path, "--calib",
                               str(calib_file)], stdout=subprocess.PIPE, stderr=self.log, text=True)
        if done.returncode != 0:
            raise SystemExit(f"LiteRT conversion of {onnx_path} failed (exit {done.returncode}); see {self.log.name}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"# LiteRT: {'cached' if result['cached'] else 'converted in ' + str(result['seconds']) + ' s'}: "
              f"{result['int8']} (onnx2tf {result['versions']['onnx2tf']}, tensorflow "
              f"{result['versions']['tensorflow']}, ai-edge-litert {result['versions']['ai-edge-litert']})", flush=True)
        return result

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the LiteRT runner exited (code {self.proc.wait()}); see {self.log.name}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise SystemExit(f"LiteRT runner: {answer.get('error')} (request {request})")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask(op="quit")
            except (SystemExit, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def _litert(args) -> LiteRT | None:
    """The LiteRT peer, or None (said on a '#' line) when it is not wanted or not installed."""
    installed = (PEERS_LITERT / "bin" / "python").exists()
    if args.peers == "none":
        return None
    if not installed:
        if args.peers == "litert":
            raise SystemExit(f"--peers litert: {PEERS_LITERT} does not exist; install it with {LITERT_INSTALL}")
        print(f"# LiteRT int8 skipped: {PEERS_LITERT} not found; install it with {LITERT_INSTALL}", flush=True)
        return None
    return LiteRT(ROOT / "tests" / ".cache" / "litert" / "bench_int8.log")


def _outputs(run, feeds_of, held: np.ndarray) -> np.ndarray:
    """Every output of every held-out input, flattened and concatenated (as accuracy() compares)."""
    return np.concatenate([np.concatenate([np.asarray(o, np.float32).reshape(-1) for o in run(feeds_of(x[None]))])
                           for x in held])


def speed(args) -> list[dict]:
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        litert = _litert(args)
        try:
            for name in _expand_models(args.models):
                if name.startswith("ppocr_"):  # dynamic-shape files fed printed text: the accuracy mode's
                    print(f"# {name} skipped: speed runs the zoo and the real-model catalog", flush=True)
                    continue
                rows += _speed_model(args, name, tmp, litert)
        finally:
            if litert is not None:
                litert.close()
    _print_table(rows)
    return rows


def _speed_model(args, name: str, tmp: Path, litert: LiteRT | None) -> list[dict]:
    # a real-catalog model at its exported shape, a zoo model at 224x224
    path = real_model_file(name) if name in real_model_names() else model_file(name, (1, 3, 224, 224))
    graph = load_model(path, None, None)
    optimize(graph)
    calib = samples(graph, CALIBRATION, 0, None)
    held = samples(graph, HELD_OUT, 1, None)
    qgraph, _ = quantize_graph(graph, calib, method="minmax", weight_bits=args.weight_bits, min_sqnr=args.min_sqnr)
    ort_q = ort_quantized(path, calib, graph.inputs[0], tmp, args.weight_bits)
    input_name = graph.inputs[0]
    one = samples(graph, 1, 2, None)
    x = {input_name: one}
    np.save(tmp / "x.npy", one)
    np.save(tmp / "held.npy", held)
    converted = litert.convert(path, calib, tmp) if litert is not None else None
    rows = []
    for threads in args.threads:
        sessions = {"edgesdk_fp32": Session(graph, backend="cpu", threads=threads, optimize=False),
                    "edgesdk_int8": Session(qgraph, backend="cpu", threads=threads, optimize=False)}
        ort_sessions = {"ort_fp32": ort_session(path, threads, {}), "ort_int8": ort_session(ort_q, threads, {})}
        runners = {k: (lambda s: lambda feeds: list(s.run(feeds).values()))(s) for k, s in sessions.items()}
        runners.update({k: (lambda s: lambda feeds: s.run(None, feeds))(s) for k, s in ort_sessions.items()})
        blocks = {k: (lambda run: lambda budget: time_calls(lambda: run(x), warmup=2, min_runs=5,
                                                             min_time_s=budget))(run) for k, run in runners.items()}
        reference = _outputs(runners["edgesdk_fp32"], lambda v: {input_name: v}, held)
        sqnr = {k: sqnr_db(reference, _outputs(runners[k], lambda v: {input_name: v}, held))
                for k in ("edgesdk_int8", "ort_int8")}
        partitions = {}
        if litert is not None:
            for key, model in (("litert_int8", converted["int8"]), ("litert_fp32", converted["fp32"])):
                loaded = litert.ask(op="load", id=key, model=model, threads=threads)
                partitions[key] = loaded["xnnpack_partitions"]  # XNNPACK DELEGATE nodes: 1 = the whole graph
                litert.ask(op="feed", id=key, input=str(tmp / "x.npy"))
                out = tmp / f"{key}.out.npy"
                litert.ask(op="run", id=key, inputs=str(tmp / "held.npy"), outputs=str(out))
                sqnr[key] = sqnr_db(reference, np.load(out).reshape(-1))
                blocks[key] = (lambda key: lambda budget: litert.ask(op="time", id=key, warmup=2, min_runs=5,
                                                                      min_time_s=budget)["seconds"])(key)
        times = {k: [] for k in blocks}
        for r in range(args.rounds):
            for key in (list(blocks) if r % 2 == 0 else list(blocks)[::-1]):
                # Every runtime's workers spin a while after a call (ours 1 ms, ONNX Runtime's and
                # XNNPACK's longer): on 2 cores a block that starts while the last one's spin
                # would share the cores with it. A pause lets them all go to sleep first.
                time.sleep(SETTLE_S)
                times[key] += blocks[key](args.min_time / args.rounds)
        med = {k: 1000 * float(np.median(v)) for k, v in times.items()}
        row = {"model": name, "threads": threads, "edgesdk_isa": edgesdk_isa(), "weight_bits": args.weight_bits,
               **{f"{k}_ms": round(v, 3) for k, v in med.items()},
               "int8_speedup_vs_edgesdk_fp32": round(med["edgesdk_fp32"] / med["edgesdk_int8"], 2),
               "edgesdk_int8_over_ort_int8": round(med["edgesdk_int8"] / med["ort_int8"], 2)}
        if litert is not None:
            row.update(edgesdk_int8_over_litert_int8=round(med["edgesdk_int8"] / med["litert_int8"], 2),
                       litert_xnnpack_partitions=partitions)
        row.update({f"{k}_sqnr_db": round(v, 1) for k, v in sqnr.items()})
        row["runs"] = {k: len(v) for k, v in times.items()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _print_table(rows: list[dict]) -> None:
    """The rows once more, as '#' lines: ms (SQNR dB) per runtime, and the two int8 ratios."""
    if not rows:
        return
    keys = [k[:-3] for k in rows[0] if k.endswith("_ms")]
    head = ["model", "thr"] + keys + ["int8/ort_int8"] + (["int8/litert_int8"] if "litert_int8" in keys else [])
    lines = [head]
    for row in rows:
        cells = [f"{row['model']} ({row['edgesdk_isa']}, {row['weight_bits']}-bit w)", str(row["threads"])]
        for k in keys:
            db = row.get(f"{k}_sqnr_db")
            cells.append(f"{row[k + '_ms']:.2f}" + (f" ({db:.1f} dB)" if db is not None else ""))
        cells.append(f"{row['edgesdk_int8_over_ort_int8']:.2f}")
        if "edgesdk_int8_over_litert_int8" in row:
            cells.append(f"{row['edgesdk_int8_over_litert_int8']:.2f}")
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    print("# ms per call (median; SQNR against edgesdk fp32 on 16 held-out inputs); ratios below 1: edgesdk faster")
    for line in lines:
        print("# " + "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip(), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--models", nargs="+", default=ACCURACY_MODELS,
                   help="zoo and PP-OCR names, real-model catalog names, or 'real' (the exported catalog)")
    a.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    a.add_argument("--backend", default="cpu", help="backend of the int8 model (its integer ops are bit-exact "
                   "with the reference backend's)")
    a.add_argument("--ort", action="store_true", help="also ONNX Runtime's int8 (quantize_static, min-max, the "
                   "same calibration inputs) against edgesdk fp32")
    a.add_argument("--weight-bits", type=int, choices=[8, 7], default=8, help="int8 weights' range (7: [-64, 64])")
    for sp in (a, s := sub.add_parser("speed")):
        sp.add_argument("--min-sqnr", type=float, metavar="DB", help="edgesdk int8 keeps float the tensors that "
                        "cost most until its SQNR on the calibration inputs reaches DB (pack --min-sqnr)")
    s.add_argument("--models", nargs="+", default=SPEED_MODELS)
    s.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    s.add_argument("--rounds", type=int, default=5)
    s.add_argument("--min-time", type=float, default=4.0, help="seconds per runtime per thread count")
    s.add_argument("--weight-bits", type=int, choices=[8, 7], default=8,
                   help="int8 weights' range: 7 is [-64, 64] for edgesdk and ONNX Runtime (reduce_range)")
    s.add_argument("--peers", choices=["auto", "litert", "none"], default="auto",
                   help="LiteRT int8/fp32 columns: auto (when .peers-litert exists, else a '#' line saying how to "
                        "install it), litert (required), none")
    args = p.parse_args(argv)
    print(f"# {platform.processor() or platform.machine()} {time.strftime('%Y-%m-%d')} "
          f"python tools/bench_int8.py {' '.join(argv if argv is not None else sys.argv[1:])}", flush=True)
    (accuracy if args.what == "accuracy" else speed)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
