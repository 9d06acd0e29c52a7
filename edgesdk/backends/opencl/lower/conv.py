"""The opencl lowering of the conv family (``edgesdk/ops/conv.py``), dense and compressed weights
(clustered, sparse CSR, Huffman-coded blocks, NNM); Gemm with compressed weights comes here as a 1x1 convolution.

Kernel choice for dense weights: a 3x3 / stride-1 / undilated / ungrouped Conv with enough
channels and output tiles runs Winograd F(2x2, 3x3) (``conv_winograd``); an ungrouped Conv that
:func:`_channel_vectorised` picks runs ``conv_oc`` (vectors along output channels); any other
1x1 / stride-1 / unpadded / ungrouped Conv is a GEMM (``conv_gemm``); every other Conv runs
``conv_direct`` (depthwise with its own tuning); Gemm runs ``gemm_nt`` (one batch row per
work-item when M == 1: the GEMV path). Compressed weights stay in their stored form on the
device: clustered layers go through ``conv_direct`` reading indices and codebook, CSR layers
through ``conv_csr``, Huffman-coded layers through ``conv_huffman`` (``conv_huffman.py``: a
work-group per block row decodes its blocks into local memory; decoded at load where it does not
apply, said in the step note), NNM layers through a centroid convolution into a scratch tensor plus
``nnm_gather``. Gemm with compressed weights is run as a 1x1 convolution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ....graph import Node
from ..config import DeviceConfig
from ..kernels import (DeviceBuffer, Launch, LoweringContext, NotLowerable, activation_defines, ceil_div,
                       kernel, storage_defines)
from .conv_huffman import huffman_launch
from .lq import lq_launches, lq_scratch_bytes
from .conv_winograd import scratch_bytes as winograd_scratch_bytes
from .conv_winograd import winograd_applies, winograd_launches


@dataclass(frozen=True)
class ConvGeometry:
    n: int
    c: int
    h: int
    w: int
    oc: int
    oh: int
    ow: int
    kh: int = 1
    kw: int = 1
    sh: int = 1
    sw: int = 1
    dh: int = 1
    dw: int = 1
    pt: int = 0
    pl: int = 0
    groups: int = 1

    @classmethod
    def of(cls, node: Node, x_shape: tuple[int, ...], y_shape: tuple[int, ...]) -> "ConvGeometry":
        a = node.attrs
        (kh, kw), (sh, sw), (dh, dw), pads = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
        n, c, h, w = x_shape
        return cls(n, c, h, w, y_shape[1], y_shape[2], y_shape[3], kh, kw, sh, sw, dh, dw, pads[0], pads[1],
                   a["group"])

    @property
    def is_pointwise(self) -> bool:
        return (self.kh, self.kw, self.sh, self.sw, self.pt, self.pl, self.groups) == (1, 1, 1, 1, 0, 0, 1)

    @property
    def all_interior(self) -> bool:
        """No tap of any output pixel reaches the padding (1x1 unpadded convs, 'valid' convs)."""
        return (self.pt == 0 and self.pl == 0 and (self.oh - 1) * self.sh + (self.kh - 1) * self.dh < self.h
                and (self.ow - 1) * self.sw + (self.kw - 1) * self.dw < self.w)

    @property
    def is_depthwise(self) -> bool:
        return self.groups == self.c and self.groups > 1

    def defines(self) -> dict[str, int]:
        return {"N": self.n, "C": self.c, "H": self.h, "W": self.w, "OC": self.oc, "OH": self.oh,
                "OW": self.ow, "KH": self.kh, "KW": self.kw, "SH": self.sh, "SW": self.sw, "DH": self.dh,
                "DW": self.dw, "PT": self.pt, "PL": self.pl, "G": self.groups, "CG": self.c // self.groups,
                "OCG": self.oc // self.groups}


@dataclass(frozen=True)
class Epilogue:
    """What the producing kernel applies after the sum: y = act(alpha * acc + beta * bias)."""
    bias: DeviceBuffer | None
    bias_half: bool
    activation: object = None
    alpha: float = 1.0
    beta: float = 1.0

    def defines(self) -> dict:
        return {"HAS_BIAS": int(self.bias is not None), "B_HALF": int(self.bias_half), "ALPHA": self.alpha,
                "BETA": self.beta, **activation_defines(self.activation)}


NONE = Epilogue(None, False)


def bias_buffer(ctx: LoweringContext, name: str | None) -> tuple[DeviceBuffer | None, bool]:
    if not name:
        return None, False
    if not ctx.is_const(name):
        raise NotLowerable(f"bias {name!r} is computed at run time")
    return ctx.dense(name)


# -- Conv -------------------------------------------------------------------------------------

@kernel("Conv")
def conv(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if len(x.shape) != 4:
        raise NotLowerable("only 2-D convolutions have kernels")
    if not ctx.is_const(node.inputs[1]):
        raise NotLowerable("convolution weights computed at run time")
    geom = ConvGeometry.of(node, x.shape, y.shape)
    bias, bias_half = bias_buffer(ctx, node.input(2))
    epilogue = Epilogue(bias, bias_half, node.attrs.get("fused_activation"))
    return conv_launches(ctx, node, geom, x.buffer, x.half, y.buffer, y.half, epilogue)


def conv_launches(ctx: LoweringContext, node: Node, geom: ConvGeometry, x: DeviceBuffer, x_half: bool,
                  y: DeviceBuffer, y_half: bool, epilogue: Epilogue) -> list[Launch]:
    """Launches for a convolution whose weights are constant ``node.inputs[1]``, in any encoding."""
    w_name = node.inputs[1]
    enc = ctx.encoding(w_name)
    kind = enc.kind if enc is not None else "dense"
    if kind == "lq":
        return lq_launches(ctx, node, geom, x, x_half, y, y_half, epilogue)
    if kind == "nnm":
        return _nnm(ctx, node, geom, x, x_half, y, y_half, epilogue)
    if kind == "clustered":
        return [_clustered(ctx, w_name, geom, x, x_half, y, y_half, epilogue)]
    if kind == "sparse_csr":
        return _csr(ctx, node, geom, x, x_half, y, y_half, epilogue)
    if kind == "huffman":
        launch = huffman_launch(ctx, w_name, geom, x, x_half, y, y_half, epilogue)
        if not isinstance(launch, str):
            return [launch]
        ctx.note(f"{w_name}: no block-decoding kernel ({launch})")  # then decoded at load, below
    if winograd_applies(ctx.config, geom, kind):
        return winograd_launches(ctx, node, geom, x, x_half, y, y_half, epilogue)
    if _channel_vectorised(ctx, geom):
        return [_conv_oc(ctx, geom, x, x_half, w_name, y, y_half, epilogue)]
    w, w_half = ctx.dense(w_name)
    return [dense_conv(ctx, geom, x, x_half, w, w_half, y, y_half, epilogue)]


def _lane_use(extent: int, tile: int) -> float:
    return extent / (-(-extent // tile) * tile)


def _oc_block(ctx: LoweringContext, geom: ConvGeometry) -> int:
    """Output channels per ``conv_oc`` work-item: ``vectors`` vectors, fewer when OC is smaller."""
    return ctx.vec * min(ctx.config.tuning("conv_oc").vectors, ceil_div(geom.oc, ctx.vec))


def _channel_vectorised(ctx: LoweringContext, geom: ConvGeometry) -> bool:
    """Whether ``conv_oc`` (vectors along output channels) beats the pixel-vectorised kernels.
    It needs one group and output channels that fill most lanes of its channel blocks. Then it
    runs every conv whose reduction C*KH*KW reaches the device's ``min_k`` (on CPUs its register
    tile wins wherever the reduction amortises its scattered stores: 3x3 layers of >= 16
    channels, 1x1 layers of >= 128; below that the pixel-vectorised kernels store whole vectors
    and win), and otherwise the layers the pixel-vectorised kernels handle badly: short rows, or
    for 1x1 layers a pixel count that leaves many lanes of the GEMM tiles idle."""
    if geom.groups != 1 or _lane_use(geom.oc, _oc_block(ctx, geom)) < 0.8:
        return False
    min_k = ctx.config.tuning("conv_oc").min_k
    if min_k is not None and geom.c * geom.kh * geom.kw >= min_k:
        return True
    if geom.is_pointwise:
        return _lane_use(geom.h * geom.w, ctx.vec * ctx.config.tuning("conv_gemm").vectors) < 0.9
    return geom.ow < 2 * ctx.vec or _lane_use(geom.ow, ctx.vec) < 0.9


def pack_oc_blocks(w: np.ndarray, block: int) -> np.ndarray:
    """(OC, C, KH, KW) weights -> (ceil(OC / block), KH, KW, C, block), zero past OC: the
    contiguous per-block stream ``conv_oc`` reads."""
    oc, c, kh, kw = w.shape
    blocks = ceil_div(oc, block)
    padded = np.zeros((blocks * block, c, kh, kw), w.dtype)
    padded[:oc] = w
    return padded.reshape(blocks, block, c, kh, kw).transpose(0, 3, 4, 2, 1)


def _conv_oc(ctx: LoweringContext, geom: ConvGeometry, x: DeviceBuffer, x_half: bool, w_name: str,
             y: DeviceBuffer, y_half: bool, epilogue: Epilogue) -> Launch:
    t = ctx.config.tuning("conv_oc")
    block = _oc_block(ctx, geom)
    w, w_half = ctx.packed(w_name, f"oc-blocks-{block}", lambda values: pack_oc_blocks(values, block))
    defines = {"CONV_OC": 1, **geom.defines(), **storage_defines(X=x_half, W=w_half, Y=y_half),
               **epilogue.defines(), "PIX": t.rows, "NV": block // ctx.vec, "ALL_INTERIOR": int(geom.all_interior)}
    size = (ceil_div(geom.oh * geom.ow, t.rows), ceil_div(geom.oc, block), geom.n)
    return ctx.launch("conv.cl", "conv_oc", defines, [x, w, epilogue.bias or ctx.dummy, y], size, "conv_oc")


def dense_conv(ctx: LoweringContext, geom: ConvGeometry, x: DeviceBuffer, x_half: bool, w: DeviceBuffer,
               w_half: bool, y: DeviceBuffer, y_half: bool, epilogue: Epilogue) -> Launch:
    roles = storage_defines(X=x_half, W=w_half, Y=y_half)
    args = [x, w, epilogue.bias or ctx.dummy, y]
    if geom.is_pointwise:
        t = ctx.config.tuning("conv_gemm")
        rows = min(t.rows, geom.oc)
        vectors = min(t.vectors, ceil_div(geom.h * geom.w, ctx.vec))
        defines = {"CONV_GEMM": 1, **geom.defines(), **roles, **epilogue.defines(), "ROWS": rows, "NVEC": vectors}
        size = (ceil_div(geom.h * geom.w, ctx.vec * vectors), ceil_div(geom.oc, rows), geom.n)
        return ctx.launch("conv.cl", "conv_gemm", defines, args, size, "conv_gemm")
    return _direct(ctx, geom, args, roles, epilogue, {"W_MODE": 0})


def _direct(ctx: LoweringContext, geom: ConvGeometry, args: list[DeviceBuffer], roles: dict, epilogue: Epilogue,
            weight_defines: dict) -> Launch:
    tuning_name = "depthwise" if geom.is_depthwise else "conv_direct"
    ocg = geom.oc // geom.groups
    rows = min(ctx.config.tuning(tuning_name).rows, ocg)
    defines = {"CONV_DIRECT": 1, **geom.defines(), **roles, **epilogue.defines(), **weight_defines, "ROWS": rows}
    size = (ceil_div(geom.ow, ctx.vec) * geom.oh, geom.groups * ceil_div(ocg, rows), geom.n)
    return ctx.launch("conv.cl", "conv_direct", defines, args, size, tuning_name)


def _clustered(ctx: LoweringContext, w_name: str, geom: ConvGeometry, x: DeviceBuffer, x_half: bool,
               y: DeviceBuffer, y_half: bool, epilogue: Epilogue, enc=None) -> Launch:
    """conv_direct reading indices and codebook (``enc``: a Clustered encoding standing for the
    stored one, as lq.py's weights-only LQ layers pass)."""
    enc = enc if enc is not None else ctx.encoding(w_name)
    book = enc.codebook.astype(np.float32)
    if ctx.precision == "fp16":  # the reference's fp16 model rounds the decoded weights to half
        book = book.astype(np.float16).astype(np.float32)
    codebook = ctx.small_float(w_name, "codebook", book)
    # Two bytes of padding: unpack_index reads the byte after the one an index starts in.
    indices = ctx.raw(w_name, "indices", np.concatenate([np.asarray(enc.indices, np.uint8),
                                                         np.zeros(2, np.uint8)]))
    fits_constant = book.nbytes <= ctx.device.info.constant_buffer_bytes // 2
    weight_defines = {"W_MODE": 1, "CB_BITS": enc.bits, "CB_ROWS": book.shape[0], "CB_CONST": int(fits_constant)}
    roles = storage_defines(X=x_half, W=False, Y=y_half)
    return _direct(ctx, geom, [x, indices, codebook, epilogue.bias or ctx.dummy, y], roles, epilogue,
                   weight_defines)


def _csr(ctx: LoweringContext, node: Node, geom: ConvGeometry, x: DeviceBuffer, x_half: bool,
         y: DeviceBuffer, y_half: bool, epilogue: Epilogue) -> list[Launch]:
    """nonfinite_taps (into the layer's scratch: NaN / inf follow the dense product), then conv_csr."""
    w_name = node.inputs[1]
    enc = ctx.encoding(w_name)
    row_ptr = ctx.raw(w_name, "csr-row-ptr", np.asarray(enc.row_ptr, np.int32))
    deltas = ctx.raw(w_name, "csr-deltas", np.concatenate([np.asarray(enc.deltas, np.uint8), np.zeros(3, np.uint8)]))
    if enc.codebook is not None:
        book = enc.codebook.astype(np.float32)
        if ctx.precision == "fp16":
            book = book.astype(np.float16).astype(np.float32)
        values = ctx.raw(w_name, "csr-indices", np.concatenate([np.asarray(enc.indices, np.uint8),
                                                                np.zeros(3, np.uint8)]))
        table = ctx.small_float(w_name, "codebook", book)
        value_defines = {"V_MODE": 1, "CB_BITS": enc.value_bits, "CB_ROWS": book.shape[0]}
        w_half = False
    else:
        raw_values = np.asarray(enc.values)
        if ctx.precision == "fp16" and raw_values.dtype == np.float32:
            raw_values = raw_values.astype(np.float16)
        w_half = raw_values.dtype == np.float16
        values = ctx.raw(w_name, "csr-values-fp16" if w_half else "csr-values-fp32", raw_values)
        table = ctx.dummy
        value_defines = {"V_MODE": 0}
    defines = {"CONV_CSR": 1, **geom.defines(), **storage_defines(X=x_half, W=w_half, Y=y_half),
               **epilogue.defines(), **value_defines, "DELTA_BITS": enc.delta_bits}
    size = (ceil_div(geom.ow, ctx.vec) * geom.oh, geom.oc, geom.n)
    bad = ctx.scratch[node.name]
    count = ctx.launch("conv_sparse.cl", "nonfinite_taps", defines, [x, bad], (geom.oh * geom.ow, geom.groups, geom.n),
                       "eltwise")
    args = [x, row_ptr, deltas, values, table, epilogue.bias or ctx.dummy, bad, y]
    return [count, ctx.launch("conv_sparse.cl", "conv_csr", defines, args, size, "conv_direct")]


def csr_scratch_bytes(node: Node, graph) -> int:
    """nonfinite_taps' counts: one int per output pixel, group and image of a CSR layer."""
    enc = graph.tensors[node.inputs[1]].encoding if len(node.inputs) > 1 else None
    if enc is None or enc.kind != "sparse_csr" or enc.dtype != np.float32:
        return 0
    y = graph.tensors[node.outputs[0]].shape
    groups = node.attrs.get("group", 1) if node.op == "Conv" else 1
    pixels = int(np.prod(y[2:])) if len(y) > 2 else 1
    return 4 * y[0] * groups * pixels


def scratch_bytes(node: Node, graph, config: DeviceConfig) -> int:
    """Bytes of scratch a Conv or Gemm node needs in the arena while it runs: the centroid
    tensor of an NNM layer, the transformed input of a Winograd layer, else 0."""
    need = nnm_scratch_bytes(node, graph) or lq_scratch_bytes(node, graph) or csr_scratch_bytes(node, graph)
    if need or node.op != "Conv" or not graph.tensors[node.inputs[1]].is_constant:
        return need
    x_shape, y_shape = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    if len(x_shape) != 4:
        return 0
    geom = ConvGeometry.of(node, x_shape, y_shape)
    enc = graph.tensors[node.inputs[1]].encoding
    return winograd_scratch_bytes(config, geom) if winograd_applies(config, geom, enc.kind if enc else "dense") else 0


def nnm_scratch_bytes(node: Node, graph) -> int:
    """Bytes of the centroid tensor an NNM layer writes before gathering (0 for other layers)."""
    enc = graph.tensors[node.inputs[1]].encoding if len(node.inputs) > 1 else None
    if enc is None or enc.kind != "nnm":
        return 0
    y_shape = graph.tensors[node.outputs[0]].shape
    per_group = enc.clusters
    groups = enc.shape[1] if enc.mode == "per_input_channel" else 1
    spatial = math.prod(y_shape[2:]) if node.op == "Conv" else 1
    return y_shape[0] * groups * per_group * spatial * 4


def _nnm(ctx: LoweringContext, node: Node, geom: ConvGeometry, x: DeviceBuffer, x_half: bool,
         y: DeviceBuffer, y_half: bool, epilogue: Epilogue) -> list[Launch]:
    """Centroid convolution into the scratch tensor (float32), then the gather-accumulate."""
    enc = ctx.encoding(node.inputs[1])
    centroids = np.asarray(enc.centroids)
    if ctx.precision == "fp16" and centroids.dtype == np.float32:
        centroids = centroids.astype(np.float16)
    w_half = centroids.dtype == np.float16
    w = ctx.raw(node.inputs[1], "centroids", centroids)
    scratch = ctx.scratch[node.name]
    clusters = enc.clusters
    if enc.mode == "per_input_channel":
        # (C, K', R, S) is exactly the weight tensor of a grouped conv: C groups, K' outputs each.
        groups = geom.c
        centroid_geom = replace(geom, oc=geom.c * clusters, groups=geom.c)
    else:
        groups = 1
        centroid_geom = replace(geom, oc=clusters)
    first = dense_conv(ctx, centroid_geom, x, x_half, w, w_half, scratch, False, NONE)
    assign_dtype = np.uint8 if enc.assignment.dtype == np.uint8 else np.uint16
    assign = ctx.raw(node.inputs[1], "assignment", np.asarray(enc.assignment, assign_dtype))
    total = geom.n * geom.oc * geom.oh * geom.ow
    defines = {"N": geom.n, "OC": geom.oc, "KC": clusters, "GROUPS": groups, "P": geom.oh * geom.ow,
               "ASSIGN_T": "uchar" if assign_dtype == np.uint8 else "ushort",
               **storage_defines(S=False, Y=y_half), **epilogue.defines()}
    second = ctx.launch("conv_nnm.cl", "nnm_gather", defines, [scratch, assign, epilogue.bias or ctx.dummy, y],
                        (total,), "eltwise")
    return [first, second]


# -- Gemm and MatMul --------------------------------------------------------------------------
