#!/usr/bin/env python3
"""edgesdk cpu against its peers (ONNX Runtime, OpenVINO, LiteRT, MNN, ncnn): fp32 latency, batch 1.

    python tools/bench_peers.py                          # the five zoo models, 1 and 2 threads, every installed peer
    python tools/bench_peers.py --threads 1 2 --rounds 3 --min-time 2
    python tools/bench_peers.py --models resnet18 lenet5 --threads 1 --peers ort openvino
    python tools/bench_peers.py --install                # first `make peers-<name>` for each missing peer
    python tools/bench_peers.py --models path/to/model.onnx --json out.json

Run it with edgesdk's venv (.venv/bin/python): edgesdk and ONNX Runtime (its `bench` extra) are
timed from there. Every peer lives in its own venv, built by the Makefile from the pinned
tools/peers/requirements-<peer>.txt (never in .venv: their numpy/onnx/protobuf pins differ):

    peer      venv               make target         converted by (cached, tests/.cache/peers/<peer>/)
    ort       .venv              make setup          - (loads the .onnx)
    openvino  .peers-openvino    make peers-openvino OpenVINO's ONNX frontend -> IR, fp32 weights
    litert    .peers-litert      make peers-litert   onnx2tf -> fp32 .tflite (NHWC), run with XNNPACK
    mnn       .peers-mnn         make peers-mnn      MNN's converter -> .mnn
    ncnn      .peers-ncnn        make peers-ncnn     pnnx -> .ncnn.param/.bin, fp16=0

A requested peer whose venv is missing is skipped with a '#' line naming its make target; its
column says "not installed" (--install runs those make targets first). tools/peers/peer_runner.py says how each engine is configured (f32
precision hint for OpenVINO, MNN precision "normal", every fp16/bf16 option of ncnn off, ...).

Each engine runs in its own long-lived process (tools/peers/peer_runner.py serve, started with
that engine's Python; edgesdk and ONNX Runtime get one each too), driven over a JSON-lines pipe:
load, run, time a block. The harness computes nothing itself, and only one engine computes at a
time: the others wait on their pipes.

Correctness gate: every engine (edgesdk and ONNX Runtime at each thread count included) runs the
model once on a fixed input (numpy default_rng(0), standard normal, float32, in the ONNX input's
shape) and its outputs are compared, in ONNX's layout, with ONNX Runtime's at 1 thread. For each
output, with ref = ONNX Runtime's and out = the engine's (reshaped to ref's shape when the two
shapes differ only by leading 1s, as ncnn drops the batch dimension):

    refused  when  max |out - ref| > 1e-3 * max(1, max |ref|)

(a NaN or infinity where ONNX Runtime has a finite value counts as an infinite difference; a
different number of outputs or shape is refused too). A refused engine is not timed: its cell
says "refused: max abs diff X" and a '#' line gives the difference and the bound.

Timing: batch 1, fp32, the same thread count for every engine. Each engine is timed in blocks
(edgesdk.profile.latency.time_calls' protocol: 2 warm-up calls, then at least 5 calls and
--min-time / --rounds seconds); a round is one block of every engine that passed the gate, and
the order is reversed every other round (A B C, C B A, A B C, ...), so the machine's drift
reaches every engine alike. Before each block the harness sleeps --settle seconds (0.3) so that
the previous engine's spinning worker threads have gone to sleep. Medians in ms.

Load time: session creation from the converted file, in the engine's runner, median of
--load-repeat (3) loads (the first load of a process is often slower: the fresh process below
reports its one load too, in brackets in the table). Peak RSS: a fresh process per engine, model
and thread count (the engine's Python: .venv's for edgesdk and ONNX Runtime) loads the model,
runs it 5 times and reports its peak resident set: the whole process, Python and numpy included.
On Linux that is VmHWM (/proc/self/status), not resource.getrusage(RUSAGE_SELF).ru_maxrss: a
child's ru_maxrss starts at its parent's RSS at the fork (Linux keeps the largest RSS of the
address space exec replaced), so every engine would show at least the harness's ~240 MB; the
JSON keeps ru_maxrss_mb beside it.

A failure of one engine on one model (a conversion error, a crash of its runner, a timeout) is
recorded in its cell with a one-line reason (the full one on a '#' line and in the JSON), its
runner is restarted for the next model, and the run goes on.

Output: a header ('# <machine> <date> <command>', the CPU, edgesdk's kernel level, every
engine's versions), one JSON line per (model, threads), then, as '#' lines, the table

    | model | threads | edgesdk cpu | ORT | OpenVINO | LiteRT (XNNPACK) | MNN | ncnn | ratio (edgesdk / best peer) |

(median ms; ratio = edgesdk's median over the fastest timed peer's, below 1: edgesdk faster;
refused and failed peers are not candidates) and a table of load ms and peak RSS MB.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tools" / "peers" / "peer_runner.py"
CACHE = ROOT / "tests" / ".cache" / "peers"
ZOO_BENCH = ["mobilenet_v2", "resnet18", "mobilenet_v3_style", "squeezenet", "lenet5"]  # tools/bench.py's
TOLERANCE = 1e-3
SETTLE_S = 0.3


@dataclass(frozen=True)
class Engine:
    name: str
    label: str  # its column's title
    venv: str | None  # a folder under the repository root; None: the harness's own Python (.venv)
    target: str  # what installs it
    converts: bool = False  # the runner converts the ONNX file first
    runner: Path = RUNNER
    args: tuple[str, ...] = ()  # more arguments to the runner (the tests' fake runner takes some)

    @property
    def python(self) -> str:
        return sys.executable if self.venv is None else str(ROOT / self.venv / "bin" / "python")

    def installed(self) -> bool:
        """The venv's Python and the stamp its make target writes last (a half-done install is not one)."""
        return self.venv is None or ((ROOT / self.venv / "bin" / "python").exists()
                                     and (ROOT / self.venv / ".installed").exists())

    def command(self, what: str) -> list[str]:
        return [self.python, str(self.runner), what, "--engine", self.name, *self.args]


