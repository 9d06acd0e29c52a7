#!/usr/bin/env python3
"""One engine of tools/bench_peers.py in its own process: convert an ONNX file, load, run, time.

Runs with the Python of the engine's environment and imports nothing of the harness:

    engine     Python                      what it loads (converted by `convert`, cached)
    edgesdk    .venv (the harness's own)   the .onnx: edgesdk.Session(path, backend="cpu", threads=T)
    ort        .venv (edgesdk's `bench`    the .onnx: onnxruntime.InferenceSession, the settings of
               extra)                      tools/bench.py's ort_session
    openvino   .peers-openvino             OpenVINO IR (model.xml/.bin, fp32 weights), compiled for
                                           "CPU" with INFERENCE_PRECISION_HINT f32 (no bf16 on
                                           AMX/AVX512-BF16 CPUs), INFERENCE_NUM_THREADS T,
                                           PERFORMANCE_HINT LATENCY, NUM_STREAMS 1
    litert     .peers-litert               fp32 .tflite written by onnx2tf (NHWC), run by
                                           ai_edge_litert's Interpreter(num_threads=T) with its
                                           default delegate, XNNPACK
    mnn        .peers-mnn                  .mnn written by MNN's converter (fp32 weights), run by
                                           MNN.Interpreter sessions {"backend": "CPU",
                                           "numThread": T, "precision": "normal"} (fp32 on CPU;
                                           "low" would allow fp16/bf16)
    ncnn       .peers-ncnn                 model.ncnn.param/.bin written by pnnx with fp16=0 (fp32
                                           weights), run by ncnn.Net with num_threads T and every
                                           fp16/bf16 storage, packing and arithmetic option off

    PY tools/peers/peer_runner.py convert --engine E --onnx M.onnx --input-shape 1,3,224,224
    PY tools/peers/peer_runner.py serve --engine E          # JSON lines on stdin/stdout
    PY tools/peers/peer_runner.py rss --engine E --model F --threads T --inputs X.npz

convert: ONNX -> the engine's format, cached under tests/.cache/peers/<engine>/<stem>-<key>/
(model files, meta.json with versions, command and seconds, the converter's log); the key hashes
the ONNX file, the input shape, the conversion settings and the converter's version. Written in
a temporary folder next to it and renamed into place, so an interrupted conversion leaves no
half-written entry. The ONNX file itself is never written (onnx2tf, which saves its simplified
graph over its input, gets a copy). Prints one JSON object: {"ok": true, "model": the file `load`
takes, "cached", "seconds", "versions", "command", "dir"} or {"ok": false, "error": one line,
"log_tail": the converter's last log lines}. edgesdk and ort load the .onnx itself (nothing to
convert).

serve: one JSON object per line on stdin, one answer per line on stdout (the engines' own prints
go to stderr). Inputs and outputs travel as .npz files: the inputs in the ONNX graph's input
order, keyed by ONNX name; the outputs keyed "0", "1", ... in the ONNX graph's output order, in
ONNX's layout (NCHW; an engine that drops the batch dimension, as ncnn does, gives its outputs
without it: the harness compares shapes up to leading 1s).
  {"op": "info"}                                   -> {"ok": true, "engine", "versions", "python"}
  {"op": "load", "id": K, "model": PATH, "threads": T, "inputs": NPZ, "repeat": 3,
   "input_names": [...], "output_names": [...]}    -> {"ok": true, "load_ms": [...]}  (the last one kept)
  {"op": "run", "id": K, "outputs": NPZ}           one call on the loaded inputs, outputs written
  {"op": "time", "id": K, "warmup": 2, "min_runs": 5, "min_time_s": 0.4}  -> {"ok": true, "seconds": [...]}
  {"op": "close", "id": K}
  {"op": "quit"}
A timed call is what a user's call is: hand the engine its input, run, get the outputs back as
arrays (edgesdk's Session.run, ONNX Runtime's run, OpenVINO's InferRequest.infer, LiteRT's
set_tensor + invoke + get_tensor, MNN's copyFrom + runSession + copyToHostTensor, ncnn's
create_extractor + input + extract); inputs are converted to the engine's layout once, before.
Timing is edgesdk.profile.latency.time_calls' loop (warm-up calls, then at least min_runs calls
and min_time_s seconds).

rss: a fresh process loads the model once, runs it --runs times and prints {"peak_rss_mb": the
whole process's peak resident set (Python, numpy and the engine's libraries included; VmHWM on
Linux, see peak_rss_mb), "ru_maxrss_mb", "load_ms"}.
"""
from __future__ import annotations

