#!/usr/bin/env python3
"""Kernel time of ``conv_huffman`` (Huffman-coded blocks decoded per work-group, issue 15) next to
``conv_csr`` (the same pruned + clustered weights as relative-index CSR) and the dense kernels, on
single layers of MobileNetV2 (1x1) and ResNet-18 (3x3), 90% pruned + 4-bit codebook, batch 1.
Device time from the profiling events, best of ``--repeats`` runs.

    python tools/bench_huffman_opencl.py [--repeats 20] [--block 128x128] [--json]

PoCL 3 on 2 shared Xeon (AVX-512) cores, 128x128 blocks, best of 30 (the machine was shared, so
runs vary by up to 2x; these are the steadier of two runs):

    layer                          dense (kernel)          conv_csr   conv_huffman   weights csr -> huffman
    mnv2 1x1 320->1280 @7x7        0.22 ms (conv_oc)       0.38 ms    0.34 ms        48 -> 41 KiB
    mnv2 1x1 96->576 @14x14        0.13 ms (conv_gemm)     0.25 ms    0.16 ms         7 ->  6 KiB
    resnet18 3x3 256->256 @14x14   0.70 ms (Winograd)      5.09 ms    4.97 ms        68 -> 59 KiB
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgesdk.compress.encode import encode_huffman, encode_sparse, prune_mask  # noqa: E402
from opencl_layer import device_ms, layer_graph  # noqa: E402

LAYERS = {  # name: (OC, C, K, H = W, pad)
    "mnv2 1x1 320->1280 @7x7": (1280, 320, 1, 7, 0),
    "mnv2 1x1 96->576 @14x14": (576, 96, 1, 14, 0),
    "resnet18 3x3 256->256 @14x14": (256, 256, 3, 14, 1),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--block", default="128x128", help="Huffman block rows x columns")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    block = tuple(int(v) for v in args.block.split("x"))
    rng = np.random.default_rng(0)
    rows = []
    for name, (oc, c, k, hw, pad) in LAYERS.items():
        w = rng.standard_normal((oc, c, k, k)).astype(np.float32)
        x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
        csr = encode_sparse(w, prune_mask(w, 0.9), bits=4)
        huff = encode_huffman(csr, block=block)
        row = {"layer": name, "csr_bytes": csr.nbytes, "huffman_bytes": huff.nbytes}
        for what, weights in (("dense", csr.decode()), ("csr", csr), ("huffman", huff)):
            ms, kernels, y = device_ms(layer_graph(weights, x.shape, k, pad), x, args.repeats)
            row[f"{what}_ms"], row[f"{what}_kernel"] = ms, kernels
            if what == "dense":
                ref = y
            else:
                row[f"{what}_max_rel_err"] = float(np.abs(y - ref).max() / np.abs(ref).max())
        rows.append(row)
        if not args.json:
            print(f"{name:30s} dense {row['dense_ms']:7.3f} ms ({row['dense_kernel']})  conv_csr {row['csr_ms']:7.3f} ms"
                  f"  conv_huffman {row['huffman_ms']:7.3f} ms  huffman/csr {row['huffman_ms'] / row['csr_ms']:.2f}x"
                  f"  weights {row['csr_bytes'] / 1024:.0f} -> {row['huffman_bytes'] / 1024:.0f} KiB", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