ENGINES: dict[str, Engine] = {
    "edgesdk": Engine("edgesdk", "edgesdk cpu", None, "make setup"),
    "ort": Engine("ort", "ORT", None, "make setup (onnxruntime, the `bench` extra of .venv)"),
    "openvino": Engine("openvino", "OpenVINO", ".peers-openvino", "make peers-openvino", converts=True),
    "litert": Engine("litert", "LiteRT (XNNPACK)", ".peers-litert", "make peers-litert", converts=True),
    "mnn": Engine("mnn", "MNN", ".peers-mnn", "make peers-mnn", converts=True),
    "ncnn": Engine("ncnn", "ncnn", ".peers-ncnn", "make peers-ncnn", converts=True),
}
PEERS = ["ort", "openvino", "litert", "mnn", "ncnn"]


def say(line: str = "") -> None:
    """A line on stdout, above a progress bar if one is showing."""
    from tqdm import tqdm
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


def one_line(text: str, limit: int = 200) -> str:
    lines = [s.strip() for s in str(text).strip().splitlines() if s.strip()]
    line = lines[0] if lines else "(no message)"
    return line if len(line) <= limit else line[:limit - 3] + "..."


# -- the correctness gate and the round order --------------------------------------------------------
def _leading_ones_dropped(shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def gate(ref: list[np.ndarray], out: list[np.ndarray], tolerance: float = TOLERANCE) -> dict:
    """Refused when, for some output, max |out - ref| > tolerance * max(1, max |ref|) (module docstring).

    Returns {"ok", "max_abs_diff", "bound", "max_abs_ref", "reason"} for the output whose
    difference is the largest part of its bound (reason: None when ok)."""
    if len(out) != len(ref):
        return {"ok": False, "max_abs_diff": None, "bound": None, "max_abs_ref": None,
                "reason": f"{len(out)} outputs, ONNX Runtime gives {len(ref)}"}
    worst = {"ok": True, "max_abs_diff": 0.0, "bound": None, "max_abs_ref": None, "reason": None}
    worst_share = -1.0
    for i, (r, o) in enumerate(zip(ref, out)):
        r = np.asarray(r, np.float64)
        o = np.asarray(o, np.float64)
        if o.shape != r.shape:
            if _leading_ones_dropped(o.shape) != _leading_ones_dropped(r.shape):
                return {"ok": False, "max_abs_diff": None, "bound": None, "max_abs_ref": None,
                        "reason": f"output {i} has shape {list(o.shape)}, ONNX Runtime's {list(r.shape)}"}
            o = o.reshape(r.shape)
        finite = np.isfinite(r)
        max_ref = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
        bound = tolerance * max(1.0, max_ref)
        with np.errstate(invalid="ignore"):
            d = np.abs(o - r)
        d = np.where(np.isnan(r) & np.isnan(o), 0.0, d)  # NaN where the reference has NaN: agrees
        d = np.where(finite & ~np.isfinite(o), np.inf, d)
        d = np.where(~finite & (o == r), 0.0, d)  # the same infinity
        diff = float(np.max(d)) if d.size else 0.0
        if np.isnan(diff):
            diff = float("inf")
        share = diff / bound
        if share > worst_share:
            worst_share = share
            worst = {"ok": diff <= bound, "max_abs_diff": diff, "bound": bound, "max_abs_ref": max_ref,
                     "reason": None if diff <= bound else
                     f"max abs diff {diff:.3g} > {bound:.3g} = {tolerance:g} * max(1, max|ref| = {max_ref:.3g})"
                     + (f" (output {i})" if len(ref) > 1 else "")}
    return worst


def round_orders(keys: list[str], rounds: int) -> list[list[str]]:
    """The block order of each round: as given, then reversed, then as given, ..."""
    return [list(keys) if r % 2 == 0 else list(keys)[::-1] for r in range(rounds)]


# -- runners -----------------------------------------------------------------------------------------
class RunnerError(Exception):
    pass


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _log_tail(path: Path, n: int = 1) -> str:
    try:
        lines = [s for s in path.read_text(errors="replace").splitlines() if s.strip()]
    except OSError:
        return ""
    lines = [s for s in lines if not s.startswith("== ")]  # the harness's own header lines
    return " | ".join(s.strip() for s in lines[-n:])


class Runner:
    """One engine's `peer_runner.py serve` process."""

    def __init__(self, engine: Engine, log_dir: Path, timeout: float) -> None:
        self.engine, self.timeout = engine, timeout
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{engine.name}.log"
        self.log = open(self.log_path, "ab")
        self.log.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(engine.command('serve'))}\n".encode())
        self.log.flush()
        self.proc = subprocess.Popen(engine.command("serve"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, bufsize=1, cwd=ROOT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, timeout: float | None = None, **request) -> dict:
        if not self.alive():
            raise RunnerError(f"runner not running ({_exit_reason(self.proc.returncode)})")
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: said below
        limit = self.timeout if timeout is None else timeout
        ready, _, _ = select.select([self.proc.stdout], [], [], limit)
        if not ready:
            self.kill()
            raise RunnerError(f"timed out after {limit:.0f} s ({request.get('op')}); runner killed")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            tail = _log_tail(self.log_path)
            raise RunnerError(f"runner died during {request.get('op')} ({_exit_reason(code)})"
                              + (f"; its log ends: {tail}" if tail else ""))
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RunnerError(one_line(answer.get("error", "error")))
        return answer

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.alive():
            try:
                self.ask(timeout=30, op="quit")
            except (RunnerError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class Runners:
    """The runner of each engine, started on first use and again after a crash or a timeout."""

    def __init__(self, log_dir: Path, timeout: float) -> None:
        self.log_dir, self.timeout = log_dir, timeout
        self.running: dict[str, Runner] = {}

    def get(self, engine: Engine) -> Runner:
        r = self.running.get(engine.name)
        if r is None or not r.alive():
            if r is not None:
                r.close()
            r = self.running[engine.name] = Runner(engine, self.log_dir, self.timeout)
        return r

    def close(self) -> None:
        for r in self.running.values():
            r.close()
        self.running.clear()


# -- models ------------------------------------------------------------------------------------------
@dataclass
class ModelFile:
    name: str
    path: str
    inputs: list[tuple[str, list[int]]]
    outputs: list[str]
    converted: dict[str, dict] = field(default_factory=dict)  # engine -> convert's answer


def onnx_io(path: str) -> tuple[list[tuple[str, list[int]]], list[str]]:
    """The graph's inputs (initializers excepted; a symbolic dimension taken as 1) and outputs."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = []
    for i in model.graph.input:
        if i.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                for d in i.type.tensor_type.shape.dim]
        inputs.append((i.name, dims))
    return inputs, [o.name for o in model.graph.output]


def resolve_models(names: list[str]) -> list[ModelFile]:
    """Zoo names (tools/bench.py's export: tests/zoo's export_onnx at the spec's input shape,
    cached in tests/.cache/onnx) or .onnx paths."""
    out = []
    for name in names:
        if name.endswith(".onnx"):
            path, label = str(Path(name).resolve()), Path(name).stem
        else:
            sys.path.insert(0, str(ROOT / "tests"))
            from zoo import export_onnx, get_spec
            path, label = str(export_onnx(name, input_shape=get_spec(name).input_shape)), name
        inputs, outputs = onnx_io(path)
        out.append(ModelFile(label, path, inputs, outputs))
    return out


def fixed_inputs(model: ModelFile) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(shape).astype(np.float32) for n, shape in model.inputs}


# -- conversions -------------------------------------------------------------------------------------
def _sha256(path: str) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert_all(models: list[ModelFile], engines: list[Engine], args, log_dir: Path) -> None:
    """Every converting engine's file of every model (cached by the runner), with progress; a
    failure is kept in model.converted[engine] as {"ok": False, "error": ...}."""
    from tqdm import tqdm
    jobs = [(m, e) for m in models for e in engines if e.converts]
    if not jobs:
        for m in models:
            for e in engines:
                m.converted[e.name] = {"ok": True, "model": m.path}
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    digests = {m.path: _sha256(m.path) for m in models}
    with tqdm(total=len(jobs), desc="converting", unit="model", file=sys.stderr, disable=None) as bar:
        for m in models:
            for e in engines:
                if not e.converts:
                    m.converted[e.name] = {"ok": True, "model": m.path}
                    continue
                bar.set_postfix_str(f"{e.name} {m.name}")
                shape = ",".join(str(d) for d in m.inputs[0][1])  # the first input's (the zoo has one)
                command = e.command("convert") + ["--onnx", m.path, "--input-shape", shape,
                                                  "--cache-dir", str(args.cache_dir)]
                log = log_dir / f"{e.name}.convert.log"
                with open(log, "ab") as f:
                    f.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(command)}\n".encode())
                    f.flush()
                    try:
                        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=f, text=True,
                                              timeout=args.convert_timeout, cwd=ROOT)
                        lines = [s for s in done.stdout.splitlines() if s.strip()]
                        try:
                            result = json.loads(lines[-1]) if lines else None
                        except json.JSONDecodeError:
                            result = None
                        if result is None:
                            result = {"ok": False, "error": f"converter process {_exit_reason(done.returncode)}; "
                                                            f"see {log}" + (f": {_log_tail(log)}" if _log_tail(log) else "")}
                    except subprocess.TimeoutExpired:
                        result = {"ok": False, "error": f"conversion timed out after {args.convert_timeout:.0f} s"}
                if _sha256(m.path) != digests[m.path]:  # every engine must see the file that was exported
                    raise SystemExit(f"bench_peers: the {e.name} converter changed {m.path}; delete it (it is "
                                     "exported again) and fix the converter to work on a copy")
                m.converted[e.name] = result
                if result.get("ok"):
                    how = "cached" if result["cached"] else f"converted in {result['seconds']} s"
                    say(f"# {e.label}: {m.name} {how}: {result['model']}")
                else:
                    tail = result.get("log_tail") or []
                    say(f"# {e.label}: {m.name} conversion FAILED: {one_line(result['error'], 400)}"
                        + (f" (log: {one_line(tail[-1], 200)})" if tail else ""))
                bar.update()


# -- one (model, threads) ----------------------------------------------------------------------------
def _npz_outputs(path: Path) -> list[np.ndarray]:
    with np.load(path) as z:
        return [z[str(i)] for i in range(len(z.files))]


def reference_outputs(model: ModelFile, runners: Runners, inputs_file: Path, tmp: Path) -> list[np.ndarray]:
    """ONNX Runtime's outputs at 1 thread on the fixed input (RunnerError when it cannot)."""
    r = runners.get(ENGINES["ort"])
    r.ask(op="load", id="reference", model=model.path, threads=1, inputs=str(inputs_file), repeat=1,
          input_names=[n for n, _ in model.inputs], output_names=model.outputs)
    out = tmp / "reference.npz"
    r.ask(op="run", id="reference", outputs=str(out))
    r.ask(op="close", id="reference")
    return _npz_outputs(out)


def fresh_rss(engine: Engine, model_file: str, threads: int, inputs_file: Path, args) -> dict:
    command = engine.command("rss") + ["--model", model_file, "--threads", str(threads), "--inputs",
                                       str(inputs_file), "--runs", str(args.rss_runs)]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=args.timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:.0f} s"}
    lines = [s for s in done.stdout.splitlines() if s.strip()]
    if done.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    err = [s for s in done.stderr.splitlines() if s.strip()]
    return {"error": f"{_exit_reason(done.returncode)}" + (f": {one_line(err[-1])}" if err else "")}


def bench_one(model: ModelFile, threads: int, engines: list[Engine], ref: list[np.ndarray] | None,
              ref_error: str | None, runners: Runners, inputs_file: Path, tmp: Path, args) -> dict:
    results: dict[str, dict] = {}
    loaded: list[Engine] = []
    key = f"{model.name}@{threads}"

    where = f"{model.name} at {threads} thread{'s' if threads > 1 else ''}"

    def fail(e: Engine, status: str, reason: str) -> None:
        results[e.name] = {**results.get(e.name, {}), "status": status, "reason": reason}
        say(f"# {e.label} on {where}: {status}: {reason}")

    for e in engines:
        conv = model.converted.get(e.name, {"ok": False, "error": "not converted"})
        if ref is None:
            fail(e, "failed", f"no reference: {ref_error}")
            continue
        if not conv.get("ok"):
            fail(e, "failed", f"conversion: {one_line(conv['error'])}")
            continue
        runner = runners.get(e)
        try:
            loaded_answer = runner.ask(op="load", id=key, model=conv["model"], threads=threads,
                                       inputs=str(inputs_file), repeat=args.load_repeat,
                                       input_names=[n for n, _ in model.inputs], output_names=model.outputs)
            out_file = tmp / f"{e.name}.npz"
            runner.ask(op="run", id=key, outputs=str(out_file))
            outputs = _npz_outputs(out_file)
        except RunnerError as exc:
            fail(e, "failed", str(exc))
            continue
        check = gate(ref, outputs, args.tolerance)
        entry = {"load_ms": float(np.median(loaded_answer["load_ms"])), "load_ms_all": loaded_answer["load_ms"],
                 "max_abs_diff": check["max_abs_diff"], "bound": check["bound"], "model_file": conv["model"]}
        if "xnnpack" in loaded_answer:
            entry["xnnpack"] = loaded_answer["xnnpack"]
            if not loaded_answer["xnnpack"]:
                say(f"# {e.label} on {model.name}: XNNPACK took no part of the graph (LiteRT's own kernels run it)")
        loaded.append(e)
        if check["ok"]:
            results[e.name] = {"status": "timed", **entry}
        else:
            results[e.name] = {"status": "refused", "reason": check["reason"], **entry}
            say(f"# {e.label} on {where}: refused (not timed): {check['reason']}")

    timed = [e for e in engines if results[e.name]["status"] == "timed"]
    samples: dict[str, list[float]] = {e.name: [] for e in timed}
    for order in round_orders([e.name for e in timed], args.rounds):
        for name in order:
            if results[name]["status"] != "timed":
                continue  # it failed in an earlier round
            time.sleep(args.settle)
            try:
                answer = runners.get(ENGINES[name]).ask(op="time", id=key, warmup=2, min_runs=5,
                                                        min_time_s=args.min_time / args.rounds)
                samples[name] += answer["seconds"]
            except RunnerError as exc:
                fail(ENGINES[name], "failed", f"while timing: {exc}")
    for e in loaded:
        r = runners.running.get(e.name)
        if r is not None and r.alive():
            try:
                r.ask(op="close", id=key)
            except RunnerError:
                pass
    for name, s in samples.items():
        if results[name]["status"] == "timed" and s:
            ms = np.asarray(s) * 1e3
            results[name].update(median_ms=float(np.median(ms)), min_ms=float(ms.min()), runs=len(ms))
    if args.rss:
        for e in loaded:
            rss = fresh_rss(e, results[e.name].get("model_file", model.path), threads, inputs_file, args)
            if "error" in rss:
                results[e.name]["rss_error"] = rss["error"]
                say(f"# {e.label} on {where}: peak RSS not measured: {rss['error']}")
            else:
                results[e.name].update(peak_rss_mb=rss["peak_rss_mb"], fresh_load_ms=rss["load_ms"])
                if "ru_maxrss_mb" in rss:
                    results[e.name]["ru_maxrss_mb"] = rss["ru_maxrss_mb"]
    best, ratio = best_peer(results)
    return {"model": model.name, "onnx": model.path, "threads": threads,
            "inputs": {n: s for n, s in model.inputs}, "engines": results, "best_peer": best, "ratio": ratio}


def best_peer(results: dict[str, dict]) -> tuple[str | None, float | None]:
    """The fastest timed peer and edgesdk's median over its median (None, None without both)."""
    timed = {k: v["median_ms"] for k, v in results.items()
             if k != "edgesdk" and v.get("status") == "timed" and "median_ms" in v}
    if not timed:
        return None, None
    best = min(timed, key=timed.get)
    ours = results.get("edgesdk", {})
    if ours.get("status") != "timed" or "median_ms" not in ours:
        return best, None
    return best, ours["median_ms"] / timed[best]


# -- tables ------------------------------------------------------------------------------------------
def fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    status = entry.get("status")
    if status == "timed" and "median_ms" in entry:
        return fmt_ms(entry["median_ms"])
    if status == "refused":
        d = entry.get("max_abs_diff")
        return f"refused: max abs diff {d:.2g}" if d is not None else f"refused: {one_line(entry['reason'], 60)}"
    if status == "not installed":
        return "not installed"
    return f"failed: {one_line(entry.get('reason', ''), 60)}"


def _markdown(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def latency_table(rows: list[dict], columns: list[Engine]) -> list[str]:
    head = ["model", "threads"] + [e.label for e in columns] + ["ratio (edgesdk / best peer)"]
    body = []
    for row in rows:
        cells = [row["model"], str(row["threads"])] + [cell(row["engines"].get(e.name)) for e in columns]
        if row["ratio"] is not None:
            cells.append(f"{row['ratio']:.2f} ({ENGINES[row['best_peer']].label})")
        else:
            cells.append("n/a")
        body.append(cells)
    return _markdown(head, body)


def resources_table(rows: list[dict], columns: list[Engine]) -> list[str]:
    head = ["model", "threads"] + [f"{e.label} load ms / peak RSS MB" for e in columns]
    body = []
    for row in rows:
        cells = [row["model"], str(row["threads"])]
        for e in columns:
            entry = row["engines"].get(e.name) or {}
            if "load_ms" not in entry:
                cells.append("-")
                continue
            rss = f"{entry['peak_rss_mb']:.0f}" if "peak_rss_mb" in entry else "-"
            first = f" ({fmt_ms(entry['fresh_load_ms'])})" if "fresh_load_ms" in entry else ""
            cells.append(f"{fmt_ms(entry['load_ms'])}{first} / {rss}")
        body.append(cells)
    return _markdown(head, body)


# -- main ----------------------------------------------------------------------------------------
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def edgesdk_source() -> str:
    """Where the edgesdk package imported comes from, and its checkout's commit and uncommitted
    changes (an editable install runs the native module last built from that checkout)."""
    import edgesdk
    root = Path(edgesdk.__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return str(root)
    if not head:
        return str(root)
    changed = f" + uncommitted changes in {len(dirty)} files ({', '.join(d[3:] for d in dirty[:4])}" \
              f"{', ...' if len(dirty) > 4 else ''})" if dirty else ""
    return f"{root} at git {head}{changed}"


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=ZOO_BENCH, help="zoo model names or .onnx files (default: "
                   + " ".join(ZOO_BENCH) + ")")
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--min-time", type=float, default=3.0,
                   help="seconds per engine per (model, threads), all rounds together (default 3)")
    p.add_argument("--peers", nargs="+", choices=PEERS, default=PEERS, metavar="PEER",
                   help=f"among {', '.join(PEERS)} (default: all); edgesdk cpu is always timed")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write every row (and the header) to OUT")
    p.add_argument("--install", action="store_true", help="run the make target of every requested peer that "
                   "is not installed first")
    p.add_argument("--settle", type=float, default=SETTLE_S, help="pause before each timed block, s (default 0.3)")
    p.add_argument("--load-repeat", type=int, default=3, help="loads per engine and model; the median is shown")
    p.add_argument("--rss-runs", type=int, default=5, help="runs in the fresh process that measures peak RSS")
    p.add_argument("--no-rss", dest="rss", action="store_false", help="skip the peak-RSS processes")
    p.add_argument("--tolerance", type=float, default=TOLERANCE, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for one runner request (default 300)")
    p.add_argument("--convert-timeout", type=float, default=1800.0, help="seconds for one conversion (default 1800)")
    p.add_argument("--cache-dir", type=Path, default=CACHE, help="conversions and logs (default tests/.cache/peers)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.min_time < 0 or any(t < 1 for t in args.threads):
        p.error("--rounds and --threads must be at least 1, --min-time not negative")
    return args


def install(missing: list[Engine]) -> None:
    from tqdm import tqdm
    for e in tqdm(missing, desc="installing peers", unit="venv", file=sys.stderr, disable=None):
        target = e.target.split()[-1]
        say(f"# installing {e.label}: make {target} (in {ROOT})")
        started = time.perf_counter()
        done = subprocess.run(["make", "-C", str(ROOT), target], stdout=sys.stderr, stderr=sys.stderr)
        say(f"# make {target}: {'done' if done.returncode == 0 else 'FAILED (exit ' + str(done.returncode) + ')'} "
            f"in {time.perf_counter() - started:.0f} s")


def compile_edgesdk() -> None:
    """Byte-compile edgesdk's modules, as pip does when it installs a wheel: an editable checkout
    run with PYTHONDONTWRITEBYTECODE=1 (as in CI) otherwise compiles from source in every fresh
    process, ~75 ms of the first load that an installed edgesdk does not pay (the peers' wheels
    come compiled)."""
    import compileall

    import edgesdk
    compileall.compile_dir(Path(edgesdk.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from edgesdk import __version__ as edgesdk_version
    from edgesdk.native import active_isa
    from tqdm import tqdm

    command = "python tools/bench_peers.py " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    say(f"# {platform.processor() or platform.machine()} {time.strftime('%Y-%m-%d')} {command.strip()}")
    say(f"# cpu: {cpu_name()}, {os.cpu_count()} logical CPUs; edgesdk {edgesdk_version} kernel level "
        f"{active_isa()}; Python {platform.python_version()}; batch 1, fp32")
    say(f"# edgesdk timed: {edgesdk_source()}")
    compile_edgesdk()
    requested = [ENGINES[p] for p in PEERS if p in args.peers]
    missing = [e for e in requested if not e.installed()]
    if args.install and missing:
        install(missing)
        missing = [e for e in requested if not e.installed()]
    for e in missing:
        where = f"{e.venv} is not installed" if e.venv else "not installed"
        say(f"# {e.label} skipped: {where}; install it with {e.target}")
    engines = [ENGINES["edgesdk"]] + [e for e in requested if e not in missing]
    columns = [ENGINES["edgesdk"]] + requested
    log_dir = args.cache_dir / "logs"
    runners = Runners(log_dir, args.timeout)
    rows: list[dict] = []
    versions: dict[str, dict] = {}
    try:
        for e in engines + ([ENGINES["ort"]] if ENGINES["ort"] not in engines else []):
            try:
                info = runners.get(e).ask(op="info")
                versions[e.name] = info["versions"]
                say(f"# {e.label}: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items())
                    + f" ({e.venv or Path(sys.executable).parent.parent}, Python {info['python']})")
            except RunnerError as exc:
                versions[e.name] = {"error": str(exc)}
                say(f"# {e.label}: its runner does not start: {exc}")
        say(f"# runner logs: {log_dir}")
        models = resolve_models(args.models)
        convert_all(models, engines, args, log_dir)
        with tempfile.TemporaryDirectory(prefix="bench_peers-") as tmp_name:
            tmp = Path(tmp_name)
            steps = [(m, t) for m in models for t in args.threads]
            with tqdm(total=len(steps), desc="timing", unit="step", file=sys.stderr, disable=None) as bar:
                for m in models:
                    inputs_file = tmp / f"{m.name}.inputs.npz"
                    np.savez(inputs_file, **fixed_inputs(m))
                    try:
                        ref, ref_error = reference_outputs(m, runners, inputs_file, tmp), None
                    except RunnerError as exc:
                        ref, ref_error = None, f"ONNX Runtime: {exc}"
                    for t in args.threads:
                        bar.set_postfix_str(f"{m.name} {t} thread{'s' if t > 1 else ''}")
                        row = bench_one(m, t, engines, ref, ref_error, runners, inputs_file, tmp, args)
                        for e in missing:
                            row["engines"][e.name] = {"status": "not installed", "reason": e.target}
                        row["edgesdk_isa"] = active_isa()
                        rows.append(row)
                        say(json.dumps(row))
                        bar.update()
    finally:
        runners.close()
    say("#")
    say("# median ms per call (batch 1, fp32, ONNX Runtime's outputs within 1e-3 * max(1, max|ref|)); "
        "ratio below 1: edgesdk faster")
    for line in latency_table(rows, columns):
        say("# " + line)
    diffs = []
    for e in columns:
        checked = [(r["engines"][e.name]["max_abs_diff"], r["engines"][e.name]["bound"], r["model"]) for r in rows
                   if r["engines"].get(e.name, {}).get("max_abs_diff") is not None]
        if checked and e.name != "ort":
            d, b, m = max(checked, key=lambda c: c[0] / c[1])
            diffs.append(f"{e.label} {d:.2g} ({m}, bound {b:.2g})")
    if diffs:
        say("# largest max abs diff against ONNX Runtime (1 thread), relative to its bound: " + "; ".join(diffs))
    say("#")
    say(f"# load ms: session creation from the converted file, median of {args.load_repeat} in the engine's runner "
        f"(in brackets: the first load in a fresh process); peak RSS MB: VmHWM of that fresh process after "
        f"{args.rss_runs} runs (Python and numpy included)")
    for line in resources_table(rows, columns):
        say("# " + line)
    if args.json:
        args.json.write_text(json.dumps({"command": command.strip(), "date": time.strftime("%Y-%m-%d"),
                                         "machine": platform.machine(), "cpu": cpu_name(),
                                         "edgesdk_isa": active_isa(), "versions": versions, "rows": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
