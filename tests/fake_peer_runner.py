#!/usr/bin/env python3
"""A stand-in for tools/peers/peer_runner.py that speaks its protocol (serve, rss) without an engine.

tests/test_bench_peers.py points tools/bench_peers.py's engines at it. It computes a model's
outputs with ONNX Runtime (1 thread: the harness's reference is ONNX Runtime at 1 thread, so the
outputs agree exactly), then spoils them as asked, and answers `time` with made-up durations
instead of running anything:

    --ms M          every timed call "took" M ms (a block is max(min_runs, 5) of them)
    --diff D        add D * max(1, max|output|) to the first element of every output (the gate
                    allows 1e-3 of it: 0.9e-3 passes, 1.1e-3 is refused)
    --crash-on OP   die by SIGSEGV when asked OP (load, run, time)
    --trace FILE    append "<engine> <op>" to FILE for every request (the order the harness asks in)
    --rss-mb R      what `rss` reports as the peak RSS
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import numpy as np


def outputs(model: str, inputs: str, diff: float) -> list[np.ndarray]:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    with np.load(inputs) as z:
        feeds = {n: z[n] for n in z.files}
    ys = [np.array(y, np.float32) for y in session.run(None, feeds)]
    for y in ys:
        y.reshape(-1)[0] += diff * max(1.0, float(np.max(np.abs(y))))
    return ys


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["serve", "rss"])
    p.add_argument("--engine", required=True)
    p.add_argument("--ms", type=float, default=1.0)
    p.add_argument("--diff", type=float, default=0.0)
    p.add_argument("--crash-on")
    p.add_argument("--trace")
    p.add_argument("--rss-mb", type=float, default=42.0)
    p.add_argument("--model")
    p.add_argument("--threads", type=int)
    p.add_argument("--inputs")
    p.add_argument("--runs", type=int)
    args = p.parse_args()
    if args.what == "rss":
        print(json.dumps({"peak_rss_mb": args.rss_mb, "ru_maxrss_mb": args.rss_mb, "load_ms": 1.5}))
        return 0
    models: dict[str, dict] = {}
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if args.trace:
            with open(args.trace, "a") as f:
                f.write(f"{args.engine} {op}\n")
        if op == args.crash_on:
            os.kill(os.getpid(), signal.SIGSEGV)
        if op == "quit":
            print(json.dumps({"ok": True}), flush=True)
            return 0
        if op == "info":
            answer = {"ok": True, "engine": args.engine, "versions": {"fake": "1.0"}, "python": "3"}
        elif op == "load":
            models[request["id"]] = request
            answer = {"ok": True, "load_ms": [2.0] * int(request.get("repeat", 1))}
        elif op == "run":
            loaded = models[request["id"]]
            ys = outputs(loaded["model"], loaded["inputs"], args.diff)
            np.savez(request["outputs"], **{str(i): y for i, y in enumerate(ys)})
            answer = {"ok": True}
        elif op == "time":
            answer = {"ok": True, "seconds": [args.ms / 1000] * max(int(request.get("min_runs", 5)), 5)}
        elif op == "close":
            models.pop(request["id"], None)
            answer = {"ok": True}
        else:
            answer = {"ok": False, "error": f"unknown op {op!r}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
