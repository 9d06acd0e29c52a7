"""The opencl backend's int8 kernels (``edgesdk/backends/opencl/lower/quantize.py``,
``cl_kernels/quantize.cl``): the integer ops are placed on opencl, and their outputs are
bit-exact equal to the reference backend's, the integer oracle (tests/test_quant.py checks the
oracle against ONNX Runtime). Every case is QuantizeLinear -> the op -> DequantizeLinear, so equal
float outputs are equal codes; each case also checks that its codes are spread (not all clamped).

The dot-product variant of ``qconv_oc`` (built where the device has cl_khr_integer_dot_product
or cl_arm_integer_dot_product_int8) runs here with its products written out (QDOT 3), so its
weight layout and zero-point corrections are checked on every device. A few cases run under
Oclgrind (this file run as a script is that suite), and a whole zoo model quantized by edgesdk's
PTQ runs equal to the reference.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import edgesdk
from edgesdk.graph import Graph
from edgesdk.runtime.activations import Activation

pytest.importorskip("pyopencl")
from edgesdk.backends.opencl import OpenCLBackend  # noqa: E402
from edgesdk.backends.opencl.lower import quantize as qlower  # noqa: E402

pytestmark = pytest.mark.skipif(OpenCLBackend.unavailable_reason() is not None,
                                reason=str(OpenCLBackend.unavailable_reason()))

TESTS = Path(__file__).resolve().parent
U8, S8 = np.dtype(np.uint8), np.dtype(np.int8)


# -- graph builders --------------------------------------------------------------------------------
class Builder:
    """A float-in, float-out graph around integer ops: inputs are quantized, outputs dequantized."""

    def __init__(self, seed: int, act: np.dtype = U8) -> None:
        self.g = Graph("int8")
        self.rng = np.random.default_rng(seed)
        self.act = np.dtype(act)
        self.shapes: dict[str, tuple[int, ...]] = {}

    def const(self, name: str, value) -> str:
        self.g.add_constant(name, np.asarray(value))
        return name

    def zp(self, name: str, dtype: np.dtype | None = None) -> str:
        dtype = np.dtype(dtype or self.act)
        value = self.rng.integers(90, 150) if dtype == U8 else self.rng.integers(-30, 30)
        return self.const(name, np.array(value, dtype))

    def quantized_input(self, name: str, shape: tuple[int, ...], scale: float = 0.05) -> tuple[str, str, str]:
        self.g.add_input(name, shape)
        self.shapes[name] = shape
        params = (self.const(f"{name}.s", np.float32(scale)), self.zp(f"{name}.z"))
        self.g.add_node("QuantizeLinear", [name, *params], [f"{name}.q"], axis=1)
        return f"{name}.q", *params

    def output(self, q: str, scale: str, zp: str, name: str = "y") -> None:
        self.g.add_node("DequantizeLinear", [q, scale, zp], [name], axis=1)
        self.g.outputs.append(name)

    def out_params(self, scale: float) -> tuple[str, str]:
        return self.const("y.s", np.float32(scale)), self.zp("y.z")

    def feeds(self, seed: int = 1) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {name: (rng.standard_normal(shape) * 2).astype(np.float32) for name, shape in self.shapes.items()}


def _clamp(act: np.dtype, qmin, qmax) -> dict:
    lo, hi = (0, 255) if act == U8 else (-128, 127)
    return {"qmin": lo if qmin is None else qmin, "qmax": hi if qmax is None else qmax}


def _weights(b: Builder, shape: tuple[int, ...], wtype: str, channels: int, per_channel: bool) -> tuple[str, str, str]:
    """Weights and their (scale, zero point): int8 symmetric, or uint8 with zero points."""
    rng = b.rng
    if wtype == "int8":
        w = rng.integers(-127, 128, shape).astype(np.int8)
        zp = np.zeros(channels if per_channel else (), np.int8)
    elif wtype == "uint8_centred":  # w - zp within int8: the dot-product variant takes them
        zp = rng.integers(120, 137, channels if per_channel else ()).astype(np.uint8)
        column = np.asarray(zp, np.int64).reshape((-1,) + (1,) * (len(shape) - 1)) if per_channel else int(zp)
        w = (rng.integers(-128, 128, shape) + column).clip(0, 255).astype(np.uint8)
    else:
        w = rng.integers(0, 256, shape).astype(np.uint8)
        zp = rng.integers(60, 200, channels if per_channel else ()).astype(np.uint8)
    scale = (rng.uniform(0.5, 2.0, channels) if per_channel else np.array(1.0)).astype(np.float32)
    return b.const("w", w), b.const("w.s", scale * np.float32(1.0 / (20 * np.sqrt(np.prod(shape[1:]))))), \
        b.const("w.z", zp)


def conv_graph(seed: int = 0, cin: int = 8, cout: int = 16, hw: tuple[int, int] = (9, 11), k: int = 3,
               stride: int = 1, pads=(1, 1, 1, 1), dil: int = 1, group: int = 1, act=U8, wtype: str = "int8",
               per_channel: bool = True, bias: bool = True, qmin=None, qmax=None, batch: int = 1,
               kw: int | None = None) -> Builder:
    b = Builder(seed, act)
    x = b.quantized_input("x", (batch, cin) + tuple(hw))
    kh, kw = k, kw or k
    w = _weights(b, (cout, cin // group, kh, kw), wtype, cout, per_channel)
    inputs = [*x, *w, *b.out_params(0.04)]
    if bias:
        inputs.append(b.const("b", b.rng.integers(-3000, 3000, cout).astype(np.int32)))
    b.g.add_node("QLinearConv", inputs, ["y.q"], kernel_shape=(kh, kw), strides=(stride, stride),
                 dilations=(dil, dil), pads=tuple(pads), group=group, **_clamp(b.act, qmin, qmax))
    b.output("y.q", inputs[6], inputs[7])
    return b


def gemm_graph(seed: int = 0, m: int = 3, k: int = 37, n: int = 13, op: str = "QGemm", bias: str | None = "row",
               trans_b: bool = True, wtype: str = "int8", per_channel: bool = True, a_shape=None, qmin=None,
               qmax=None) -> Builder:
    b = Builder(seed)
    a = b.quantized_input("x", a_shape or (m, k))
    w = _weights(b, (n, k) if trans_b else (k, n), wtype, n, per_channel)  # n scales: one per output column
    y = b.out_params(0.05)
    if op == "QGemm":
        c = ""
        if bias == "row":
            c = b.const("c", b.rng.integers(-3000, 3000, n).astype(np.int32))
        elif bias == "row2d":
            c = b.const("c", b.rng.integers(-3000, 3000, (1, n)).astype(np.int32))
        elif bias == "scalar":
            c = b.const("c", np.array([1234], np.int32))
        b.g.add_node("QGemm", [*a, *w, c, *y], ["y.q"], transA=False, transB=trans_b, **_clamp(b.act, qmin, qmax))
    else:
        b.g.add_node("QLinearMatMul", [*a, *w, *y], ["y.q"], **_clamp(b.act, qmin, qmax))
    b.output("y.q", *y)
    return b


def binary_graph(seed: int = 0, op: str = "QLinearAdd", a_shape=(1, 8, 5, 7), b_shape=(1, 8, 5, 7),
                 b_const: bool = False, qmin=None, qmax=None, act=U8) -> Builder:
    b = Builder(seed, act)
    a = b.quantized_input("a", a_shape, 0.04)
    if b_const:
        lo, hi = (0, 256) if b.act == U8 else (-128, 128)
        other = (b.const("bq", b.rng.integers(lo, hi, b_shape).astype(b.act)), b.const("b.s", np.float32(0.07)),
                 b.zp("b.z"))
    else:
        other = b.quantized_input("b", b_shape, 0.07)
    y = b.out_params(0.09 if op == "QLinearAdd" else 0.05)
    b.g.add_node(op, [*a, *other, *y], ["y.q"], **_clamp(b.act, qmin, qmax))
    b.output("y.q", *y)
    return b


def pool_graph(seed: int = 0, op: str = "QLinearGlobalAveragePool", shape=(2, 5, 7, 9), act=U8, out: bool = True,
               **attrs) -> Builder:
    """A quantized pooling op, or (out=False) a float op that runs on the codes (MaxPool)."""
    b = Builder(seed, act)
    x = b.quantized_input("x", shape, 0.05)
    y = b.out_params(0.02) if out else x[1:]
    b.g.add_node(op, [*x, *y] if out else [x[0]], ["y.q"], **attrs)
    b.output("y.q", *y)
    return b


def lookup_graph(seed: int = 0, shape=(1, 6, 5, 5)) -> Builder:
    b = Builder(seed)
    x = b.quantized_input("x", shape, 0.05)
    table = b.const("table", b.rng.integers(0, 256, 256).astype(np.uint8))
    y = b.out_params(0.01)
    b.g.add_node("QLinearLookup", [x[0], table, x[1], x[2], *y], ["y.q"], activation=Activation("Sigmoid"))
    b.output("y.q", *y)
    return b


def concat_graph(seed: int = 0, shapes=((1, 3, 5, 7), (1, 5, 5, 7), (1, 2, 5, 7)), axis: int = 1,
                 scales=(0.02, None, 0.13), act=U8) -> Builder:
    """QLinearConcat of parts rescaled down (0.02 / 0.06: the rounded-once multiplier), up (a left
    shift) and copied (scale None: the output's own parameters)."""
    b = Builder(seed, act)
    y = b.out_params(0.06)
    parts: list[str] = []
    for k, (shape, scale) in enumerate(zip(shapes, scales)):
        if scale is None:
            b.g.add_input(f"x{k}", shape)
            b.shapes[f"x{k}"] = shape
            b.g.add_node("QuantizeLinear", [f"x{k}", *y], [f"x{k}.q"], axis=1)
            parts += [f"x{k}.q", *y]
        else:
            parts += b.quantized_input(f"x{k}", shape, scale)
    b.g.add_node("QLinearConcat", [*y, *parts], ["y.q"], axis=axis)
    b.output("y.q", *y)
    return b


def per_axis_graph(seed: int = 0, shape=(2, 6, 4, 5), axis: int = 1, act=U8) -> Builder:
    b = Builder(seed, act)
    b.g.add_input("x", shape)
    b.shapes["x"] = shape
    scale = b.const("s", b.rng.uniform(0.01, 0.1, shape[axis]).astype(np.float32))
    lo, hi = (60, 200) if b.act == U8 else (-40, 40)
    zp = b.const("z", b.rng.integers(lo, hi, shape[axis]).astype(b.act))
    b.g.add_node("QuantizeLinear", ["x", scale, zp], ["x.q"], axis=axis)
    b.g.add_node("DequantizeLinear", ["x.q", scale, zp], ["y"], axis=axis)
    b.g.outputs.append("y")
    return b


# -- the case table --------------------------------------------------------------------------------
CASES = {
    # QLinearConv, ungrouped (qconv_oc)
    "conv3x3": lambda: conv_graph(),
    "conv1x1": lambda: conv_graph(k=1, pads=(0, 0, 0, 0), cin=16, cout=24),
    "conv_stride2": lambda: conv_graph(stride=2, hw=(11, 13)),
    "conv_asym_pads": lambda: conv_graph(pads=(0, 2, 1, 0), hw=(7, 8)),
    "conv_dilated": lambda: conv_graph(dil=2, pads=(2, 2, 2, 2)),
    "conv_odd_channels": lambda: conv_graph(cin=5, cout=7, hw=(6, 5)),
    "conv_5x3_kernel": lambda: conv_graph(k=5, kw=3, pads=(2, 1, 2, 1), cin=3, cout=17),
    "conv_per_tensor": lambda: conv_graph(per_channel=False),
    "conv_uint8_weights": lambda: conv_graph(wtype="uint8"),
    "conv_uint8_weights_per_tensor": lambda: conv_graph(wtype="uint8", per_channel=False, cin=6, cout=9),
    "conv_uint8_weights_centred": lambda: conv_graph(wtype="uint8_centred", cin=7, cout=9),
    "conv_no_bias": lambda: conv_graph(bias=False, cout=8),
    "conv_clamp": lambda: conv_graph(qmin=131, qmax=210),
    "conv_batch2": lambda: conv_graph(batch=2, cout=12),
    "conv_wide_rows": lambda: conv_graph(hw=(5, 37), cin=4, cout=32, stride=2),
    "conv_3_outputs": lambda: conv_graph(cout=3, hw=(8, 19)),  # few channels: qconv_direct
    # grouped and depthwise (qconv_direct)
    "depthwise3x3": lambda: conv_graph(group=8, cin=8, cout=8, qmin=128),
    "depthwise_stride2": lambda: conv_graph(group=6, cin=6, cout=6, stride=2, hw=(13, 21)),
    "depthwise_multiplier2": lambda: conv_graph(group=5, cin=5, cout=10, hw=(7, 18)),
    "depthwise_dilated_uint8": lambda: conv_graph(group=4, cin=4, cout=4, dil=2, pads=(2, 2, 2, 2), wtype="uint8"),
    "depthwise_5x5_wide": lambda: conv_graph(group=3, cin=3, cout=3, k=5, pads=(2, 2, 2, 2), hw=(6, 33)),
    "grouped": lambda: conv_graph(group=2, cin=6, cout=10, per_channel=False),
    # QGemm / QLinearMatMul
    "gemm_transb_bias": lambda: gemm_graph(),
    "gemm_no_bias": lambda: gemm_graph(bias=None),
    "gemm_no_transb": lambda: gemm_graph(trans_b=False, bias="row2d"),
    "gemm_scalar_bias": lambda: gemm_graph(bias="scalar", m=1, k=64, n=10),
    "gemm_uint8_weights": lambda: gemm_graph(wtype="uint8", per_channel=False),
    "gemm_uint8_weights_centred": lambda: gemm_graph(wtype="uint8_centred", trans_b=True),
    "gemm_clamp": lambda: gemm_graph(qmin=140, qmax=230, m=5),
    "matmul": lambda: gemm_graph(op="QLinearMatMul", trans_b=False),
    "matmul_3d": lambda: gemm_graph(op="QLinearMatMul", trans_b=False, a_shape=(2, 5, 37), per_channel=False),
    # QLinearAdd / QLinearMul
    "add_same": lambda: binary_graph(),
    "add_broadcast_channel": lambda: binary_graph(b_shape=(1, 8, 1, 1)),
    "add_broadcast_both": lambda: binary_graph(a_shape=(2, 1, 5, 7), b_shape=(1, 3, 5, 1)),
    "add_const_clamp": lambda: binary_graph(b_const=True, qmin=128),
    "add_odd_size": lambda: binary_graph(a_shape=(1, 3, 5, 7), b_shape=(1, 3, 5, 7)),
    "mul_same": lambda: binary_graph(op="QLinearMul", a_shape=(1, 3, 5, 7), b_shape=(1, 3, 5, 7)),
    "mul_broadcast_scalar": lambda: binary_graph(op="QLinearMul", b_shape=(1,)),
    "mul_const_row": lambda: binary_graph(op="QLinearMul", b_shape=(7,), b_const=True),
    # pooling, lookup, quantize / dequantize
    "global_average_pool": lambda: pool_graph(),
    "global_average_pool_wide": lambda: pool_graph(shape=(1, 3, 17, 23)),
    "average_pool": lambda: pool_graph(op="QLinearAveragePool", shape=(1, 4, 9, 11), kernel_shape=(3, 3),
                                       strides=(2, 2), dilations=(1, 1), pads=(1, 1, 1, 1), ceil_mode=False,
                                       count_include_pad=False),
    "average_pool_ceil_pads_counted": lambda: pool_graph(op="QLinearAveragePool", shape=(1, 2, 8, 7),
                                                         kernel_shape=(3, 2), strides=(2, 2), dilations=(1, 1),
                                                         pads=(1, 0, 1, 1), ceil_mode=True, count_include_pad=True),
    "max_pool": lambda: pool_graph(op="MaxPool", shape=(1, 4, 9, 11), out=False, kernel_shape=(3, 3),
                                   strides=(2, 2), dilations=(1, 1), pads=(1, 1, 1, 1), ceil_mode=False,
                                   storage_order=0),
    "max_pool_ceil_dilated": lambda: pool_graph(op="MaxPool", shape=(2, 3, 10, 7), out=False, kernel_shape=(2, 3),
                                                strides=(3, 2), dilations=(2, 1), pads=(0, 1, 0, 0), ceil_mode=True,
                                                storage_order=0),
    "lookup": lambda: lookup_graph(),
    "concat_channels": lambda: concat_graph(),
    "concat_last_axis": lambda: concat_graph(shapes=((2, 3, 4), (2, 3, 9)), axis=2, scales=(0.1, 0.035)),
    "per_axis_quantize": lambda: per_axis_graph(),
    "per_axis_quantize_last_axis": lambda: per_axis_graph(shape=(3, 4, 10), axis=2),
}
# Built without the import passes, so their activations stay int8 (the passes move them to uint8).
INT8_CASES = {
    "int8_conv3x3": lambda: conv_graph(act=S8),
    "int8_conv_clamp": lambda: conv_graph(act=S8, qmin=-20, qmax=90, cin=5, cout=9),
    "int8_depthwise": lambda: conv_graph(act=S8, group=8, cin=8, cout=8, stride=2),
    "int8_add_broadcast": lambda: binary_graph(act=S8, b_shape=(1, 8, 1, 1)),
    "int8_mul": lambda: binary_graph(act=S8, op="QLinearMul"),
    "int8_global_average_pool": lambda: pool_graph(act=S8),
    "int8_max_pool": lambda: pool_graph(act=S8, op="MaxPool", out=False, kernel_shape=(3, 3), strides=(1, 1),
                                        dilations=(1, 1), pads=(1, 1, 1, 1), ceil_mode=False, storage_order=0),
    "int8_per_axis_quantize": lambda: per_axis_graph(act=S8),
    "int8_concat": lambda: concat_graph(act=S8, shapes=((1, 4, 3, 3), (1, 4, 3, 3)), scales=(None, 0.031)),
}
INTEGER_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QGemm", "QLinearMatMul", "QLinearAdd",
               "QLinearMul", "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearLookup", "QLinearConcat",
               "MaxPool"}


