"""The opencl lowering of the lq family (``edgesdk/ops/lq.py``, issue 16): LQQuantize, and Conv /
Gemm with binary-coded (:class:`~edgesdk.compress.encodings.LQBinary`) weights
(``cl_kernels/lq.cl``).

Three paths, said in each step's note:

* **fused LQ layer** - an LQQuantize whose output only one Conv / Gemm with LQBinary weights reads
  (as its input 0; not a graph output; the layer otherwise lowerable, :func:`fused_layer`). The
  quantizer's step runs nothing: its output tensor is never written and the backend aliases it to
  the quantizer's input (``backend._view_roots``, so the input stays alive until the layer runs,
  and no memory is planned for the float levels). The layer's step runs ``lq_codes`` (windows of
  more than one tap: every input element coded once, into the scratch block), ``lq_encode``
  (the quantizer's input -> bit-planes of the im2col rows, per-plane popcounts and a NaN flag per
  output pixel, in the layer's scratch block) and ``lq_gemm`` (popcount products with the weight
  planes, integer accumulation, the basis combination in float, then the shared epilogue).
* **standalone LQQuantize** - any other quantizer: ``lq_quantize``, elementwise levels.
* **weights-only LQ layer** - LQBinary weights on a float input: each output channel's 2^Kw levels
  are its codebook (``LQBinary.levels()``) and the codes its indices, run through the clustered
  kernel (``conv_direct`` reading indices and codebook; conv.py's ``_clustered``).
"""
from __future__ import annotations

import math

import numpy as np

from ....compress.lq import words_for
from ....compress.lq_layers import bitwise_reader
from ....graph import Graph, Node
from ....ops.lq import level_table
from ..kernels import DeviceBuffer, Launch, LoweringContext, NotLowerable, activation_defines, ceil_div, kernel, \
    storage_defines

ACC_BUDGET = 64  # int accumulators per lq_gemm work-item: TM * TO * PLANES * Kw


# -- which quantizers fuse ----------------------------------------------------------------------

def fused_layer(graph: Graph, quantizer: Node) -> Node | None:
    """The Conv / Gemm an LQQuantize is fused into, or None where it runs on its own. Pure in the
    graph (the backend's memory plan and both lowerings ask it and must agree), and conservative:
    every case the fused lowering could refuse is left unfused."""
    layer = bitwise_reader(graph, quantizer)
    if layer is None:
        return None
    source = quantizer.inputs[0]
    if graph.tensors[source].is_constant or graph.tensors[source].dtype != np.float32:
        return None
    bias = layer.input(2)
    if bias and not _float_constant(graph, bias):
        return None
    try:
        activation_defines(layer.attrs.get("fused_activation"))
    except NotLowerable:
        return None
    if layer.op == "Gemm" and bias and layer.attrs["beta"] != 0.0:
        c_shape = graph.tensors[bias].shape
        if math.prod(c_shape) != graph.tensors[layer.outputs[0]].shape[1] or (len(c_shape) == 2 and c_shape[0] != 1):
            return None
    return layer


def _float_constant(graph: Graph, name: str) -> bool:
    tensor = graph.tensors[name]
    if not tensor.is_constant:
        return False
    if tensor.encoding is not None:
        return tensor.encoding.kind == "fp16"
    return np.asarray(tensor.data).dtype == np.float32


def fused_quantizers(graph: Graph) -> dict[str, Node]:
    """Output tensor of every fused LQQuantize -> the quantizer (the backend aliases them)."""
    return {q.outputs[0]: q for q in graph.nodes if q.op == "LQQuantize" and fused_layer(graph, q) is not None}


def _fused_quantizer_of(graph: Graph, layer: Node) -> Node | None:
    producer = graph.producers().get(layer.inputs[0])
    if producer is not None and producer.op == "LQQuantize" and fused_layer(graph, producer) is layer:
        return producer
    return None


# -- LQQuantize ---------------------------------------------------------------------------------

def _table(quantizer: Node) -> np.ndarray:
    """lq.cl's table: thresholds (+inf pad), sorted levels, codes of the sorted levels."""
    levels, thresholds, codes = level_table(quantizer)
    count = levels.size
    return np.concatenate([thresholds, [np.inf], levels[codes], codes.astype(np.float32)]).astype(np.float32) \
        .reshape(3 * count)


