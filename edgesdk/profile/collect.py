"""Profile collection: everything measured about one session, as one JSON-serialisable *run
profile* (schema ``edgesdk.profile/1``).

The same function runs on the host (``edgesdk profile``) and on boards (the remote runner calls
it and ships the dict back as JSON); reports take a list of run profiles. Standard library and
numpy only: a board has no matplotlib.

Protocol: ``warmup`` plain runs, then ``iters`` timed plain runs (the latency, with the power
sampler running when a power sensor is given), then ``iters`` profiled runs (per-op statistics;
profiling adds per-op overhead, so the plain runs are the latency to quote).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import numpy as np

from ..errors import InputError
from ..runtime.cost import layer_costs
from .latency import LatencyStats
from .records import ProfileReport
from .sensors import PowerSampler, read_environment

if TYPE_CHECKING:
    from ..graph import Graph
    from ..runtime.session import Session

SCHEMA = "edgesdk.profile/1"
ProgressFn = Callable[[int, int, str], None]  # (done, total, detail), e.g. edgesdk.progress.Progress


def profile_session(session: "Session", feeds: Mapping[str, np.ndarray] | None = None, *, warmup: int = 3,
                    iters: int = 20, label: str | None = None, thermal: Iterable[str | Path] | None = None,
                    power: Mapping[str, str | Path] | None = None, progress: ProgressFn | None = None
                    ) -> dict[str, Any]:
    """Measure ``session`` and return its run profile (see the module docstring for the protocol).

    ``feeds=None`` uses :func:`random_feeds` (seeded, so runs are comparable). ``thermal``: extra
    temperature files (millidegrees) read with the thermal zones. ``power``: ``{"current": path,
    "voltage": path}`` of a power-supply node (``current_now``/``voltage_now``); energy is None
    without it, and None with a note when it cannot be read."""
    if not isinstance(warmup, int) or warmup < 0:
        raise InputError(f"warmup must be an integer >= 0, got {warmup!r}")
    if not isinstance(iters, int) or iters < 1:
        raise InputError(f"iters must be an integer >= 1, got {iters!r}")
    feeds = random_feeds(session) if feeds is None else feeds
    notes: list[str] = []
    sampler = _power_sampler(power, notes)
    thermal = list(thermal or ())
    started_at, clock = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.perf_counter()
    tick = _counter(progress, warmup + 2 * iters)

    before = read_environment(thermal)
    for _ in range(warmup):
        session.run(feeds)
        tick("warm-up")
    with sampler if sampler is not None else contextlib.nullcontext():
        seconds, outputs = _timed_runs(session, feeds, iters, tick)
    reports = []
    for _ in range(iters):
        reports.append(session.profile(feeds))
        tick("per-op")
    after = read_environment(thermal)

    energy = sampler.summary(iters) if sampler is not None else None
    if sampler is not None and energy is None:
        notes.append(f"no energy: fewer than 2 readable power samples from {sampler.source}")
    first = reports[0]
    return {
        "schema": SCHEMA,
        "label": label or _default_label(session),
        "started_at": started_at,
        "duration_s": time.perf_counter() - clock,
        "warmup": warmup,
        "iters": iters,
        "model": describe_model(session.graph),
        "host": host_info(),
        "backend": session.backend,
        "precision": session.precision,
        "threads": session.threads,
        "device": first.device,
        "latency": {**LatencyStats.from_seconds(seconds).to_dict(), "samples_ms": [s * 1e3 for s in seconds]},
        "ops": summarize_ops(reports),
        "op_profile": _op_profile_totals(reports),
        "placements": first.placements,
        "memory": {**first.memory.to_dict(), "memory_mode": first.memory_mode},
        "environment": {"before": before, "after": after},
        "energy": energy,
        "outputs": summarize_outputs(outputs),
        "notes": notes,
    }


def random_feeds(session: "Session", seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs of the session's shapes and dtypes, the same for the same seed."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(session.graph.tensors[name].dtype)
            for name, shape in session.input_shapes.items()}


def summarize_ops(reports: list[ProfileReport]) -> list[dict[str, Any]]:
    """Per-op statistics over several profiled runs, in execution order. ``min_ms``/``median_ms``/
    ``p90_ms`` are of each op's device time when it ran kernels, else of its host time."""
    order = [r.node for r in reports[0].ops]
    if any([r.node for r in report.ops] != order for report in reports):
        raise ValueError("profiled runs of one session listed different steps")
    rows = []
    for records in zip(*(report.ops for report in reports)):
        first = records[0]
        times = np.array([r.time_ms for r in records])
        rows.append({
            "node": first.node, "op": first.op, "placement": first.placement, "kernels": list(first.kernels),
            "note": first.note, "timed_on": first.timed_on, "output_bytes": first.output_bytes,
            "weight_bytes": first.weight_bytes, "scratch_bytes": first.scratch_bytes,
            "min_ms": float(times.min()), "median_ms": float(np.median(times)),
            "p90_ms": float(np.percentile(times, 90)),
            "device_ms_median": float(np.median([r.device_ms for r in records])),
            "host_ms_median": float(np.median([r.host_ms for r in records])),
        })
    return rows