def check_exact(builder: Builder, optimize: bool = True, placement: str = "opencl") -> edgesdk.Session:
    """opencl == reference, bit for bit, every node placed on ``placement``; returns the session."""
    ref = edgesdk.Session(builder.g, backend="reference", optimize=optimize)
    ocl = edgesdk.Session(builder.g, backend="opencl", optimize=optimize)
    ops = {n.name: n.op for n in ocl.graph.nodes}
    assert set(ops.values()) <= INTEGER_OPS, ops
    placed = {ops[node]: where for node, where in ocl._impl.placements.items()}
    assert set(placed.values()) == {placement}, (placed, ocl._impl.fallback_reasons)
    for seed in (1, 2):
        feeds = builder.feeds(seed)
        want, got = ref.run(feeds), ocl.run(feeds)
        for name in ref.output_names:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
            assert len(np.unique(want[name])) >= min(8, want[name].size // 4), "codes all clamped: a weak case"
    return ocl


# -- the fixed-point arithmetic --------------------------------------------------------------------
EDGE_INT32 = [-(1 << 31), -(1 << 31) + 1, -(1 << 30) - 1, -(1 << 30), -65536, -257, -3, -2, -1, 0, 1, 2, 3, 255,
              65535, (1 << 30), (1 << 31) - 2, (1 << 31) - 1]


@pytest.mark.parametrize("left", [1, 0])
def test_requantization_in_opencl_c_is_fixedpoint_bit_for_bit(left: int) -> None:
    """quantize.cl's scalar q_requantize and vector q_requantizeV against
    edgesdk.quant.fixedpoint.requantize: SRDHM's nudge, truncation and INT32_MIN * INT32_MIN
    saturation, RDBPOT's ties away from zero, the saturating left shift (QLEFT 1; QLEFT 0 is the
    kernels' form for shifts <= 0)."""
    import pyopencl as cl
    from edgesdk.backends.opencl.device import open_device
    from edgesdk.backends.opencl.programs import program_cache
    from edgesdk.quant import fixedpoint as fx
    rng = np.random.default_rng(9)
    mults = [-(1 << 31), -1, 0, 1, 1 << 30, (1 << 30) + 1, (1 << 31) - 1] + list(rng.integers(1 << 30, 1 << 31, 4))
    shifts = list(range(-31, 31 if left else 1))
    acc = np.array(EDGE_INT32 + list(rng.integers(-(1 << 31), 1 << 31, 46)), np.int64)
    grid = np.array([(a, m, s) for a in acc for m in mults for s in shifts[::3] + [-31, -1, 0]], np.int64)
    random = np.stack([rng.integers(-(1 << 31), 1 << 31, 4000), rng.integers(1 << 30, 1 << 31, 4000),
                       rng.choice(shifts, 4000)], axis=1)
    grid = np.concatenate([grid, random])
    vec = 4
    grid = grid[: len(grid) // vec * vec]
    want = fx.requantize(grid[:, 0], grid[:, 1], grid[:, 2])
    device = open_device()
    program = program_cache(device).get("quantize.cl", {"QREQUANTIZE_CHECK": 1, "TOTAL": len(grid), "VEC": vec,
                                                        "QLEFT": left})
    mf = cl.mem_flags
    inputs = [cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))
              for a in (grid[:, 0], grid[:, 1].astype(np.int32), grid[:, 2].astype(np.int32))]
    outputs = [cl.Buffer(device.context, mf.WRITE_ONLY, len(grid) * 4) for _ in range(2)]
    program.requantize_check(device.queue, (len(grid) // vec,), None, *inputs, *outputs)
    for buffer, what in zip(outputs, ("scalar", "vector")):
        got = np.empty(len(grid), np.int32)
        cl.enqueue_copy(device.queue, got, buffer)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (what, [(tuple(grid[i]), int(got[i]), int(want[i])) for i in bad[:5]])


# -- placement and bit-exactness -------------------------------------------------------------------
@pytest.mark.parametrize("case", list(CASES))
def test_int8_op_is_bit_exact_on_opencl(case: str) -> None:
    check_exact(CASES[case]())


@pytest.mark.parametrize("case", list(INT8_CASES))
def test_int8_activations_are_bit_exact_on_opencl(case: str) -> None:
    sess = check_exact(INT8_CASES[case](), optimize=False)
    assert any(t.dtype == S8 and not t.is_constant for t in sess.graph.tensors.values())


DOT_CASES = ["conv3x3", "conv1x1", "conv_stride2", "conv_asym_pads", "conv_odd_channels", "conv_5x3_kernel",
             "conv_uint8_weights_centred", "conv_clamp", "conv_batch2", "gemm_transb_bias", "gemm_no_transb",
             "gemm_uint8_weights_centred", "matmul_3d", "int8_conv3x3", "int8_conv_clamp"]


@pytest.mark.parametrize("case", DOT_CASES)
def test_dot_product_variant_is_bit_exact(case: str, monkeypatch) -> None:
    """qconv_oc's dot-product layout (char4 of four input channels, XPAD padding, the zero-point
    correction folded into the bias) with the products written out: QDOT 3."""
    monkeypatch.setattr(qlower, "force_dot", qlower.EMULATED_DOT)
    builder = (CASES.get(case) or INT8_CASES[case])()
    sess = check_exact(builder, optimize=case not in INT8_CASES)
    kinds = [w.kind for w in sess._impl.weights]
    assert any(k.startswith("int8-dot-blocks") for k in kinds), kinds


def test_int32_path_is_taken_without_a_dot_extension(monkeypatch) -> None:
    monkeypatch.setattr(qlower, "force_dot", 0)
    sess = check_exact(conv_graph())
    kinds = [w.kind for w in sess._impl.weights]
    assert any(k.startswith("int8-oc-blocks") for k in kinds) and not any("dot" in k for k in kinds), kinds


def test_dot_mode_follows_the_extension_string(monkeypatch) -> None:
    """The dot-product variant is built only where the device names its extension."""
    monkeypatch.setattr(qlower, "force_dot", None)
    for extensions, want in ((("cl_khr_fp64", "cl_khr_fp16"), 0), (("cl_khr_integer_dot_product",), 1),
                             (("cl_arm_integer_dot_product_int8",), 2)):
        info = type("Info", (), {"extensions": extensions})()
        ctx = type("Ctx", (), {"device": type("Device", (), {"info": info})()})()
        assert qlower.dot_mode(ctx) == want


def test_quantize_without_fp64_divides_in_float(monkeypatch) -> None:
    """The float-division path of quantize_linear (devices without cl_khr_fp64) on PoCL, whose
    float division is correctly rounded."""
    monkeypatch.setattr(qlower, "has_fp64", lambda ctx: False)
    check_exact(per_axis_graph(seed=3))
    check_exact(conv_graph(seed=3))


def test_quantize_edge_values_match_reference() -> None:
    """NaN -> the lowest code, infinities saturate, halves round to even."""
    g = Graph("q")
    g.add_input("x", (1, 4, 16))
    g.add_constant("s", np.float32(0.5))
    g.add_constant("z", np.array(3, np.uint8))
    g.add_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1)
    g.add_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)
    g.outputs.append("y")
    x = np.tile(np.array([np.nan, np.inf, -np.inf, 1.25, -1.25, 0.75, 0.25, -0.25, 1e30, -1e30, 126.0, 126.25,
                          -1.75, 2.5e-45, 62.25, 62.75], np.float32), (1, 4, 1))
    ref = edgesdk.Session(g, backend="reference")
    ocl = edgesdk.Session(g, backend="opencl")
    assert set(ocl._impl.placements.values()) == {"opencl"}
    np.testing.assert_array_equal(ocl.run({"x": x})["y"], ref.run({"x": x})["y"])


