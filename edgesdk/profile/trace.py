"""Run profiles as a Chrome Trace Event file (``chrome://tracing``, https://ui.perfetto.dev).

One process per run, one thread per placement and clock (``opencl (device queue)``,
``native (host)``, ...) plus an ``iteration`` thread, and one representative iteration: every
op's median time, laid end to end in execution order. Times are in microseconds, as the format
requires; ``displayTimeUnit`` asks viewers to show milliseconds.
"""
from __future__ import annotations

from typing import Any

Run = dict[str, Any]
ITERATION_TID = 0


def chrome_trace(runs: list[Run]) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for pid, run in enumerate(runs, start=1):
        events.extend(_run_events(run, pid))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "edgesdk profile", "runs": len(runs),
                          "note": "one iteration built from each op's median time"}}


def lane_name(op: dict[str, Any]) -> str:
    """The thread an op is drawn on: its placement and the clock that timed it."""
    return f"{op['placement']} ({'device queue' if op.get('timed_on') == 'device' else 'host'})"


def _run_events(run: Run, pid: int) -> list[dict[str, Any]]:
    lanes: dict[str, int] = {}
    slices, start = [], 0.0
    for index, op in enumerate(run["ops"]):
        tid = lanes.setdefault(lane_name(op), len(lanes) + 1)
        duration = max(0.0, op["median_ms"]) * 1e3
        slices.append({"name": op["node"], "cat": op["placement"], "ph": "X", "pid": pid, "tid": tid,
                       "ts": round(start, 3), "dur": round(duration, 3),
                       "args": {"index": index, "op": op["op"], "kernels": op.get("kernels", []),
                                "min_ms": op["min_ms"], "median_ms": op["median_ms"], "p90_ms": op["p90_ms"],
                                "output_bytes": op.get("output_bytes"), "weight_bytes": op.get("weight_bytes"),
                                "note": op.get("note", "")}})
        start += duration
    latency = run["latency"]
    iteration = {"name": "iteration (sum of op medians)", "cat": "iteration", "ph": "X", "pid": pid,
                 "tid": ITERATION_TID, "ts": 0.0, "dur": round(start, 3),
                 "args": {"latency_median_ms": latency["median_ms"], "latency_p90_ms": latency["p90_ms"]}}
    threads = {"iteration": ITERATION_TID, **lanes}
    metadata = [_meta("process_name", pid, 0, name=f"{run['label']} | {run.get('device', '')}"),
                _meta("process_sort_index", pid, 0, sort_index=pid)]
    for name, tid in threads.items():
        metadata += [_meta("thread_name", pid, tid, name=name), _meta("thread_sort_index", pid, tid, sort_index=tid)]
    return metadata + [iteration] + slices


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}
