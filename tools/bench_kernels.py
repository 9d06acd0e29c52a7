#!/usr/bin/env python3
"""Micro-benchmarks of the native CPU kernels (edgesdk._native.kernels).

    python tools/bench_kernels.py                 # GEMM vs numpy sgemm, clustered FC vs dense FC
    python tools/bench_kernels.py --threads 2 --json

* GEMM: the packed-weight GEMM's GFLOPS (the active level's igemm microkernel, e.g.
  f32_igemm_6x16__avx2, named in the report) on square and conv-like shapes next to numpy's sgemm
  (OpenBLAS) with the same thread count. numpy runs in a subprocess with OPENBLAS_CORETYPE and
  OPENBLAS_L2_SIZE removed from its environment (so OpenBLAS picks its own kernel for this CPU)
  and its thread count set through OPENBLAS_NUM_THREADS / OMP_NUM_THREADS.
* Clustered FC: a 4096 x 4096 fully connected layer at batch 1, 4-bit layer codebook (the lookup
  happens in registers from the packed indices) against the dense fp32 GEMV on the same shape.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GEMM_SHAPES = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (3136, 64, 576), (784, 256, 128),
               (196, 512, 4608)]  # (M, N, K): square, then ResNet / MobileNet-like convolution GEMMs


def best_seconds(fn, min_time: float, min_runs: int = 5) -> float:
    """The fastest of repeated calls (after one warm-up): the least disturbed on a shared machine."""
    fn()
    best, start, runs = float("inf"), time.perf_counter(), 0
    while runs < min_runs or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best


def native_gemm_gflops(m: int, n: int, k: int, threads: int, min_time: float) -> float:
    from edgesdk import _native
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    packed = _native.kernels.pack_gemm(rng.standard_normal((n, k), dtype=np.float32), None, "nk")
    out = np.empty((m, n), np.float32)
    seconds = best_seconds(lambda: _native.kernels.gemm(a, packed, out, "none", None, None, threads), min_time)
    return 2 * m * n * k / seconds / 1e9


NUMPY_SNIPPET = """
import json, sys, time
import numpy as np
m, n, k, min_time = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rng = np.random.default_rng(0)
a = rng.standard_normal((m, k), dtype=np.float32)
b = rng.standard_normal((k, n), dtype=np.float32)
out = np.empty((m, n), np.float32)
np.matmul(a, b, out=out)
best, start, runs = float("inf"), time.perf_counter(), 0
while runs < 5 or time.perf_counter() - start < min_time:
    t0 = time.perf_counter(); np.matmul(a, b, out=out); best = min(best, time.perf_counter() - t0); runs += 1
print(json.dumps(2 * m * n * k / best / 1e9))
"""


def numpy_gemm_gflops(m: int, n: int, k: int, threads: int, min_time: float) -> float:
    env = {key: value for key, value in os.environ.items() if key not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", NUMPY_SNIPPET, str(m), str(n), str(k), str(min_time)],
                         env=env, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout))


def clustered_fc(threads: int, min_time: float, size: int = 4096, bits: int = 4) -> dict:
    from edgesdk import _native
    from edgesdk.compress.bitpack import pack_bits
    k = _native.kernels
    rng = np.random.default_rng(0)
    indices = rng.integers(0, 1 << bits, size=(size, size), dtype=np.uint8)
    codebook = rng.standard_normal((1, 1 << bits), dtype=np.float32)
    clustered = k.pack_clustered(pack_bits(indices, bits), bits, size, size, codebook)
    dense = k.pack_gemm(np.ascontiguousarray(codebook[0][indices]), None, "nk")
    x = rng.standard_normal((1, size), dtype=np.float32)
    y_dense, y_clustered = np.empty((1, size), np.float32), np.empty((1, size), np.float32)
    t_dense = best_seconds(lambda: k.gemm(x, dense, y_dense, "none", None, None, threads), min_time)
    t_clustered = best_seconds(lambda: k.clustered_gemm(x, clustered, y_clustered, "none", None, None, threads), min_time)
    np.testing.assert_allclose(y_clustered, y_dense, rtol=1e-3, atol=1e-3 * float(np.abs(y_dense).max()))
    return {"shape": [size, size], "bits": bits, "dense_fp32_ms": t_dense * 1e3, "clustered_ms": t_clustered * 1e3,
            "speedup": t_dense / t_clustered, "clustered_bytes": clustered.nbytes, "dense_bytes": size * size * 4}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1])
    p.add_argument("--min-time", type=float, default=1.0, help="seconds per measurement")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from edgesdk import _native
    names = _native.kernels.kernel_names()
    report = {"isa": _native.kernels.active_isa(), "gemm_kernel": names["igemm_f32w"],
              "clustered_kernel": names["clustered_gemv"], "gemm": [], "clustered_fc": []}
    if not args.json:
        print(f"{report['isa']} kernels: GEMM {report['gemm_kernel']}, clustered FC {report['clustered_kernel']}",
              flush=True)
    for threads in args.threads:
        for m, n, k in GEMM_SHAPES:
            ours = native_gemm_gflops(m, n, k, threads, args.min_time)
            numpy = numpy_gemm_gflops(m, n, k, threads, args.min_time)
            report["gemm"].append({"m": m, "n": n, "k": k, "threads": threads, "edgesdk_gflops": ours,
                                   "numpy_gflops": numpy, "fraction_of_numpy": ours / numpy})
            if not args.json:
                print(f"gemm {m}x{n}x{k} threads {threads}: edgesdk {ours:7.1f} GFLOPS  numpy {numpy:7.1f} GFLOPS  "
                      f"({100 * ours / numpy:.0f}%)", flush=True)
        fc = clustered_fc(threads, args.min_time) | {"threads": threads}
        report["clustered_fc"].append(fc)
        if not args.json:
            print(f"fc 4096x4096 batch 1 threads {threads}: dense fp32 {fc['dense_fp32_ms']:.3f} ms  "
                  f"clustered 4-bit {fc['clustered_ms']:.3f} ms  speedup {fc['speedup']:.2f}x", flush=True)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