def _table_buffer(ctx: LoweringContext, quantizer: Node) -> DeviceBuffer:
    return ctx.small_float(quantizer.outputs[0], "lq-table", _table(quantizer))


def _bits(quantizer: Node) -> int:
    return len(quantizer.attrs["basis"])


@kernel("LQQuantize")
def lq_quantize(ctx: LoweringContext, node: Node) -> list[Launch]:
    layer = fused_layer(ctx.graph, node)
    if layer is not None:
        ctx.note(f"fused into {layer.op} {layer.name!r} (bit-planes encoded there; output not materialised)")
        return []
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    defines = {"LQ_QUANTIZE": 1, "KX": _bits(node), "TOTAL": x.size, **storage_defines(X=x.half, Y=y.half)}
    ctx.note(f"standalone: {_bits(node)}-bit levels")
    return [ctx.launch("lq.cl", "lq_quantize", defines, [x.buffer, _table_buffer(ctx, node), y.buffer], (x.size,),
                       "eltwise")]


# -- LQ layers ----------------------------------------------------------------------------------

def _layer_shape(node: Node, graph: Graph):
    """(M output pixels, COLS, geometry-or-None) of a Conv / Gemm; None for other nodes."""
    from .conv import ConvGeometry
    x_shape, y_shape = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    if node.op == "Conv":
        geom = ConvGeometry.of(node, x_shape, y_shape)
    else:
        geom = ConvGeometry(x_shape[0], x_shape[1], 1, 1, y_shape[1], 1, 1)
    return geom


def _planes(graph: Graph, quantizer: Node, geom) -> tuple[int, bool, bool]:
    """(PLANES, MASK, HAS_SHIFT): a mask plane carries the offset where taps reach the padding."""
    offset = float(quantizer.attrs["offset"])
    mask = offset != 0.0 and not geom.all_interior
    return _bits(quantizer) + int(mask), mask, offset != 0.0 and not mask


def lq_scratch_bytes(node: Node, graph: Graph) -> int:
    """Bytes of the fused LQ layer's encoded input (0 for any other node)."""
    if node.op not in ("Conv", "Gemm") or len(node.inputs) < 2:
        return 0
    enc = graph.tensors[node.inputs[1]].encoding
    if enc is None or enc.kind != "lq":
        return 0
    quantizer = _fused_quantizer_of(graph, node)
    if quantizer is None:
        return 0
    geom = _layer_shape(node, graph)
    planes, _, _ = _planes(graph, quantizer, geom)
    m = geom.n * geom.oh * geom.ow
    codes = 2 * geom.n * geom.c * geom.h * geom.w if _precoded(geom) else 0
    return 4 * m * (planes * words_for(geom.c * geom.kh * geom.kw) + planes + 1) + codes


def _precoded(geom) -> bool:
    """Whether lq_codes codes every input element once first (a tap window reads each several times)."""
    return geom.kh * geom.kw > 1


def lq_launches(ctx: LoweringContext, node: Node, geom, x: DeviceBuffer, x_half: bool, y: DeviceBuffer,
                y_half: bool, epilogue) -> list[Launch]:
    """Launches of a Conv / Gemm (as a 1x1 conv) with LQBinary weights ``node.inputs[1]``."""
    quantizer = _fused_quantizer_of(ctx.graph, node)
    if quantizer is None:
        return [_weights_only(ctx, node, geom, x, x_half, y, y_half, epilogue)]
    return _fused(ctx, node, quantizer, geom, y, y_half, epilogue)


def _weights_only(ctx, node, geom, x, x_half, y, y_half, epilogue) -> Launch:
    from ....compress.bitpack import pack_bits
    from ....compress.encodings import Clustered
    from .conv import _clustered
    w_name = node.inputs[1]
    enc = ctx.encoding(w_name)
    key = (w_name, "lq-as-clustered")
    clustered = ctx.weight_cache.get(key)
    if clustered is None:
        clustered = Clustered(enc.shape, codebook=enc.levels(), indices=pack_bits(enc.codes(), enc.bits),
                              bits=enc.bits)
        ctx.weight_cache[key] = clustered
    ctx.note(f"{w_name}: {enc.describe()} weights-only (float input): per-channel {1 << enc.bits}-level codebook, "
             f"clustered kernel")
    return _clustered(ctx, w_name, geom, x, x_half, y, y_half, epilogue, clustered)