def test_fp16_session_moves_float_tensors_between_int8_ops_as_half() -> None:
    """In fp16 mode a DequantizeLinear output that feeds a float op is stored as half (Y_HALF)
    and QuantizeLinear reads it back (X_HALF). A dequantized code (q - zp) * s stored as half is
    within 2^-11 relative of it, far less than half a step, so the codes come back exactly:
    the fp16 session equals the fp32 one (which equals the reference; the reference's own fp16
    mode also rounds the graph's float input and output to half, which opencl keeps float).
    Per-tensor weight scales: fp16 sessions round constant arrays, per-channel scales included,
    to half, in the reference and here alike, which moves some multipliers."""
    b = conv_graph(seed=6, per_channel=False)
    b.g.outputs.clear()
    b.g.add_node("Relu", ["y"], ["r"], activation=Activation("Relu"))
    b.g.add_node("QuantizeLinear", ["r", "y.s", "y.z"], ["r.q"], axis=1)
    b.output("r.q", "y.s", "y.z", name="out")
    ref = edgesdk.Session(b.g, backend="reference", optimize=False)
    fp32 = edgesdk.Session(b.g, backend="opencl", optimize=False)
    fp16 = edgesdk.Session(b.g, backend="opencl", precision="fp16", optimize=False)
    assert set(fp16._impl.placements.values()) == {"opencl"}, fp16._impl.fallback_reasons
    assert fp16._impl._tensors["y"].half and fp16._impl._tensors["r"].half
    feeds = b.feeds()
    want = ref.run(feeds)["out"]
    np.testing.assert_array_equal(fp32.run(feeds)["out"], want)
    np.testing.assert_array_equal(fp16.run(feeds)["out"], want)