def _op_profile_totals(reports: list[ProfileReport]) -> dict[str, Any]:
    """Medians over the profiled runs: their wall time, and the sum of the per-op times."""
    return {"runs": len(reports),
            "wall_ms_median": float(np.median([r.wall_ms for r in reports])),
            "ops_ms_median": float(np.median([sum(op.time_ms for op in r.ops) for r in reports])),
            "device_ms_median": float(np.median([r.device_ms for r in reports])),
            "host_ms_median": float(np.median([r.host_ms for r in reports]))}


def summarize_outputs(outputs: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Shape, dtype, a checksum of the bytes and a few statistics per output: enough to see that
    runs agree without shipping arrays."""
    summary = {}
    for name, value in outputs.items():
        value = np.ascontiguousarray(value)
        stats = {"min": value.min(), "max": value.max(), "mean": value.mean()} if value.size else {}
        summary[name] = {"shape": list(value.shape), "dtype": str(value.dtype),
                         "checksum": "sha256:" + hashlib.sha256(value.tobytes()).hexdigest()[:16],
                         # NaN and inf are not JSON: None says the statistic is not a number
                         **{key: float(x) if np.isfinite(x) else None for key, x in stats.items()},
                         "argmax": int(value.argmax()) if value.size else None}
    return summary


def describe_model(graph: "Graph") -> dict[str, Any]:
    package = graph.metadata.get("package")
    file = (package.get("path") if isinstance(package, dict) else None) or graph.metadata.get("source")
    layers = layer_costs(graph)
    return {"name": Path(file).stem if file else graph.name, "file": str(file) if file else None,
            "nodes": len(graph.nodes), "params": sum(x.params for x in layers),
            "macs": sum(x.macs for x in layers),
            "inputs": {name: list(graph.tensors[name].shape) for name in graph.inputs}}


@functools.cache
def host_info() -> dict[str, Any]:
    """The machine the profile ran on (cached: it does not change during a process)."""
    from .. import __version__
    return {"hostname": platform.node(), "os": f"{platform.system()} {platform.release()}",
            "arch": platform.machine(), "cpu": _cpu_name(), "cores": os.cpu_count(),
            "python": platform.python_version(), "edgesdk_version": __version__}


def _cpu_name() -> str:
    """x86 names the CPU in /proc/cpuinfo; ARM boards name the board there or in the device tree."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line)
    except OSError:
        fields = {}
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    for key in ("model name", "Model", "Hardware", "cpu model"):
        if fields.get(key):
            return fields[key]
    try:
        return Path("/sys/firmware/devicetree/base/model").read_text().strip("\0\n ")
    except OSError:
        return platform.processor() or platform.machine()


def _default_label(session: "Session") -> str:
    threads = [f"{session.threads} thread{'s' if session.threads != 1 else ''}"] if session.threads else []
    return " ".join([session.backend, session.precision, *threads])


def _timed_runs(session: "Session", feeds: Mapping[str, np.ndarray], iters: int,
                tick: Callable[[str], None]) -> tuple[list[float], dict[str, np.ndarray]]:
    seconds, outputs = [], {}
    for _ in range(iters):
        start = time.perf_counter()
        outputs = session.run(feeds)
        seconds.append(time.perf_counter() - start)
        tick("timing")
    return seconds, outputs


def _power_sampler(power: Mapping[str, str | Path] | None, notes: list[str]) -> PowerSampler | None:
    if power is None:
        return None
    if not {"current", "voltage"} <= set(power):
        raise InputError(f"power must name 'current' and 'voltage' files, got keys {sorted(power)}")
    try:
        return PowerSampler.from_sysfs(power["current"], power["voltage"])
    except InputError as exc:  # a missing sensor must not cost the whole profile (on a board, say)
        notes.append(f"no energy: {exc}")
        return None


def _counter(progress: ProgressFn | None, total: int) -> Callable[[str], None]:
    done = 0

    def tick(detail: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, detail)
    return tick