def _tiles(m: int, oc: int, per_pair: int) -> tuple[int, int]:
    """(TM, TO) of lq_gemm: one pixel per work-item (neighbouring work-items then load neighbouring
    words: PoCL vectorises across them; 4 x 4 tiles ran 2-3x slower there) and as many output
    channels as ACC_BUDGET int accumulators allow."""
    return 1, max(1, min(oc, ACC_BUDGET // per_pair))


def _fused(ctx: LoweringContext, node: Node, quantizer: Node, geom, y: DeviceBuffer, y_half: bool,
           epilogue) -> list[Launch]:
    w_name = node.inputs[1]
    enc = ctx.encoding(w_name)
    source = ctx.act(quantizer.inputs[0])
    kx, kw = _bits(quantizer), enc.bits
    planes, mask, has_shift = _planes(ctx.graph, quantizer, geom)
    cols = geom.c * geom.kh * geom.kw
    words = words_for(cols)
    m = geom.n * geom.oh * geom.ow
    scratch = ctx.scratch[node.name]
    meta_off = m * planes * words
    precoded = _precoded(geom)
    base = {**geom.defines(), "KX": kx, "PLANES": planes, "MASK": int(mask), "COLS": cols, "WORDS": words, "M": m,
            "META_OFF": meta_off, "CODES_OFF": meta_off + m * (planes + 1), "PRECODED": int(precoded)}
    table = _table_buffer(ctx, quantizer)
    launches = []
    if precoded:
        total = geom.n * geom.c * geom.h * geom.w
        code_defines = {"LQ_CODES": 1, "KX": kx, "TOTAL": total, "CODES_OFF": base["CODES_OFF"],
                        **storage_defines(X=source.half)}
        launches.append(ctx.launch("lq.cl", "lq_codes", code_defines, [source.buffer, table, scratch], (total,),
                                   "eltwise"))
    launches.append(ctx.launch("lq.cl", "lq_encode", {"LQ_ENCODE": 1, **base, **storage_defines(X=source.half)},
                               [source.buffer, table, scratch], (m,), "eltwise"))

    offset = float(quantizer.attrs["offset"])
    alpha = np.asarray(quantizer.attrs["basis"], np.float32)
    coef = np.concatenate([alpha, [offset]] if mask else [alpha]).astype(np.float32)
    basis = np.asarray(enc.basis, np.float32)
    wplanes = ctx.raw(w_name, "lq-planes", np.asarray(enc.planes, np.uint32))
    basis_buf = ctx.small_float(w_name, "lq-basis", basis)
    coef_buf = ctx.small_float(quantizer.outputs[0], "lq-coef", coef)
    if has_shift:  # every tap valid: offset * Wsum[o] once, in float64
        from ....compress.lq import unpack_planes
        ones = np.stack([unpack_planes(enc.planes[:, j:j + 1], cols).sum(axis=1) for j in range(kw)], axis=1)
        wsum = (basis.astype(np.float64) * (2.0 * ones - cols)).sum(axis=1)
        shift = ctx.small_float(quantizer.outputs[0] + "@" + w_name, "lq-shift", (offset * wsum).astype(np.float32))
    else:
        shift = ctx.dummy
    tm, to = _tiles(m, geom.oc, planes * kw)
    defines = {"LQ_GEMM": 1, **base, "KWB": kw, "TM": tm, "TO": to, "HAS_SHIFT": int(has_shift),
               **storage_defines(Y=y_half), **epilogue.defines()}
    gemm = ctx.launch("lq.cl", "lq_gemm", defines,
                      [scratch, wplanes, basis_buf, coef_buf, shift, epilogue.bias or ctx.dummy, y],
                      (ceil_div(m, tm), ceil_div(geom.oc, to)), "conv_direct")
    ctx.note(f"{w_name}: fused LQ layer, {kx}-bit activations x {enc.describe()} weights: popcount "
             f"{'conv' if node.op == 'Conv' else 'GEMM'} on {words} words x {planes} planes"
             + (" (+ valid-tap mask plane for the offset)" if mask else ""))
    return launches + [gemm]


__all__ = ["fused_layer", "fused_quantizers", "lq_launches", "lq_scratch_bytes"]