# -- what still falls back -------------------------------------------------------------------------
def test_8bit_moves_without_a_kernel_fall_back_with_a_reason() -> None:
    """A Transpose of codes runs on the reference kernel (with its reason); the QLinearConcat that
    reads it runs on its OpenCL kernel."""
    b = Builder(5)
    x = b.quantized_input("x", (1, 4, 6, 6))
    b.g.add_node("Transpose", [x[0]], ["t.q"], perm=(0, 1, 3, 2))
    b.g.add_node("QLinearConcat", [x[1], x[2], "t.q", x[1], x[2], x[0], x[1], x[2]], ["c.q"], axis=1)
    b.output("c.q", x[1], x[2])
    ocl = edgesdk.Session(b.g, backend="opencl")
    reasons = {n.op: ocl._impl.fallback_reasons.get(n.name) for n in ocl.graph.nodes}
    assert reasons["Transpose"] == "8-bit tensors: no OpenCL int8 kernel yet", reasons
    assert reasons["QLinearConcat"] is None and ocl._impl.placements[next(
        n.name for n in ocl.graph.nodes if n.op == "QLinearConcat")] == "opencl", reasons
    assert reasons["QuantizeLinear"] is None and reasons["DequantizeLinear"] is None, reasons
    ref = edgesdk.Session(b.g, backend="reference")
    feeds = b.feeds()
    np.testing.assert_array_equal(ocl.run(feeds)["y"], ref.run(feeds)["y"])


