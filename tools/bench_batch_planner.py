"""Benchmark of the memory-budgeted batch planner (issue 15, seed 004 section 2.8).

For MobileNetV2 and ResNet-18 at 224x224 (the zoo exports, tests/zoo), batch 8, budgets of
1.0, 0.75, 0.5 and 0.35 x the unconstrained peak (what an ordinary batch-8 session holds, by the
planner's memory model), on the cpu backend:

* throughput (images/s) of the budgeted session, of the unconstrained batch-8 session and of the
  best *fixed* sub-batch that fits the budget (seed 004's baseline: an ordinary session at batch
  b | 8, run 8/b times), timed in interleaved rounds (each round runs every contender once, in a
  shuffled order; the median round counts). The 1.0x row runs the ordinary path, so its ratio to
  the unconstrained session is the noise floor of the machine;
* the planned peak, the run buffer the backend allocated, and the peak RSS of a fresh process
  that builds the session (measurements cached) and runs it: VmHWM after the runs minus VmRSS
  before the session, plus the graph's constants loaded before that point;
* the plan (sub-batch per stage).

Prints one JSON line per (model, budget) and a summary table. Usage:

    .venv/bin/python tools/bench_batch_planner.py [--models mobilenet_v2 resnet18] [--rounds 7]
        [--threads N] [--fractions 1 0.75 0.5 0.35]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

BATCH = 8


def load_graph(path: str):
    from edgesdk.loader import load_model
    from edgesdk.passes import optimize
    graph = load_model(path)
    optimize(graph)
    return graph


def rss_child(path: str, budget: int | None, threads: int | None, runs: int) -> dict:
    """In this (fresh) process: the session's peak RSS over its creation and ``runs`` runs."""
    graph = load_graph(path)
    constants = sum(t.nbytes for t in graph.constants())
    import edgesdk
    x = np.random.default_rng(0).standard_normal(graph.tensors[graph.inputs[0]].shape).astype(np.float32)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    before = _status("VmRSS")
    sess = edgesdk.Session(graph, backend="cpu", threads=threads, memory_budget=budget)
    created = _status("VmHWM")
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    for _ in range(runs):
        sess.run({graph.inputs[0]: x})
    running = _status("VmHWM")
    if not reset:
        return {"rss_peak_bytes": None, "hwm_reset": False}
    # the graph's constants were loaded before `before`; the session holds them
    return {"rss_peak_bytes": max(created, running) - before + constants,
            "rss_run_peak_bytes": running - before + constants,
            "rss_creation_peak_bytes": created - before + constants, "hwm_reset": True}


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_rss(path: str, budget: int | None, threads: int | None) -> dict:
    code = ("import json, sys; sys.path.insert(0, %r); from bench_batch_planner import rss_child; "
            "print(json.dumps(rss_child(%r, %r, %r, 3)))" % (str(ROOT / "tools"), path, budget, threads))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if out.returncode:
        return {"rss_peak_bytes": None, "rss_error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_model(name: str, fractions: list[float], rounds: int, threads: int | None) -> list[dict]:
    import edgesdk
    from edgesdk.backends.cpu.staged import plan_budgeted
    from edgesdk.errors import MemoryBudgetError
    from edgesdk.runtime.batch_plan import divisors, rebatch
    from edgesdk.runtime.plan import make_plan
    from zoo import export_onnx
    path = str(export_onnx(name, input_shape=(BATCH, 3, 224, 224)))
    graph = load_graph(path)
    x = np.random.default_rng(0).standard_normal((BATCH, 3, 224, 224)).astype(np.float32)
    feeds = {graph.inputs[0]: x}
    unconstrained = edgesdk.Session(graph, backend="cpu", threads=threads)
    full_bytes = plan_budgeted(make_plan(graph), precision="fp32", threads=threads, budget=1 << 62)[1].peak_bytes
    # fixed sub-batches: an ordinary session at batch b (its bytes by the same model)
    fixed_bytes = {}
    for b in divisors(BATCH):
        g = rebatch(graph, b)
        fixed_bytes[b] = (g, plan_budgeted(make_plan(g), precision="fp32", threads=threads, budget=1 << 62)[1].peak_bytes)
    want = unconstrained.run(feeds)[graph.outputs[0]]

    contenders = {"unconstrained": lambda: unconstrained.run(feeds)}
    fixed_sessions = {}
    configs = []
    for fraction in fractions:
        budget = int(full_bytes * fraction)
        row = {"model": name, "batch": BATCH, "fraction": fraction, "budget_bytes": budget,
               "unconstrained_bytes": full_bytes}
        start = time.perf_counter()
        try:
            sess = edgesdk.Session(graph, backend="cpu", threads=threads, memory_budget=budget)
        except MemoryBudgetError as exc:
            row.update(error=str(exc), minimum_bytes=exc.minimum)
            configs.append((row, None, None))
            continue
        row["plan_seconds"] = round(time.perf_counter() - start, 2)
        plan = sess.batch_plan
        got = sess.run(feeds)[graph.outputs[0]]
        row.update(mode=plan.mode, planned_peak_bytes=plan.peak_bytes, run_buffer_bytes=plan.run_buffer_bytes,
                   allocated_run_buffers=[c.memory.nbytes for c in getattr(sess._impl, "_contexts", None)._idle]
                   if plan.mode == "staged" else None,
                   sub_batches=[s.sub_batch for s in plan.stages], stages=len(plan.stages),
                   max_abs_diff=float(np.max(np.abs(got - want))), predicted_ms=plan.ms)
        fitting = [b for b, (_, nbytes) in fixed_bytes.items() if nbytes <= budget]
        for b in fitting:
            if b not in fixed_sessions:
                g = fixed_bytes[b][0]
                s_b = edgesdk.Session(g, backend="cpu", threads=threads)
                fixed_sessions[b] = s_b
                contenders[f"fixed{b}"] = (lambda s_b=s_b, b=b, g=g: [s_b.run({g.inputs[0]: x[i:i + b]})
                                                                      for i in range(0, BATCH, b)])
        row["fixed_candidates"] = fitting
        key = f"budget{fraction}"
        contenders[key] = lambda sess=sess: sess.run(feeds)
        configs.append((row, key, sess))

    times: dict[str, list[float]] = {k: [] for k in contenders}
    for fn in contenders.values():  # warm-up
        fn()
    order = list(contenders.items())
    shuffle = np.random.default_rng(0)
    for _ in range(rounds):
        shuffle.shuffle(order)  # no contender always runs right after the same one (caches, spinning threads)
        for key, fn in order:
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    ips = {k: BATCH / statistics.median(v) for k, v in times.items()}
    rows = []
    for row, key, sess in configs:
        row["unconstrained_images_per_s"] = round(ips["unconstrained"], 2)
        if key is not None:
            row["images_per_s"] = round(ips[key], 2)
            row["vs_unconstrained"] = round(ips[key] / ips["unconstrained"], 3)
            fixed = [(ips[f"fixed{b}"], b) for b in row["fixed_candidates"]]
            if fixed:
                best, b = max(fixed)
                row.update(best_fixed_sub_batch=b, best_fixed_images_per_s=round(best, 2),
                           vs_best_fixed=round(ips[key] / best, 3))
            sess.close()
            row.update(measure_rss(path, row["budget_bytes"], threads))
            row["rss_within_budget"] = (row["rss_peak_bytes"] <= row["budget_bytes"]
                                        if row.get("rss_peak_bytes") is not None else None)
        rows.append(row)
    rss_full = measure_rss(path, None, threads).get("rss_peak_bytes")
    for row in rows:
        row["unconstrained_rss_peak_bytes"] = rss_full
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2", "resnet18"])
    parser.add_argument("--fractions", nargs="+", type=float, default=[1.0, 0.75, 0.5, 0.35])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    rows = []
    for name in args.models:
        for row in bench_model(name, args.fractions, args.rounds, args.threads):
            print(json.dumps(row), flush=True)
            rows.append(row)
    mib = lambda n: f"{n / 2**20:.1f}" if n is not None else "-"  # noqa: E731
    print()
    header = ("model", "budget", "MiB", "mode", "img/s", "vs unc", "fixed b", "vs fixed", "planned", "RSS peak",
              "sub-batches")
    print(" | ".join(header))
    for r in rows:
        if "error" in r:
            print(" | ".join([r["model"], f"{r['fraction']}x", mib(r["budget_bytes"]), "infeasible: minimum "
                              + mib(r.get("minimum_bytes")) + " MiB", "-", "-", "-", "-", "-", "-", "-"]))
            continue
        print(" | ".join([r["model"], f"{r['fraction']}x", mib(r["budget_bytes"]), r["mode"], f"{r['images_per_s']:.1f}",
                          f"{r['vs_unconstrained']:.2f}", str(r.get("best_fixed_sub_batch", "-")),
                          f"{r['vs_best_fixed']:.2f}" if "vs_best_fixed" in r else "-",
                          mib(r["planned_peak_bytes"]), mib(r.get("rss_peak_bytes")),
                          "/".join(map(str, r["sub_batches"])) or "8 (whole)"]))
    if rows:
        print(f"unconstrained RSS peak: " + ", ".join(f"{r['model']} {mib(r['unconstrained_rss_peak_bytes'])} MiB"
                                                      for r in rows if r["fraction"] == args.fractions[0]))


if __name__ == "__main__":
    main()
