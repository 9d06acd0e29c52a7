#!/usr/bin/env python3
"""LQ-Nets bitwise GEMM / convolution (edgesdk._native.LQGemm / LQConv) against edgesdk's own fp32
GEMM (kernels.pack_gemm + kernels.gemm) and dense convolution (kernels.ConvPlan), same shapes, one
thread, median of ``--repeats`` timed calls (each call timed alone, after warm-up). Cases: the
LQ-Nets thesis MLP layer (M=1, N=784, O=700) and its output layer (M=1, N=700, O=10), a batched
layer (M=64, N=1024, O=1024) and a 3x3 convolution 56x56x64 -> 64 (pad 1), each at
(Kw, Kx) = (1, 1), (2, 2), (3, 3). The ratio is fp32 time / LQ time.

    python tools/bench_lq.py [--repeats 200] [--isa avx512] [--popcnt auto|shuffle] [--threads 1]

The issue's targets (1 thread): at least 13x (1-bit), 6.9x (2-bit), 3.8x (3-bit) over fp32.

Measured on the 2-core AVX-512 Xeon of the development VM (avx512amx level, VPOPCNTDQ kernel):
the thesis MLP layer (batch-1 GEMV) 25x / 14x / 8x for 1 / 2 / 3 bits (fp32 ~75 us median here;
kernel_bench --lq, best-of in C++ with warm caches, gives fp32 40 us and 23x / 10x / 5x); the
vpshufb kernel (--popcnt shuffle, what Skylake-X runs) 25x / 10x / 5x. The output layer (O = 10)
is ~1 us either way: the Python call dominates. Batched (M = 64) and the 3x3 convolution fall
short: the bitwise work grows with Kw * Kx plane pairs while fp32 runs at AVX-512 FMA rate (and
the convolution against Winograd F(4x4, 3x3)); only 1-bit beats fp32 clearly there.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgesdk import _native as ext  # noqa: E402

K = ext.kernels
BITS = [(1, 1), (2, 2), (3, 3)]
TARGET = {1: 13.0, 2: 6.9, 3: 3.8}


def median_time(fn, repeats: int) -> float:
    for _ in range(max(3, repeats // 10)):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def quant(rng, kx: int):
    alpha = np.sort(rng.uniform(0.1, 1.0, kx)).astype(np.float32)
    levels = ((np.arange(2 ** kx)[:, None] >> np.arange(kx)) & 1) @ alpha.astype(np.float64)
    codes = np.argsort(levels, kind="stable").astype(np.uint8)
    s = levels[codes]
    return alpha, ((s[1:] + s[:-1]) / 2).astype(np.float32), codes


def weights(rng, o: int, kw: int, n: int):
    planes = rng.integers(0, 2 ** 32, size=(o, kw, (n + 31) // 32), dtype=np.uint64).astype(np.uint32)
    if n % 32:
        planes[:, :, -1] &= np.uint32((1 << (n % 32)) - 1)
    return planes, np.sort(rng.uniform(0.05, 1.0, (o, kw)), axis=1).astype(np.float32)


def bench_gemm(name, m, n, o, args, rows):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(m, n)).astype(np.float32)
    w = rng.normal(size=(o, n)).astype(np.float32)
    bias = rng.normal(size=o).astype(np.float32)
    packed = K.pack_gemm(w, bias, isa=args.isa)
    out = np.empty((m, o), np.float32)
    t_fp32 = median_time(lambda: K.gemm(x, packed, out, threads=args.threads), args.repeats)
    for kw, kx in BITS:
        alpha, thr, codes = quant(rng, kx)
        planes, basis = weights(rng, o, kw, n)
        g = ext.LQGemm(planes, basis, n, alpha, 0.0, thr, codes, bias, isa=args.isa, popcnt=args.popcnt)
        y = np.empty((m, o), np.float32)
        t = median_time(lambda: g.run(x, y, threads=args.threads), args.repeats)
        rows.append((name, f"{kw}/{kx}", t_fp32, t, g.kernel, kw))


def bench_conv(name, h, w_, c, o, args, rows):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, h, w_, c)).astype(np.float32)
    wt = rng.normal(size=(o, 3 * 3 * c)).astype(np.float32)  # OHWI flattened
    bias = rng.normal(size=o).astype(np.float32)
    packed = K.pack_gemm(wt, bias, isa=args.isa)
    plan = K.ConvPlan(packed, [1, h, w_, c], (3, 3), (1, 1), (1, 1), [1, 1, 1, 1])
    out = np.empty(plan.output_shape, np.float32)
    t_fp32 = median_time(lambda: plan.run(x, out, threads=args.threads), max(5, args.repeats // 10))
    fp32_name = f"{name} (fp32 {plan.algorithm})"
    for kw, kx in BITS:
        alpha, thr, codes = quant(rng, kx)
        planes, basis = weights(rng, o, kw, 9 * c)
        conv = ext.LQConv(planes, basis, c, (3, 3), alpha, 0.0, thr, codes, bias, isa=args.isa, popcnt=args.popcnt)
        y = np.empty((1, h, w_, o), np.float32)
        t = median_time(lambda: conv.run(x, y, pads=(1, 1, 1, 1), threads=args.threads), max(5, args.repeats // 10))
        rows.append((fp32_name, f"{kw}/{kx}", t_fp32, t, conv.kernel, kw))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--isa", default=None, help="force an ISA level (default: the active one)")
    ap.add_argument("--popcnt", default=None, help="auto | shuffle | vpopcnt")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    rows: list[tuple] = []
    bench_gemm("thesis MLP M=1 784->700", 1, 784, 700, args, rows)
    bench_gemm("thesis out M=1 700->10", 1, 700, 10, args, rows)
    bench_gemm("M=64 1024->1024", 64, 1024, 1024, args, rows)
    bench_conv("conv3x3 56x56x64->64", 56, 56, 64, 64, args, rows)
    print(f"edgesdk LQ bench: isa={args.isa or K.active_isa()} threads={args.threads} median of {args.repeats}")
    print(f"{'case':44} {'Kw/Kx':>5} {'fp32 us':>10} {'lq us':>9} {'ratio':>7} {'target':>6}  kernel")
    for name, bits, t32, t, kern, kw in rows:
        print(f"{name:44} {bits:>5} {t32 * 1e6:10.1f} {t * 1e6:9.1f} {t32 / t:6.1f}x {TARGET[kw]:5.1f}x  {kern}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