def test_accumulator_that_could_overflow_falls_back() -> None:
    b = conv_graph(seed=4)
    b.g.tensors["b"].data = np.full(16, 2 ** 31 - 1000, np.int32)
    ocl = check_exact_placement_reference(b)
    assert "overflow" in next(iter(ocl._impl.fallback_reasons.values()))


def check_exact_placement_reference(builder: Builder) -> edgesdk.Session:
    ref = edgesdk.Session(builder.g, backend="reference")
    ocl = edgesdk.Session(builder.g, backend="opencl")
    assert "reference" in ocl._impl.placements.values()
    feeds = builder.feeds()
    np.testing.assert_array_equal(ocl.run(feeds)["y"], ref.run(feeds)["y"])
    return ocl


# -- a whole model quantized by edgesdk's PTQ ------------------------------------------------------
ZOO = {"mobilenet_v2": (1, 3, 32, 32), "resnet18": (1, 3, 32, 32)}


def ptq_zoo_graph(name: str):
    zoo = pytest.importorskip("zoo")
    from edgesdk.loader import load_model
    from edgesdk.passes import optimize
    from edgesdk.quant.ptq import quantize_graph
    shape = ZOO[name]
    graph = load_model(str(zoo.export_onnx(name, input_shape=shape)), None, None)
    optimize(graph)
    calibration = np.random.default_rng(0).standard_normal((8,) + shape[1:]).astype(np.float32)
    qgraph, report = quantize_graph(graph, calibration)
    assert not report.float_ops, report.float_ops
    return qgraph, shape


