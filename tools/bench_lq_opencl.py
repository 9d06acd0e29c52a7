#!/usr/bin/env python3
"""Kernel time of a fused LQ layer (issue 16: ``lq_encode`` + ``lq_gemm``, popcount products of
activation and weight bit-planes) next to the dense fp32 kernel the backend picks for the same
shape, and the weights-only LQ path (float input, the clustered kernel). Device time from the
profiling events (sum of the layer's kernels), best of ``--repeats`` runs, batch as listed.

    python tools/bench_lq_opencl.py [--repeats 20] [--wbits 2] [--abits 2] [--json]

The ratio printed is LQ / dense (below 1: the popcount layer is faster). On PoCL (a CPU: no
popcount-friendly SIMD lanes across work-items, no GPU memory hierarchy) these numbers are *not*
GPU numbers; they say how the kernels behave on this device only.

PoCL on 2 shared Xeon (AVX-512, no VPOPCNTDQ) cores, w2a2, best of 10, load average ~4.4 from
other jobs (runs vary by up to 2x); "dense" includes the standalone lq_quantize in front:

    layer                          dense                      LQ fused   LQ/dense  weights-only (conv_direct)
    resnet18 3x3 64->64 @28x28     0.714 ms (Winograd)        3.847 ms   5.39x      4.294 ms
    resnet18 3x3 256->256 @14x14   1.530 ms (Winograd)       11.913 ms   7.79x     16.977 ms
    mnv2 1x1 96->576 @14x14        0.362 ms (conv_gemm)       1.840 ms   5.08x      1.616 ms
    fc 1024->1024 batch 1          0.143 ms (gemm_nt)         0.119 ms   0.84x      1.072 ms
    fc 1024->1024 batch 32         4.981 ms (gemm_nt)         1.997 ms   0.40x     32.441 ms
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgesdk.compress.encodings import LQBinary  # noqa: E402
from edgesdk.compress.lq import fit_activation_basis, fit_weight_basis, pack_planes  # noqa: E402
from opencl_layer import device_ms, layer_graph  # noqa: E402

LAYERS = {  # name: (OC, C, K, H = W, pad, batch); K 0: a Gemm (C -> OC) on `batch` rows
    "resnet18 3x3 64->64 @28x28": (64, 64, 3, 28, 1, 1),
    "resnet18 3x3 256->256 @14x14": (256, 256, 3, 14, 1, 1),
    "mnv2 1x1 96->576 @14x14": (576, 96, 1, 14, 0, 1),
    "fc 1024->1024 batch 1": (1024, 1024, 0, 1, 0, 1),
    "fc 1024->1024 batch 32": (1024, 1024, 0, 1, 0, 32),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--wbits", type=int, default=2)
    ap.add_argument("--abits", type=int, default=2)
    ap.add_argument("--only", default="", help="substring of the layer names to run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    for name, (oc, c, k, hw, pad, batch) in LAYERS.items():
        if args.only not in name:
            continue
        w_shape = (oc, c, k, k) if k else (oc, c)
        x_shape = (batch, c, hw, hw) if k else (batch, c)
        w = rng.standard_normal(w_shape).astype(np.float32)
        x = np.maximum(rng.standard_normal(x_shape), 0).astype(np.float32)  # ReLU-like inputs
        beta, codes = fit_weight_basis(w.reshape(oc, -1), args.wbits, iters=4)
        enc = LQBinary(w_shape, basis=beta, planes=pack_planes(codes, args.wbits), bits=args.wbits)
        quantizer = fit_activation_basis(x, args.abits)
        row = {"layer": name, "wbits": args.wbits, "abits": args.abits}
        for what, graph in (("dense", layer_graph(enc.decode(), x_shape, k, pad, quantizer)),
                            ("lq", layer_graph(enc, x_shape, k, pad, quantizer)),
                            ("weights_only", layer_graph(enc, x_shape, k, pad))):
            ms, kernels, y = device_ms(graph, x, args.repeats)
            row[f"{what}_ms"], row[f"{what}_kernels"] = ms, kernels
            if what == "dense":
                ref = y
            elif what == "lq":
                row["lq_max_rel_err"] = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))
        rows.append(row)
        if not args.json:
            print(f"{name:30s} dense {row['dense_ms']:8.3f} ms ({row['dense_kernels']})  "
                  f"LQ w{args.wbits}a{args.abits} {row['lq_ms']:8.3f} ms  "
                  f"LQ/dense {row['lq_ms'] / row['dense_ms']:5.2f}x  "
                  f"weights-only {row['weights_only_ms']:8.3f} ms ({row['weights_only_kernels']})", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
