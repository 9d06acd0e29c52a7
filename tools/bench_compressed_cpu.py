#!/usr/bin/env python3
"""Compressed weights on the cpu backend (issue 15), each run against the dense model in the
same process, in interleaved blocks (order reversed every other round, a pause before each).

    python tools/bench_compressed_cpu.py sparse [--models mobilenet_v2 ...] [--prune 0.9]
                                                [--threads 1 2] [--rounds 3] [--min-time 2] [--size 224]
    python tools/bench_compressed_cpu.py clustered [--bits 4] [--threads 1 2] [--rounds 3] [--min-time 1]
    python tools/bench_compressed_cpu.py huffman [--prune 0.9] [--bits 4] [--block 128 128] [--threads 1 2]
    python tools/bench_compressed_cpu.py huffman-sizes [--models mobilenet_v2 resnet18] [--prune 0.9] [--bits 4]

``sparse``: a pruned model (``edgesdk pack --prune P``) three ways:
- ``sparse``: as the session runs it by default (1x1 layers at or above the level's crossover
  sparsity on the sparse CHW kernels, the depthwise layers between them in CHW);
- ``dense``: the same graph with ``EDGESDK_CPU_SPARSE=0`` (every pruned layer decoded to dense
  at session creation, the path sessions took before the sparse kernels);
- ``ort``: ONNX Runtime on the decoded model exported as ONNX (it has no sparse kernels).
One JSON line per (model, threads): medians in ms, ``dense / sparse`` (the issue's target:
>= 1.3x on MobileNetV2 at --prune 0.9), ``ort / sparse``, the largest sparse-vs-dense output
difference relative to the output's scale (target <= 1e-5), and how many Conv steps ran sparse
and how many depthwise steps in CHW. The per-layer kernel comparison (sparse vs dense 1x1 on
MobileNetV2's shapes, per sparsity) is ``kernel_bench --sparse``.

``clustered``: ResNet-18's 3x3 convolutions at 224x224 (+ReLU), k-means clustered at --bits
per layer, on the ClusteredConvPlan (indirection buffer, no im2col), against the same layer
dense: the session's default (Winograd where it wins) and the direct indirect GEMM
(``EDGESDK_CPU_WINOGRAD=0``), with the per-call memory the clustered step holds (indirection +
decoded panel per thread) next to what the im2col path it replaced wrote (padded copy + im2col).

``huffman``: MobileNetV2's 1x1 shapes (224 x 224, batch 1) pruned to --prune and clustered to
--bits (a per-layer codebook), Huffman-coded in blocks of --block (``encode_huffman``), run by the
streaming ``HuffmanConv1x1`` (each block row decoded into a per-thread workspace just before use)
against ``sparse_conv1x1`` on the same weights packed at load (the packer's NB, and NB = 1: the
streaming kernel's), with the decode alone (``decode_only``: every block row into the workspaces)
and its share of the streaming layer's time (target < 10%), and the stored bytes of each. Also the
load-time check: ``decode_entries`` (the package validator) on a 512 x 4608 layer at --prune.

``huffman-sizes``: zoo models packed with --prune and --bits, with and without ``--huffman``:
package bytes (the issue's target: >= 20% smaller), bits per weight of the coded layers before and
after, pack time and cpu session creation time (median of 3).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # zoo: the cached exports
sys.path.insert(0, str(ROOT / "tools"))

from edgesdk import Session  # noqa: E402
from edgesdk.compress.recipe import LayerSettings, Recipe  # noqa: E402
from edgesdk.export import export_onnx  # noqa: E402
from edgesdk.backends.cpu.lower.base import native_kernels  # noqa: E402
from edgesdk.native import active_isa  # noqa: E402
from edgesdk.pack import compress_model  # noqa: E402
from edgesdk.profile.latency import time_calls  # noqa: E402

from bench import ort_session  # noqa: E402  (tools/bench.py: the same ONNX Runtime settings)

SETTLE_S = 0.3  # every runtime's workers spin a while after a call: let them sleep first


def model_file(name: str, size: int) -> str:
    from zoo import export_onnx as zoo_export
    return str(zoo_export(name, input_shape=(1, 3, size, size)))


def step_counts(sess: Session) -> dict[str, int]:
    notes = [(s.op, s.note) for s in sess._impl.steps]
    return {"sparse_conv_steps": sum(op == "Conv" and n.startswith("sparse") for op, n in notes),
            "chw_depthwise_steps": sum(op == "Conv" and n.startswith("depthwise (CHW)") for op, n in notes),
            "layout_conversions": sum(op in ("nchw->nhwc", "nhwc->nchw") for op, _ in notes)}


def bench_model(args, name: str, tmp: Path) -> list[dict]:
    path = model_file(name, args.size)
    graph, _ = compress_model(path, Recipe(LayerSettings(prune=args.prune)))
    dense_onnx = tmp / f"{name}-pruned.onnx"
    export_onnx(graph, dense_onnx)
    x = np.random.default_rng(2).standard_normal(graph.tensors[graph.inputs[0]].shape).astype(np.float32)
    feeds = {graph.inputs[0]: x}
    rows = []
    for threads in args.threads:
        sparse = Session(graph, backend="cpu", threads=threads, optimize=False)
        # every pruned layer decoded to dense (the crossover is read per session)
        dense = session_with({"EDGESDK_CPU_SPARSE": "0"}, graph, threads=threads, optimize=False)
        ort = ort_session(str(dense_onnx), threads, {})
        want = next(iter(dense.run(feeds).values()))
        got = next(iter(sparse.run(feeds).values()))
        scale = max(1.0, float(np.max(np.abs(want))))
        times = interleaved({"sparse": timer(lambda: sparse.run(feeds)), "dense": timer(lambda: dense.run(feeds)),
                             "ort": timer(lambda: ort.run(None, feeds))}, args.rounds, args.min_time)
        med = {k: 1000 * float(np.median(v)) for k, v in times.items()}
        row = {"model": name, "size": args.size, "prune": args.prune, "threads": threads, "isa": active_isa(),
               **{f"{k}_ms": round(v, 3) for k, v in med.items()},
               "dense_over_sparse": round(med["dense"] / med["sparse"], 2),
               "ort_over_sparse": round(med["ort"] / med["sparse"], 2),
               "max_rel_diff_vs_dense": float(np.max(np.abs(got - want)) / scale),
               **step_counts(sparse), "runs": {k: len(v) for k, v in times.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def interleaved(blocks: dict, rounds: int, min_time: float) -> dict[str, list[float]]:
    """Seconds per call of each runner, ``rounds`` interleaved blocks of ``min_time / rounds``."""
    times: dict[str, list[float]] = {k: [] for k in blocks}
    for r in range(rounds):
        for key in (list(blocks) if r % 2 == 0 else list(blocks)[::-1]):
            time.sleep(SETTLE_S)
            times[key] += blocks[key](min_time / rounds)
    return times


def timer(run):
    return lambda budget: time_calls(run, warmup=2, min_runs=5, min_time_s=budget)


# (channels in, channels out, input size, stride): ResNet-18's 3x3 convolutions at 224x224
RESNET18_3X3 = [(64, 64, 56, 1), (64, 128, 56, 2), (128, 128, 28, 1), (128, 256, 28, 2), (256, 256, 14, 1),
                (256, 512, 14, 2), (512, 512, 7, 1)]


def conv3x3(c: int, k: int, size: int, stride: int):
    from onnx import helper as oh
    from onnx_builders import graph_model
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    bias = (rng.standard_normal(k) * 0.1).astype(np.float32)
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["z"], pads=[1, 1, 1, 1], strides=[stride, stride]),
             oh.make_node("Relu", ["z"], ["y"])]
    return graph_model(nodes, {"x": (1, c, size, size)}, ["y"], {"w": weight, "b": bias})


def session_with(env: dict[str, str], model, **options) -> Session:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return Session(model, backend="cpu", **options)
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def bench_clustered(args) -> list[dict]:
    rows = []
    for c, k, size, stride in RESNET18_3X3:
        model = conv3x3(c, k, size, stride)
        graph, _ = compress_model(model, Recipe(LayerSettings(cluster_bits=args.bits)))
        x = {"x": np.random.default_rng(1).standard_normal((1, c, size, size)).astype(np.float32)}
        out = size // stride
        for threads in args.threads:
            sessions = {"clustered": Session(graph, backend="cpu", threads=threads, optimize=False),
                        "dense": session_with({}, model, threads=threads),
                        "dense_direct": session_with({"EDGESDK_CPU_WINOGRAD": "0"}, model, threads=threads)}
            times = interleaved({key: timer(lambda s=s: s.run(x)) for key, s in sessions.items()}, args.rounds,
                                args.min_time)
            med = {key: 1000 * float(np.median(v)) for key, v in times.items()}
            plan = native_kernels().ClusteredConvPlan(
                native_kernels().pack_clustered(np.zeros(k * 9 * c, np.uint8), 1, k, 9 * c,
                                                np.zeros((1, 2), np.float32)),
                [1, size, size, c], (3, 3), (stride, stride), pads=[1, 1, 1, 1])
            plan.run(np.zeros((1, size, size, c), np.float32), np.empty((1, out, out, k), np.float32))
            row = {"layer": f"{c}->{k} {size}x{size} s{stride}", "bits": args.bits, "threads": threads,
                   "isa": active_isa(), **{f"{key}_ms": round(v, 3) for key, v in med.items()},
                   "clustered_over_dense": round(med["clustered"] / med["dense"], 2),
                   "clustered_over_dense_direct": round(med["clustered"] / med["dense_direct"], 2),
                   "indirection_bytes": plan.indirection_bytes, "panel_bytes_per_thread": plan.panel_bytes,
                   "im2col_path_bytes": 4 * (c * (size + 2) ** 2 + out * out * 9 * c),
                   "dense_note": next(s.note for s in sessions["dense"]._impl.steps if s.op == "Conv").split(", ")[0]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("# layer threads | clustered ms | dense ms (note) | dense direct ms | clustered/dense | "
          "clustered/direct | indirection + panels KB | im2col path KB")
    for r in rows:
        print(f"# {r['layer']} {r['threads']} | {r['clustered_ms']} | {r['dense_ms']} ({r['dense_note']}) | "
              f"{r['dense_direct_ms']} | {r['clustered_over_dense']}x | {r['clustered_over_dense_direct']}x | "
              f"{(r['indirection_bytes'] + r['threads'] * r['panel_bytes_per_thread']) // 1024} | "
              f"{r['im2col_path_bytes'] // 1024}")
    return rows


# MobileNetV2 (224 x 224): its 1x1 convolutions' shapes (C in, K out, H = W), as kernel_bench's list
MOBILENETV2_1X1 = [(32, 16, 112), (16, 96, 112), (24, 144, 56), (144, 24, 56), (32, 192, 28), (192, 32, 28),
                   (64, 384, 14), (384, 64, 14), (96, 576, 14), (576, 96, 14), (160, 960, 7), (960, 160, 7),
                   (320, 1280, 7)]


def bench_huffman(args) -> list[dict]:
    from edgesdk import _native
    from edgesdk.backends.cpu.huffman import decode_entries, prepare_conv1x1
    from edgesdk.compress.encode import encode_huffman, encode_sparse, prune_mask
    rng = np.random.default_rng(0)
    block = tuple(args.block)
    big = rng.standard_normal((512, 4608, 1, 1)).astype(np.float32)
    big_enc = encode_huffman(encode_sparse(big, prune_mask(big, args.prune)), block=block)
    check_ms = 1000 * float(np.median(time_calls(lambda: decode_entries(big_enc), warmup=2, min_runs=10,
                                                 min_time_s=0.5)))
    print(json.dumps({"check": "decode_entries 512x4608", "prune": args.prune, "entries": big_enc.entries,
                      "ms": round(check_ms, 3)}), flush=True)
    rows = []
    for c, k, size in MOBILENETV2_1X1:
        w = (rng.standard_normal((k, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        bias = (rng.standard_normal(k) * 0.1).astype(np.float32)
        enc = encode_huffman(encode_sparse(w, prune_mask(w, args.prune), bits=args.bits), block=block)
        conv = prepare_conv1x1(enc, bias)
        er, ec, ei = decode_entries(enc)
        order = np.lexsort((ec, er))
        row_ptr = np.concatenate([[0], np.cumsum(np.bincount(er, minlength=k))]).astype(np.int64)
        book = np.ascontiguousarray(enc.codebook, dtype=np.float32)
        packed = {nb: _native.pack_sparse_conv1x1(row_ptr, ec[order].astype(np.int32), None, bias, c,
                                                  indices=ei[order].astype(np.uint8), codebook=book, block=nb)
                  for nb in (0, 1)}
        x = rng.standard_normal((1, c, size, size)).astype(np.float32)
        for threads in args.threads:
            ys = {key: np.empty((1, k, size, size), np.float32) for key in ("huffman", "sparse", "sparse_nb1")}
            runners = {
                "huffman": lambda t=threads: conv.run(x, ys["huffman"], "relu6", None, None, t),
                "sparse": lambda t=threads: _native.sparse_conv1x1(x, packed[0], ys["sparse"], "relu6", None, None, t),
                "sparse_nb1": lambda t=threads: _native.sparse_conv1x1(x, packed[1], ys["sparse_nb1"], "relu6", None,
                                                                       None, t),
                "decode": lambda t=threads: conv.decode_only(t),
            }
            times = interleaved({key: timer(run) for key, run in runners.items()}, args.rounds, args.min_time)
            med = {key: 1000 * float(np.median(v)) for key, v in times.items()}
            assert np.array_equal(ys["huffman"], ys["sparse_nb1"]), "streaming != sparse_conv1x1 (NB 1)"
            row = {"layer": f"{c}->{k} {size}x{size}", "threads": threads, "isa": conv.isa, "nnz": conv.nnz,
                   **{f"{key}_ms": round(v, 4) for key, v in med.items()},
                   "decode_share": round(med["decode"] / med["huffman"], 3),
                   "huffman_over_sparse": round(med["huffman"] / med["sparse"], 2),
                   "huffman_bytes": enc.nbytes, "sparse_packed_bytes": packed[0].nbytes, "sparse_nb": packed[0].block}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"# decode_entries (load-time check) 512x4608 at {args.prune:.0%} pruned, raw fp32: {check_ms:.2f} ms")
    print("# layer threads | huffman ms | sparse ms (NB) | sparse NB1 ms | decode ms | decode share | huffman/sparse "
          "| huffman KB | packed KB")
    for r in rows:
        print(f"# {r['layer']} {r['threads']} | {r['huffman_ms']} | {r['sparse_ms']} ({r['sparse_nb']}) | "
              f"{r['sparse_nb1_ms']} | {r['decode_ms']} | {100 * r['decode_share']:.1f}% | "
              f"{r['huffman_over_sparse']}x | {r['huffman_bytes'] / 1024:.1f} | {r['sparse_packed_bytes'] / 1024:.1f}")
    for threads in args.threads:
        sel = [r for r in rows if r["threads"] == threads]
        tot = {key: sum(r[f"{key}_ms"] for r in sel) for key in ("huffman", "sparse", "sparse_nb1", "decode")}
        print(f"# all layers, {threads} thread(s): huffman {tot['huffman']:.3f} ms, sparse {tot['sparse']:.3f} ms, "
              f"sparse NB1 {tot['sparse_nb1']:.3f} ms, decode {tot['decode']:.3f} ms "
              f"({100 * tot['decode'] / tot['huffman']:.1f}% of huffman)")
    return rows


def bench_huffman_sizes(args) -> list[dict]:
    """Packages of the zoo models pruned + clustered, with and without --huffman: bytes, bits per
    weight of the coded layers, pack time and session creation time (the codes are checked and
    decoded on load)."""
    from edgesdk.pack import pack_model
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            source = model_file(name, args.size)
            sizes, pack_s, open_ms, layers = {}, {}, {}, []
            for coded in (False, True):
                out = Path(tmp) / f"{name}-{coded}.edgepkg"
                settings = LayerSettings(prune=args.prune, cluster_bits=args.bits, huffman=coded)
                start = time.perf_counter()
                result = pack_model(source, out, Recipe(settings))
                pack_s[coded] = time.perf_counter() - start
                sizes[coded] = out.stat().st_size
                opens = []
                for _ in range(3):
                    start = time.perf_counter()
                    Session(str(out), backend="cpu").close()
                    opens.append(1000 * (time.perf_counter() - start))
                open_ms[coded] = float(np.median(opens))
                if coded:
                    layers = [r for r in result.layers if r.bytes_before_huffman is not None]
            params = sum(r.params for r in layers)
            before = sum(r.bytes_before_huffman for r in layers)
            after = sum(r.bytes_after for r in layers)
            row = {"model": name, "prune": args.prune, "bits": args.bits, "package_bytes": sizes[False],
                   "huffman_package_bytes": sizes[True],
                   "package_reduction": round(1 - sizes[True] / sizes[False], 4),
                   "coded_layers": len(layers), "coded_bits_per_weight": [round(8 * before / params, 3),
                                                                           round(8 * after / params, 3)],
                   "coded_layer_reduction": round(1 - after / before, 4),
                   "pack_s": [round(pack_s[False], 2), round(pack_s[True], 2)],
                   "session_create_ms": [round(open_ms[False], 1), round(open_ms[True], 1)]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("# model | package bytes | with --huffman | smaller by | coded layers bits/weight | session creation ms")
    for r in rows:
        print(f"# {r['model']} | {r['package_bytes']:,} | {r['huffman_package_bytes']:,} | "
              f"{100 * r['package_reduction']:.1f}% | {r['coded_bits_per_weight'][0]} -> {r['coded_bits_per_weight'][1]} "
              f"| {r['session_create_ms'][0]} -> {r['session_create_ms'][1]}")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    sp = sub.add_parser("sparse", help="a pruned model: sparse vs dense decode vs ONNX Runtime")
    sp.add_argument("--models", nargs="+", default=["mobilenet_v2"])
    sp.add_argument("--prune", type=float, default=0.9, help="per-layer magnitude sparsity (edgesdk pack --prune)")
    sp.add_argument("--size", type=int, default=224, help="input height and width")
    cp = sub.add_parser("clustered", help="ResNet-18's 3x3 layers clustered vs dense")
    cp.add_argument("--bits", type=int, default=4)
    hp = sub.add_parser("huffman", help="MobileNetV2's 1x1 layers Huffman-coded: streaming vs sparse_conv1x1")
    hp.add_argument("--prune", type=float, default=0.9)
    hp.add_argument("--bits", type=int, default=4)
    hp.add_argument("--block", type=int, nargs=2, default=[128, 128], metavar=("ROWS", "COLS"))
    zp = sub.add_parser("huffman-sizes", help="zoo packages pruned + clustered, with and without --huffman")
    zp.add_argument("--models", nargs="+", default=["mobilenet_v2", "resnet18"])
    zp.add_argument("--prune", type=float, default=0.9)
    zp.add_argument("--bits", type=int, default=4)
    zp.add_argument("--size", type=int, default=224)
    for q in (sp, cp, hp):
        q.add_argument("--threads", type=int, nargs="+", default=[1, 2])
        q.add_argument("--rounds", type=int, default=3)
        q.add_argument("--min-time", type=float, default=2.0, help="seconds per runner, over all rounds")
    args = p.parse_args(argv)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, edgesdk cpu level {active_isa()}, "
          f"{time.strftime('%Y-%m-%d')}", flush=True)
    if args.mode == "clustered":
        bench_clustered(args)
        return 0
    if args.mode == "huffman":
        bench_huffman(args)
        return 0
    if args.mode == "huffman-sizes":
        bench_huffman_sizes(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [row for name in args.models for row in bench_model(args, name, Path(tmp))]
    print("# model threads | sparse ms | dense ms | ORT ms | dense/sparse | ORT/sparse | max rel diff")
    for r in rows:
        print(f"# {r['model']} {r['threads']} | {r['sparse_ms']} | {r['dense_ms']} | {r['ort_ms']} | "
              f"{r['dense_over_sparse']}x | {r['ort_over_sparse']}x | {r['max_rel_diff_vs_dense']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