import abc
import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "tests" / ".cache" / "peers"
ENGINES = ("edgesdk", "ort", "openvino", "litert", "mnn", "ncnn")
# What each conversion is made with (part of the cache key).
SETTINGS = {
    "openvino": {"via": "Core.read_model + save_model", "compress_to_fp16": False},
    "litert": {"via": "onnx2tf.convert", "tflite": "float32"},
    "mnn": {"via": "MNN converter (_tools.mnnconvert)", "fp16": False},
    "ncnn": {"via": "pnnx", "fp16": 0},
}


# -- versions --------------------------------------------------------------------------------------
def versions(engine: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    packages = {"edgesdk": ["edgesdk", "numpy"], "ort": ["onnxruntime", "numpy"],
                "openvino": ["openvino", "numpy"], "litert": ["ai-edge-litert", "onnx2tf", "tensorflow", "numpy"],
                "mnn": ["MNN", "numpy"], "ncnn": ["ncnn", "pnnx", "numpy"]}[engine]
    out = {}
    for p in packages:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = "not installed"
    return out


# -- convert ---------------------------------------------------------------------------------------
def _run_logged(command: list[str], log: Path, cwd: Path) -> None:
    with open(log, "ab") as f:
        done = subprocess.run(command, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} exited with {done.returncode}")


def _convert_openvino(onnx_path: Path, shape: list[int], work: Path, log: Path) -> tuple[str, str]:
    # Core.read_model (the ONNX frontend) rather than openvino.convert_model: the same conversion
    # without ovc's telemetry. save_model's default compresses the weights to fp16: not here.
    import openvino as ov
    model = ov.Core().read_model(str(onnx_path))
    ov.save_model(model, str(work / "model.xml"), compress_to_fp16=False)
    return "model.xml", ("python -c 'import openvino as ov; ov.save_model(ov.Core().read_model(M.onnx), "
                         "\"model.xml\", compress_to_fp16=False)'")


def _convert_litert(onnx_path: Path, shape: list[int], work: Path, log: Path) -> tuple[str, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from litert_runner import _PLACEHOLDER, _output_to
    # onnx2tf checks its conversion on sample images for 3-channel 4-D inputs and downloads them
    # from GitHub unless a file of that name is in its working directory: a local placeholder.
    np.save(work / _PLACEHOLDER, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
    # onnx2tf saves its shape-inferred / simplified graph over the file it was given: a copy
    source = work / "input.onnx"
    shutil.copyfile(onnx_path, source)
    here = os.getcwd()
    os.chdir(work)
    failure = None
    try:
        with _output_to(log):
            import onnx2tf
            onnx2tf.convert(input_onnx_file_path=str(source), output_folder_path=str(work / "saved_model"),
                            non_verbose=True)
    except BaseException as exc:  # onnx2tf reports errors with sys.exit(1)
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        os.chdir(here)
    found = sorted((work / "saved_model").glob("*_float32.tflite"))
    if failure or len(found) != 1:
        raise RuntimeError(f"onnx2tf: {failure or 'no *_float32.tflite written'}")
    shutil.copyfile(found[0], work / "fp32.tflite")
    shutil.rmtree(work / "saved_model")
    (work / _PLACEHOLDER).unlink()
    source.unlink()
    return "fp32.tflite", "onnx2tf -i M.onnx -o saved_model  (then *_float32.tflite)"


def _convert_mnn(onnx_path: Path, shape: list[int], work: Path, log: Path) -> tuple[str, str]:
    # The converter's C extension itself: the `mnnconvert` console script (MNN.tools.mnnconvert)
    # imports MNN.tools.utils.log, which runs `pip install -U aliyun-log-python-sdk` with whatever
    # pip is first on PATH (the machine's, not this venv's) and then sends usage logs to Alibaba.
    import _tools  # MNN's wheel installs it beside MNN/
    argv = ["mnnconvert", "-f", "ONNX", "--modelFile", str(onnx_path), "--MNNModel", str(work / "model.mnn"),
            "--bizCode", "biz"]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from litert_runner import _output_to
    with _output_to(log):
        _tools.mnnconvert(argv)
    if not (work / "model.mnn").is_file() or (work / "model.mnn").stat().st_size == 0:
        raise RuntimeError("the MNN converter wrote no model.mnn")
    return "model.mnn", "mnnconvert -f ONNX --modelFile M.onnx --MNNModel model.mnn --bizCode biz"


def _pnnx_executable() -> str:
    # The pnnx wheel's `pnnx` console script imports its Python package, which imports torch
    # (installed with --no-deps here: torch is not there); the binary beside it needs no torch.
    import importlib.util
    spec = importlib.util.find_spec("pnnx")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pnnx is not installed")
    exe = Path(list(spec.submodule_search_locations)[0]) / "pnnx"
    if not exe.is_file():
        raise RuntimeError(f"no pnnx executable at {exe}")
    return str(exe)


def _convert_ncnn(onnx_path: Path, shape: list[int], work: Path, log: Path) -> tuple[str, str]:
    # pnnx writes its outputs next to its input (model.ncnn.param, model.ncnn.bin, model.pnnx.*,
    # model_ncnn.py, ...): a link to the ONNX file in the work folder. fp16=0: fp32 weights (its
    # default stores them as fp16).
    (work / "model.onnx").symlink_to(onnx_path)
    shape_arg = "inputshape=[" + ",".join(str(d) for d in shape) + "]"
    command = [_pnnx_executable(), "model.onnx", shape_arg, "fp16=0"]
    _run_logged(command, log, work)
    for f in ("model.ncnn.param", "model.ncnn.bin"):
        if not (work / f).is_file():
            raise RuntimeError(f"pnnx wrote no {f}")
    for f in work.iterdir():
        if f.name not in ("model.ncnn.param", "model.ncnn.bin", log.name):
            f.unlink()
    return "model.ncnn.param", f"pnnx M.onnx {shape_arg} fp16=0"


class ConversionError(Exception):
    def __init__(self, message: str, log_tail: list[str]) -> None:
        super().__init__(message)
        self.log_tail = log_tail


CONVERTERS = {"openvino": _convert_openvino, "litert": _convert_litert, "mnn": _convert_mnn, "ncnn": _convert_ncnn}


def cache_key(engine: str, onnx_path: Path, shape: list[int], vers: dict[str, str]) -> str:
    h = hashlib.sha256(onnx_path.read_bytes())
    h.update(json.dumps([engine, shape, SETTINGS[engine], vers], sort_keys=True).encode())
    return h.hexdigest()[:16]


def convert(engine: str, onnx_path: Path, shape: list[int], cache: Path) -> dict:
    if engine not in CONVERTERS:  # edgesdk and ort load the ONNX file
        return {"model": str(onnx_path), "cached": True, "seconds": 0.0, "versions": versions(engine),
                "command": None, "dir": None}
    vers = versions(engine)
    out = cache / engine / f"{onnx_path.stem}-{cache_key(engine, onnx_path, shape, vers)}"
    if (out / "meta.json").is_file():
        meta = json.loads((out / "meta.json").read_text())
        if (out / meta["file"]).is_file():
            return {"model": str(out / meta["file"]), "cached": True, "seconds": meta["seconds"],
                    "versions": meta["versions"], "command": meta["command"], "dir": str(out)}
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    try:
        log = work / "convert.log"
        log.touch()
        started = time.perf_counter()
        try:
            name, command = CONVERTERS[engine](onnx_path, shape, work, log)
        except Exception as exc:  # noqa: BLE001 (every converter's error is reported the same way)
            tail = log.read_text(errors="replace").strip().splitlines()[-20:]
            raise ConversionError(f"{type(exc).__name__}: {exc}", tail) from exc
        seconds = round(time.perf_counter() - started, 2)
        meta = {"onnx": str(onnx_path), "input_shape": shape, "file": name, "settings": SETTINGS[engine],
                "versions": vers, "command": command, "seconds": seconds}
        (work / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        if out.exists():  # an entry without meta.json: left by a crash before the rename existed
            shutil.rmtree(out)
        work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"model": str(out / name), "cached": False, "seconds": seconds, "versions": vers,
            "command": command, "dir": str(out)}


# -- the engines -----------------------------------------------------------------------------------
class Model(abc.ABC):
    """A loaded model: ``feed`` converts the inputs (ONNX order and layout) once, ``call`` is one
    timed call, ``outputs`` turns what a call returned into float32 arrays in ONNX's layout. Every
    engine below defines feed and call."""

    @abc.abstractmethod
    def feed(self, xs: list[np.ndarray]) -> None:
        """Keep the inputs, converted to what the engine's call takes."""

    @abc.abstractmethod
    def call(self):
        """One inference on the fed inputs; returns the engine's raw outputs."""

    def outputs(self, raw) -> list[np.ndarray]:
        return [np.asarray(y, np.float32) for y in raw]


class EdgeSDK(Model):
    def __init__(self, path: str, threads: int, input_names: list[str], output_names: list[str]) -> None:
        from edgesdk import Session
        self.session = Session(path, backend="cpu", threads=threads)
        self.names = self.session.input_names

    def feed(self, xs):
        self.feeds = dict(zip(self.names, xs))

    def call(self):
        return list(self.session.run(self.feeds).values())


class ORT(Model):
    def __init__(self, path: str, threads: int, input_names: list[str], output_names: list[str]) -> None:
        import onnxruntime as ort
        ort.set_default_logger_severity(3)
        options = ort.SessionOptions()  # tools/bench.py's ort_session
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.session.get_inputs()]

    def feed(self, xs):
        self.feeds = dict(zip(self.names, xs))

    def call(self):
        return self.session.run(None, self.feeds)


_OV_CORE = None


class OpenVINO(Model):
    def __init__(self, path: str, threads: int, input_names: list[str], output_names: list[str]) -> None:
        import openvino as ov
        global _OV_CORE
        if _OV_CORE is None:
            _OV_CORE = ov.Core()
        config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads,
                  "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        self.compiled = _OV_CORE.compile_model(path, "CPU", config)
        got = str(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        if "32" not in got:
            raise RuntimeError(f"OpenVINO compiled with inference precision {got}, not f32")
        self.request = self.compiled.create_infer_request()
        self.n_outputs = len(self.compiled.outputs)

    def feed(self, xs):
        self.feeds = {i: np.ascontiguousarray(x) for i, x in enumerate(xs)}

    def call(self):
        result = self.request.infer(self.feeds, share_inputs=True)
        return [result[self.compiled.output(i)] for i in range(self.n_outputs)]


class LiteRT(Model):
    def __init__(self, path: str, threads: int, input_names: list[str], output_names: list[str]) -> None:
        from ai_edge_litert.interpreter import Interpreter
        self.interpreter = Interpreter(model_path=path, num_threads=threads)
        self.interpreter.allocate_tensors()
        self.delegated = any(op["op_name"] == "DELEGATE" for op in self.interpreter._get_ops_details())
        self.inputs = self._ordered(self.interpreter.get_input_details(), input_names)
        self.outs = self._ordered(self.interpreter.get_output_details(), output_names)

    @staticmethod
    def _ordered(details: list[dict], onnx_names: list[str]) -> list[dict]:
        """The tensors in the ONNX graph's order: by name where onnx2tf kept the ONNX names
        (it does, up to a "serving_default_" prefix and a ":0" suffix), else as LiteRT lists them."""
        def plain(name: str) -> str:
            return name.removeprefix("serving_default_").split(":")[0]
        by_name = {plain(d["name"]): d for d in details}
        if len(onnx_names) == len(details) and all(n in by_name for n in onnx_names):
            return [by_name[n] for n in onnx_names]
        return list(details)

    def feed(self, xs):
        self.fed = []
        for x, d in zip(xs, self.inputs):
            shape = tuple(int(s) for s in d["shape"])
            if x.shape != shape and x.ndim == 4:
                x = x.transpose(0, 2, 3, 1)  # onnx2tf makes 4-D inputs NHWC
            elif x.shape != shape and x.ndim == 3:
                x = x.transpose(0, 2, 1)  # and 3-D ones NWC
            if x.shape != shape:
                raise ValueError(f"input of shape {list(x.shape)}, the .tflite takes {list(shape)}")
            self.fed.append((d["index"], np.ascontiguousarray(x, np.float32)))

    def call(self):
        for index, x in self.fed:
            self.interpreter.set_tensor(index, x)
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(d["index"]) for d in self.outs]

    def outputs(self, raw):
        # onnx2tf writes 4-D outputs NHWC
        return [np.asarray(y, np.float32).transpose(0, 3, 1, 2) if np.ndim(y) == 4 else np.asarray(y, np.float32)
                for y in raw]


class MNN_(Model):
    def __init__(self, path: str, threads: int, input_names: list[str], output_names: list[str]) -> None:
        import MNN
        self.mnn = MNN
        self.interpreter = MNN.Interpreter(path)
        self.session = self.interpreter.createSession({"backend": "CPU", "numThread": threads, "precision": "normal"})
        ins = self.interpreter.getSessionInputAll(self.session)
        outs = self.interpreter.getSessionOutputAll(self.session)
        self.in_tensors = [ins[n] for n in input_names] if all(n in ins for n in input_names) else list(ins.values())
        self.out_tensors = ([outs[n] for n in output_names] if all(n in outs for n in output_names)
                            else list(outs.values()))
        self.hosts = []
        for t in self.out_tensors:  # NCHW (MNN's "Caffe" layout) host tensors the outputs are copied to
            shape = tuple(t.getShape())
            self.hosts.append(MNN.Tensor(shape, MNN.Halide_Type_Float, np.zeros(shape, np.float32),
                                         MNN.Tensor_DimensionType_Caffe))

    def feed(self, xs):
        mnn = self.mnn
        self.fed = [mnn.Tensor(tuple(x.shape), mnn.Halide_Type_Float, np.ascontiguousarray(x, np.float32),
                               mnn.Tensor_DimensionType_Caffe) for x in xs]

    def call(self):
        for t, x in zip(self.in_tensors, self.fed):
            t.copyFrom(x)  # NCHW -> the session's layout (NC4HW4)
        self.interpreter.runSession(self.session)
        out = []
        for t, host in zip(self.out_tensors, self.hosts):
            t.copyToHostTensor(host)
            out.append(host.getNumpyData().copy())
        return out


class NCNN(Model):
    def __init__(self, path: str, threads: int, input_names: list[str], output_names: list[str]) -> None:
        import ncnn
        self.ncnn = ncnn
        self.net = ncnn.Net()
        opt = self.net.opt
        opt.num_threads = threads
        # fp32 throughout: ncnn otherwise stores and computes in fp16/bf16 where the CPU can
        for name in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage",
                     "use_bf16_packed"):
            if hasattr(opt, name):
                setattr(opt, name, False)
        if self.net.load_param(path) != 0 or self.net.load_model(str(Path(path).with_suffix(".bin"))) != 0:
            raise RuntimeError(f"ncnn could not load {path}")
        self.in_names, self.out_names = list(self.net.input_names()), list(self.net.output_names())

    def feed(self, xs):
        for x in xs:
            if x.shape[0] != 1:
                raise ValueError("ncnn runs batch 1 (its Mat has no batch dimension)")
        # ncnn.Mat(array) wraps the array's memory without a reference to it: keep the arrays
        self.arrays = [np.ascontiguousarray(x[0], np.float32) for x in xs]
        self.fed = [(n, self.ncnn.Mat(a)) for n, a in zip(self.in_names, self.arrays)]

    def call(self):
        ex = self.net.create_extractor()
        for name, mat in self.fed:
            ex.input(name, mat)
        out = []
        for name in self.out_names:
            ret, mat = ex.extract(name)
            if ret != 0:
                raise RuntimeError(f"ncnn extract {name} returned {ret}")
            out.append(np.array(mat))
        return out


MODELS = {"edgesdk": EdgeSDK, "ort": ORT, "openvino": OpenVINO, "litert": LiteRT, "mnn": MNN_, "ncnn": NCNN}


def time_calls(fn, warmup: int, min_runs: int, min_time_s: float, max_runs: int = 10_000) -> list[float]:
    """edgesdk.profile.latency.time_calls (this process may not have edgesdk)."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() - start < min_time_s):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def read_inputs(path: str) -> tuple[list[str], list[np.ndarray]]:
    with np.load(path) as z:
        names = list(z.files)
        return names, [z[n] for n in names]


def load(engine: str, request: dict) -> tuple[Model, list[float]]:
    names, xs = read_inputs(request["inputs"])
    cls = MODELS[engine]
    load_ms = []
    model = None
    for _ in range(max(1, int(request.get("repeat", 1)))):
        model = None  # the previous one freed first
        t0 = time.perf_counter()
        model = cls(request["model"], int(request["threads"]), request.get("input_names") or names,
                    request.get("output_names") or [])
        load_ms.append(1000 * (time.perf_counter() - t0))
    model.feed(xs)
    return model, load_ms


def serve(engine: str) -> int:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the engines' own prints (MNN's, TensorFlow's) must not mix with the answers
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
            if op == "info":
                answer = {"ok": True, "engine": engine, "versions": versions(engine), "python": sys.version.split()[0]}
            elif op == "load":
                models.pop(request["id"], None)
                model, load_ms = load(engine, request)
                models[request["id"]] = model
                answer = {"ok": True, "load_ms": load_ms}
                if isinstance(model, LiteRT):
                    answer["xnnpack"] = model.delegated
            elif op == "run":
                model = models[request["id"]]
                ys = model.outputs(model.call())
                np.savez(request["outputs"], **{str(i): y for i, y in enumerate(ys)})
                answer = {"ok": True, "shapes": [list(y.shape) for y in ys]}
            elif op == "time":
                model = models[request["id"]]
                seconds = time_calls(model.call, int(request.get("warmup", 2)), int(request.get("min_runs", 5)),
                                     float(request.get("min_time_s", 1.0)))
                answer = {"ok": True, "seconds": seconds}
            elif op == "close":
                models.pop(request["id"], None)
                answer = {"ok": True}
            else:
                answer = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 (every engine's error goes back to the harness)
            answer = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
        answers.write(json.dumps(answer) + "\n")
    return 0


def rss(engine: str, model_path: str, threads: int, inputs: str, runs: int) -> dict:
    model, load_ms = load(engine, {"model": model_path, "threads": threads, "inputs": inputs, "repeat": 1})
    for _ in range(runs):
        model.call()
    return {"peak_rss_mb": peak_rss_mb(), "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load_ms": load_ms[0]}


def peak_rss_mb() -> float:
    """This process's peak resident set size, MB: VmHWM of /proc/self/status on Linux.

    Not ru_maxrss there: Linux carries the largest RSS of the address space an exec replaced
    into the process's ru_maxrss, and a child started by fork/vfork + exec replaces a copy of
    its parent's (or the parent's own), so a child's ru_maxrss is never below its parent's RSS at
    the fork (the harness's, numpy and torch included). VmHWM is the high-water mark of the
    process's own address space, which starts at exec. Elsewhere, ru_maxrss (bytes on macOS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("convert", help="ONNX -> the engine's format (cached); one JSON object on stdout")
    c.add_argument("--engine", choices=ENGINES, required=True)
    c.add_argument("--onnx", type=Path, required=True)
    c.add_argument("--input-shape", required=True, help="the ONNX input's shape, e.g. 1,3,224,224")
    c.add_argument("--cache-dir", type=Path, default=CACHE)
    s = sub.add_parser("serve", help="JSON lines on stdin/stdout (what tools/bench_peers.py uses)")
    s.add_argument("--engine", choices=ENGINES, required=True)
    r = sub.add_parser("rss", help="peak RSS of a fresh process that loads and runs the model; JSON on stdout")
    r.add_argument("--engine", choices=ENGINES, required=True)
    r.add_argument("--model", required=True)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--inputs", required=True, help=".npz of the inputs, ONNX order and layout")
    r.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    if args.engine == "openvino":
        # `import openvino` imports its converter (ovc), which sends an "import" event to Google
        # Analytics when the openvino-telemetry package is there and no consent file says no
        # (requirements-openvino.txt leaves that package out); it sends nothing when CI=true.
        os.environ["CI"] = "true"
    if args.what == "serve":
        return serve(args.engine)
    real_stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if args.what == "convert":
        shape = [int(d) for d in args.input_shape.split(",")]
        try:
            result = {"ok": True, **convert(args.engine, args.onnx.resolve(), shape, args.cache_dir)}
        except ConversionError as exc:
            result = {"ok": False, "error": str(exc).strip().splitlines()[0], "log_tail": exc.log_tail}
    else:
        result = rss(args.engine, args.model, args.threads, args.inputs, args.runs)
    real_stdout.write(json.dumps(result) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