@pytest.mark.parametrize("name", list(ZOO))
def test_ptq_zoo_model_on_opencl_equals_reference(name: str) -> None:
    qgraph, shape = ptq_zoo_graph(name)
    ref = edgesdk.Session(qgraph, backend="reference")
    ocl = edgesdk.Session(qgraph, backend="opencl")
    placed = {(n.op, ocl._impl.placements[n.name]) for n in ocl.graph.nodes}
    assert {where for _, where in placed} <= {"opencl", "view"}, (placed, ocl._impl.fallback_reasons)
    assert {"QLinearConv", "QGemm", "QLinearAdd", "QLinearGlobalAveragePool"} <= {op for op, _ in placed}
    for seed in (5, 6):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        want, got = ref.run({ref.input_names[0]: x}), ocl.run({ocl.input_names[0]: x})
        for out in ref.output_names:
            np.testing.assert_array_equal(got[out], want[out])


# -- Oclgrind ---------------------------------------------------------------------------------------
OCLGRIND_CASES = ["conv3x3", "conv_asym_pads", "conv_odd_channels", "depthwise_stride2", "depthwise_5x5_wide",
                  "gemm_transb_bias", "add_broadcast_both", "mul_same", "global_average_pool_wide",
                  "average_pool_ceil_pads_counted", "max_pool_ceil_dilated", "lookup", "concat_channels", "per_axis_quantize",
                  "int8_conv_clamp", "int8_depthwise"]
