"""The cpu lowering of the lq family (``edgesdk/ops/lq.py``): LQQuantize, and the LQ layer it
feeds (LQQuantize -> Conv / Gemm with :class:`~edgesdk.compress.encodings.LQBinary` weights) as
one bitwise (popcount) product.

When the quantizer's only reader is an LQ layer the native bitwise kernels take, the quantizer
costs nothing: its output is a view of its *float* input, and the layer's kernel encodes that
input into bit-planes itself (``cpu_native/src/kernels/lq*``). Nobody else reads the view, so
nobody sees the unquantized values under the quantized name. Otherwise LQQuantize runs on its own
(a threshold search per value, in numpy) and the layer runs its weights as per-channel codebooks
(``weights.uncoded``).
"""
from __future__ import annotations

import numpy as np

from ....compress.encodings import LQBinary
from ....compress.lq_layers import bitwise_reader
from ....graph import Node
from ....ops.lq import level_table
from ..program import NCHW, NHWC, Builder, Runner, Views
from .base import fused_act, lowering


def bitwise_layer(node: Node, b: Builder) -> bool:
    """Whether ``node`` (a Conv / Gemm) runs as a bitwise product with its quantizer fused: the
    graph's fusion rule (:func:`~edgesdk.compress.lq_layers.bitwise_reader`), a float32 session,
    the native kernels, and Gemm's alpha 1."""
    from .... import _native
    if b.precision != "fp32" or not hasattr(_native, "LQGemm"):
        return False
    wt = b.graph.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if wt is None or not isinstance(wt.encoding, LQBinary):  # most layers: decided without a graph walk
        return False
    quantizer = b.graph.producers().get(node.inputs[0])
    if quantizer is None or bitwise_reader(b.graph, quantizer) is not node:
        return False
    return node.op == "Conv" or float(node.attrs["alpha"]) == 1.0


@lowering("LQQuantize")
def lq_quantize(node: Node, b: Builder) -> None:
    x_name, y_name = node.inputs[0], node.outputs[0]
    reader = bitwise_reader(b.graph, node)
    layout = b.stored_layout(x_name)
    if reader is not None and bitwise_layer(reader, b):
        b.alias(y_name, b.read(x_name, layout), layout)
        b.emit(node, "view", lambda v: _noop, f"fused into {reader.name}'s bitwise product")
        return
    levels, thresholds, codes = level_table(node)
    ordered = levels[codes]
    x = b.read(x_name, layout)
    y = b.write(y_name, layout)

    def bind(v: Views) -> Runner:
        xs, out = v[x], v[y]

        def run() -> None:
            index = np.searchsorted(thresholds, xs, side="left")
            np.take(ordered, index, out=out)
            np.copyto(out, xs, where=np.isnan(xs))  # NaN stays NaN
        return run
    b.emit(node, "numpy", bind, f"{len(thresholds).bit_length()}-bit levels, threshold search")


def _noop() -> None:
    pass


def _quantizer_tables(node: Node, b: Builder) -> dict:
    """The LQ layer's activation basis, offset and threshold table, from the fused LQQuantize."""
    quantizer = b.graph.producers()[node.inputs[0]]
    _, thresholds, codes = level_table(quantizer)
    return {"act_basis": np.asarray(quantizer.attrs["basis"], np.float32), "act_offset": float(quantizer.attrs["offset"]),
            "thresholds": thresholds, "codes": codes}


def _describe(enc: LQBinary, tables: dict, kernel: str) -> str:
    return f"LQ bitwise w{enc.bits}a{len(tables['act_basis'])} (popcount), {kernel}"


def conv_bitwise(node: Node, b: Builder, enc: LQBinary, bias: np.ndarray | None) -> None:
    """An LQ convolution on the input's bit-planes: the kernel quantizes the NHWC input itself."""
    from .... import _native
    tables = _quantizer_tables(node, b)
    channels = b.shape(node.inputs[0])[1]
    a = node.attrs
    # the packed layer is read-only (each run allocates its own scratch): every arena shares it
    plan = _native.LQConv(enc.planes, enc.basis, channels, tuple(enc.shape[2:]), bias=bias, **tables)
    geometry = {"stride": tuple(a["strides"]), "dilation": tuple(a["dilations"]), "pads": list(a["pads"])}
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    act, threads = fused_act(node), b.threads_for(node)
    b.emit(node, "native", lambda v: _bind_run(plan, v[x], v[y], act, threads, **geometry),
           _describe(enc, tables, plan.kernel))


def gemm_bitwise(node: Node, b: Builder, enc: LQBinary, bias: np.ndarray | None) -> None:
    """An LQ Gemm (transB weights (out, in)) on the rows' bit-planes."""
    from .... import _native
    tables = _quantizer_tables(node, b)
    plan = _native.LQGemm(enc.planes, enc.basis, enc.cols, bias=bias, **tables)  # read-only, shared
    x = b.read(node.inputs[0], NCHW)
    y = b.write(node.outputs[0], NCHW)
    act, threads = fused_act(node), b.threads_for(node)
    b.emit(node, "native", lambda v: _bind_run(plan, v[x], v[y], act, threads), _describe(enc, tables, plan.kernel))


def _bind_run(plan, x: np.ndarray, y: np.ndarray, act, threads: int, **geometry) -> Runner:
    name, alpha, beta = act

    def run() -> None:
        plan.run(x, y, **geometry, act_name=name, act_alpha=alpha, act_beta=beta, threads=threads)
    return run