OCLGRIND_DOT_CASES = ["conv_odd_channels", "gemm_no_transb", "int8_conv_clamp"]


@pytest.mark.oclgrind
def test_int8_kernels_are_clean_under_oclgrind(tmp_path) -> None:
    from test_opencl_oclgrind import assert_clean_under_oclgrind, needs_oclgrind
    if needs_oclgrind.args[0]:
        pytest.skip(needs_oclgrind.kwargs["reason"])
    log = assert_clean_under_oclgrind(__file__, tmp_path, "--oclgrind-suite")
    ran = re.search(r"int8 suite ok: (\d+) cases", log)
    assert ran and int(ran.group(1)) == 2 + len(OCLGRIND_CASES) + len(OCLGRIND_DOT_CASES), log[-2000:]


def run_oclgrind_suite() -> int:
    sys.path.insert(0, str(TESTS))
    from edgesdk.backends.opencl.device import open_device
    print(f"device: {open_device().label}", flush=True)
    count = 0
    for left in (1, 0):
        test_requantization_in_opencl_c_is_fixedpoint_bit_for_bit(left)
        count += 1
        print(f"  requantization (QLEFT {left}): ok", flush=True)
    for dot, names in ((None, OCLGRIND_CASES), (qlower.EMULATED_DOT, OCLGRIND_DOT_CASES)):
        qlower.force_dot = dot
        for name in names:
            check_exact((CASES.get(name) or INT8_CASES[name])(), optimize=name not in INT8_CASES)
            count += 1
            print(f"  {name}{' (dot)' if dot else ''}: ok", flush=True)
    print(f"int8 suite ok: {count} cases", flush=True)
    return 0


if __name__ == "__main__" and "--oclgrind-suite" in sys.argv:
    sys.exit(run_oclgrind_suite())
