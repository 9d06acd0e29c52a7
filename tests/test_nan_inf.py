"""NaN and infinities propagate as in ONNX Runtime, on every backend and kernel level (issue 12).

One table of cases (ONNX Runtime's OpTester style): each is a single-node or two-node model and an
input holding NaN, +inf and -inf among finite values, run on every backend this machine has
(reference; cpu with each ISA level it runs forced in turn; opencl with fp32 and fp16 storage)
and compared with ONNX Runtime: the same NaN and +-inf positions exactly, finite values within
the backend's tolerance. Where ONNX Runtime is inconsistent (its MaxPool and GlobalMaxPool drop a
NaN depending on where it sits in the window; its LRN's running window sum spreads NaN and inf to
channels outside the window) the oracle is numpy's IEEE semantics, written out here.
The C++ kernels are also checked lane by lane, NEON included, by the kernel driver's
`nonfinite` family (tests/test_native_kernels.py).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as oh
from onnx import numpy_helper

import edgesdk
from onnx_builders import single_node_model

ort = pytest.importorskip("onnxruntime")

NAN, INF = np.float32(np.nan), np.float32(np.inf)
F32_MAX = np.finfo(np.float32).max
R = np.random.default_rng(12)


def with_specials(*shape: int, scale: float = 2.0, every: int = 7) -> np.ndarray:
    """Random values with NaN, +inf, -inf, NaN, ... at every `every`-th element."""
    x = (R.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[3::every] = np.resize(np.array([NAN, INF, -INF], np.float32), flat[3::every].size)
    return x


def two_node_model(first: onnx.NodeProto, second: onnx.NodeProto, x_shape, inits: dict[str, np.ndarray],
                   opset: int = 17):
    graph = oh.make_graph([first, second], "pair", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape))],
                          [oh.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 8
    return model


# -- the case table -------------------------------------------------------------------------------
ACTIVATIONS = {  # name: (op, attrs, constant inputs)
    "Relu": ("Relu", {}, {}),
    "Clip(0,6)": ("Clip", {}, {"min": np.float32(0), "max": np.float32(6)}),
    "Clip(min)": ("Clip", {}, {"min": np.float32(-0.5)}),
    "Clip(max)": ("Clip", {}, {"min": None, "max": np.float32(0.5)}),
    "Clip()": ("Clip", {}, {}),
    "LeakyRelu": ("LeakyRelu", {"alpha": 0.1}, {}),
    "Sigmoid": ("Sigmoid", {}, {}),
    "Tanh": ("Tanh", {}, {}),
    "HardSigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, {}),
    "HardSwish": ("HardSwish", {}, {}),
    "Gelu": ("Gelu", {}, {}),
    "Gelu(tanh)": ("Gelu", {"approximate": "tanh"}, {}),
    "Erf": ("Erf", {}, {}),
    "Exp": ("Exp", {}, {}),
    "Log": ("Log", {}, {}),
    "Abs": ("Abs", {}, {}),
    "Sqrt": ("Sqrt", {}, {}),
    "Reciprocal": ("Reciprocal", {}, {}),
    "Neg": ("Neg", {}, {}),
    "Softplus": ("Softplus", {}, {}),
    "Mish": ("Mish", {}, {}),
    "Silu": ("Swish", {}, {}),
}
OPSETS = {"Gelu": 20, "Gelu(tanh)": 20, "Mish": 18, "Silu": 24}  # first opsets of these ONNX ops (else 17)


def activation_model(name: str, x_shape):
    op, attrs, consts = ACTIVATIONS[name]
    present = {k: v for k, v in consts.items() if v is not None}
    extra = ["" if v is None else k for k, v in consts.items()] if consts else None
    model = single_node_model(op, x_shape, present, extra_inputs=extra, opset=OPSETS.get(name, 17), **attrs)
    model.ir_version = 10 if OPSETS.get(name, 17) >= 21 else model.ir_version
    return model


def fused_model(producer: str, act: str):
    """Conv / Gemm / MatMul+Add followed by an activation that the backends fuse into its epilogue."""
    op, attrs, consts = ACTIVATIONS[act]
    act_inputs = ["z"] + ["" if v is None else f"act_{k}" for k, v in consts.items()]
    inits = {f"act_{k}": v for k, v in consts.items() if v is not None}
    act_node = oh.make_node(op, act_inputs, ["y"], **attrs)
    opset = OPSETS.get(act, 17)
    w_rng = np.random.default_rng(3)
    if producer == "Conv":
        inits.update(w=w_rng.standard_normal((8, 3, 3, 3)).astype(np.float32), b=w_rng.standard_normal(8).astype(np.float32))
        return two_node_model(oh.make_node("Conv", ["x", "w", "b"], ["z"], pads=[1, 1, 1, 1]), act_node, (1, 3, 6, 7), inits, opset)
    if producer == "ConvWinograd":  # 3x3 stride 1, 16 channels, 16 tiles: opencl's Winograd F(2x2, 3x3)
        inits.update(w=w_rng.standard_normal((16, 16, 3, 3)).astype(np.float32), b=w_rng.standard_normal(16).astype(np.float32))
        return two_node_model(oh.make_node("Conv", ["x", "w", "b"], ["z"], pads=[1, 1, 1, 1]), act_node, (1, 16, 8, 8), inits, opset)
    if producer == "ConvStride2":
        inits.update(w=w_rng.standard_normal((5, 4, 3, 3)).astype(np.float32), b=w_rng.standard_normal(5).astype(np.float32))
        return two_node_model(oh.make_node("Conv", ["x", "w", "b"], ["z"], pads=[1, 1, 1, 1], strides=[2, 2]), act_node,
                              (1, 4, 9, 9), inits, opset)
    if producer == "Depthwise":
        inits.update(w=w_rng.standard_normal((6, 1, 3, 3)).astype(np.float32), b=w_rng.standard_normal(6).astype(np.float32))
        return two_node_model(oh.make_node("Conv", ["x", "w", "b"], ["z"], pads=[1, 1, 1, 1], group=6), act_node,
                              (1, 6, 7, 7), inits, opset)
    if producer == "Conv1x1":
        inits.update(w=w_rng.standard_normal((17, 5, 1, 1)).astype(np.float32), b=w_rng.standard_normal(17).astype(np.float32))
        return two_node_model(oh.make_node("Conv", ["x", "w", "b"], ["z"]), act_node, (1, 5, 4, 5), inits, opset)
    if producer == "Gemm":
        inits.update(w=w_rng.standard_normal((20, 33)).astype(np.float32), b=w_rng.standard_normal(33).astype(np.float32))
        return two_node_model(oh.make_node("Gemm", ["x", "w", "b"], ["z"]), act_node, (3, 20), inits, opset)
    inits.update(w=w_rng.standard_normal((20, 9)).astype(np.float32))
    return two_node_model(oh.make_node("MatMul", ["x", "w"], ["z"]), act_node, (2, 4, 20), inits, opset)


def fused_input(producer: str, special: float) -> np.ndarray:
    """One special value per image / row; the others finite (so both kinds of output occur)."""
    shape = {"Conv": (1, 3, 6, 7), "ConvWinograd": (1, 16, 8, 8), "ConvStride2": (1, 4, 9, 9), "Depthwise": (1, 6, 7, 7),
             "Conv1x1": (1, 5, 4, 5), "Gemm": (3, 20), "MatMul": (2, 4, 20)}[producer]
    x = (R.standard_normal(shape)).astype(np.float32)
    flat = x.reshape(-1)
    flat[flat.size // 3] = special
    return x


def softmax_rows() -> np.ndarray:
    rows = R.standard_normal((7, 19)).astype(np.float32)
    rows[0, 4] = NAN
    rows[1, 7] = INF
    rows[2, 11] = -INF
    rows[3, :] = -INF
    rows[4, 0] = -F32_MAX  # attention-style mask
    rows[5, [2, 9]] = INF
    return rows


def numpy_max_pool(x: np.ndarray) -> np.ndarray:  # 2x2 stride 2, NaN anywhere in a window -> NaN
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def numpy_lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    c = x.shape[1]
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    out = np.empty_like(x)
    for ch in range(c):
        window = np.square(x[:, max(0, ch - before): min(c, ch + after + 1)]).sum(axis=1)
        out[:, ch] = x[:, ch] / (bias + alpha / size * window) ** beta
    return out


CASES = {}  # id: (model, input, numpy oracle or None for ONNX Runtime)
for _name in ACTIVATIONS:
    CASES[f"act-{_name}"] = (activation_model(_name, (2, 3, 5, 7)), with_specials(2, 3, 5, 7, scale=4.0), None)
for _producer in ("Conv", "Gemm"):  # every activation in a conv and an FC epilogue
    # but Reciprocal: 1/x of a sum near 0 is ill-conditioned in fp16 (stand-alone it is covered)
    for _name in [a for a in ACTIVATIONS if a != "Reciprocal"]:
        for _special in (NAN, INF, -INF):
            CASES[f"{_producer}+{_name}-{_special}"] = (fused_model(_producer, _name), fused_input(_producer, _special), None)
for _producer in ("Conv1x1", "MatMul", "ConvWinograd", "ConvStride2", "Depthwise"):  # the other paths
    for _name in ("Relu", "Clip(0,6)", "Sigmoid", "HardSwish", "Gelu"):
        for _special in (NAN, INF, -INF):
            CASES[f"{_producer}+{_name}-{_special}"] = (fused_model(_producer, _name), fused_input(_producer, _special), None)
CASES["Softmax-rows"] = (single_node_model("Softmax", (7, 19), axis=-1), softmax_rows(), None)
_sm4 = with_specials(1, 6, 3, 4, every=11)
CASES["Softmax-channels"] = (single_node_model("Softmax", _sm4.shape, axis=1), _sm4, None)
_pool_x = with_specials(1, 5, 6, 8, every=13)
CASES["AveragePool"] = (single_node_model("AveragePool", _pool_x.shape, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), _pool_x, None)
CASES["GlobalAveragePool"] = (single_node_model("GlobalAveragePool", _pool_x.shape), _pool_x, None)
CASES["ReduceMean"] = (single_node_model("ReduceMean", _pool_x.shape, axes=[2, 3]), _pool_x, None)
CASES["MaxPool"] = (single_node_model("MaxPool", _pool_x.shape, kernel_shape=[2, 2], strides=[2, 2]), _pool_x,
                    numpy_max_pool)
# 101 channels: the cpu pool kernels' blocks of 4, 2 and 1 vectors and a tail, on every level
_pool_wide = with_specials(1, 101, 4, 6, every=29)
CASES["MaxPool-101-channels"] = (single_node_model("MaxPool", _pool_wide.shape, kernel_shape=[2, 2], strides=[2, 2]),
                                 _pool_wide, numpy_max_pool)
CASES["GlobalMaxPool"] = (single_node_model("GlobalMaxPool", _pool_x.shape), _pool_x,
                          lambda x: x.max(axis=(2, 3), keepdims=True))
_lrn_x = with_specials(1, 9, 3, 3, every=17)
CASES["LRN"] = (single_node_model("LRN", _lrn_x.shape, size=3, alpha=1e-2, beta=0.75, bias=1.0), _lrn_x,
                lambda x: numpy_lrn(x, 3, 1e-2, 0.75, 1.0))
_b = np.array([1, INF, -INF, NAN, 0, 2, -3, INF], np.float32)
for _op in ("Add", "Sub", "Mul", "Div"):
    CASES[_op] = (single_node_model(_op, (3, 8), {"b": _b}), with_specials(3, 8, every=5), None)
CASES["Pow"] = (single_node_model("Pow", (3, 8), {"b": _b}), with_specials(3, 8, every=5), None)
CASES["Pow-2"] = (single_node_model("Pow", (3, 8), {"b": np.float32(2)}), with_specials(3, 8, every=5), None)
CASES["Pow-0.5"] = (single_node_model("Pow", (3, 8), {"b": np.float32(0.5)}), with_specials(3, 8, every=5), None)
_slope = np.array([0.5, INF, -INF, NAN, 0, 2, -3, 1], np.float32)
CASES["PRelu"] = (single_node_model("PRelu", (3, 8), {"slope": _slope}), with_specials(3, 8, every=5), None)
CASES["PRelu-one-slope"] = (single_node_model("PRelu", (3, 8), {"slope": np.float32([0.25])}),
                            with_specials(3, 8, every=5), None)

def pattern_model(nodes: list[tuple], inits: dict[str, float]):
    """The formulas exporters write for SiLU, GELU and Mish (fused into one node at import): the
    fused node must give what ONNX Runtime gives for the formula (-inf * 0 = NaN at -inf)."""
    graph = oh.make_graph([oh.make_node(op, list(ins), [out]) for op, ins, out in nodes], "pattern",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 8])], [oh.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(np.float32(v), k) for k, v in inits.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


PATTERNS = {  # name: ((op, inputs, output) in order, scalar initializers)
    "Silu": ([("Sigmoid", ("x",), "s"), ("Mul", ("x", "s"), "y")], {}),
    "Gelu-erf": ([("Div", ("x", "r2"), "d"), ("Erf", ("d",), "e"), ("Add", ("e", "one"), "a"), ("Mul", ("x", "a"), "m"),
                  ("Mul", ("m", "half"), "y")], {"r2": math.sqrt(2), "one": 1.0, "half": 0.5}),
    "Gelu-tanh": ([("Pow", ("x", "three"), "c"), ("Mul", ("c", "k"), "kc"), ("Add", ("x", "kc"), "p"),
                   ("Mul", ("p", "s2pi"), "u"), ("Tanh", ("u",), "t"), ("Add", ("t", "one"), "a"),
                   ("Mul", ("half", "x"), "h"), ("Mul", ("h", "a"), "y")],
                  {"three": 3.0, "k": 0.044715, "s2pi": math.sqrt(2 / math.pi), "one": 1.0, "half": 0.5}),
    "Mish": ([("Softplus", ("x",), "sp"), ("Tanh", ("sp",), "t"), ("Mul", ("x", "t"), "y")], {}),
}
for _name, (_nodes, _inits) in PATTERNS.items():
    CASES[f"pattern-{_name}"] = (pattern_model(_nodes, _inits), with_specials(3, 8, every=4, scale=6.0), None)
CASES["Pad"] = (single_node_model("Pad", (1, 2, 3, 3), {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}),
                with_specials(1, 2, 3, 3, every=4), None)

BACKENDS = ["reference", "reference-fp16", "cpu-scalar", "cpu-avx2", "cpu-avx512", "cpu-fp16", "opencl-fp32",
            "opencl-fp16"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    """(backend, precision) of one backend configuration; cpu ones force their ISA level."""
    name = request.param
    if name == "reference-fp16":
        yield "reference", "fp16"
        return
    if name == "cpu-fp16":  # fp16 weights (and fp16 arithmetic where the CPU has it) at the default level
        pytest.importorskip("edgesdk._native")
        yield "cpu", "fp16"
        return
    if name.startswith("cpu-"):
        _native = pytest.importorskip("edgesdk._native")
        isa = name.split("-")[1]
        if isa not in _native.kernels.supported_isas():
            pytest.skip(f"this CPU cannot run the {isa} kernels")
        _native.kernels.set_isa(isa)
        yield "cpu", "fp32"
        _native.kernels.reset_isa()
        return
    if name.startswith("opencl-"):
        pytest.importorskip("pyopencl")
        from edgesdk.backends.opencl import OpenCLBackend
        if OpenCLBackend.unavailable_reason() is not None:
            pytest.skip(str(OpenCLBackend.unavailable_reason()))
        yield "opencl", name.split("-")[1]
        return
    yield "reference", "fp32"


def ort_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def assert_same_specials(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    """NaN and +-inf exactly where the oracle has them; finite values within rtol of the output scale."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=f"{what}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=f"{what}: -inf positions")
    finite = np.isfinite(want)
    if finite.any():
        scale = max(float(np.abs(want[finite]).max()), 1e-6)
        np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * scale, err_msg=what)


@pytest.mark.parametrize("case", list(CASES))
def test_nan_and_inf_like_onnxruntime(case: str, backend) -> None:
    model, x, numpy_oracle = CASES[case]
    name, precision = backend
    with np.errstate(all="ignore"):
        want = ort_run(model, x) if numpy_oracle is None else numpy_oracle(x)
    sess = edgesdk.Session(model, backend=name, precision=precision)
    got = sess.run({"x": x})[sess.output_names[0]]
    what = f"{case} on {name} {precision}"
    if precision == "fp32":
        assert_same_specials(got, want, 1e-4, what)
        return
    # fp16 storage: Clip's default bound 3.4e38 is past the half range, so a backend that stores
    # its output as half (the reference's fp16 model) gives inf there, as ONNX Runtime's float16 would.
    try:
        assert_same_specials(got, want, 2e-2, what)
    except AssertionError:
        assert_same_specials(got, want.astype(np.float16).astype(np.float32), 2e-2, what + " (half-rounded oracle)")


def test_numpy_oracles_are_needed() -> None:
    """The cases judged by numpy are the ones ONNX Runtime gets inconsistent (see the module doc);
    if a future ONNX Runtime agrees with numpy, the case can move to it."""
    for case in ("MaxPool", "GlobalMaxPool", "LRN"):
        model, x, numpy_oracle = CASES[case]
        with np.errstate(all="ignore"):
            want, ort_out = numpy_oracle(x), ort_run(model, x)
        assert not np.array_equal(np.isnan(want), np.isnan(ort_out)), case


def test_one_nan_pixel_makes_the_default_model_logits_nan(backend) -> None:
    """The embedded digits model, like ONNX Runtime: one NaN pixel and every logit is NaN."""
    path = Path(edgesdk.__file__).parent / "models" / "digits_lenet.onnx"
    model = onnx.load(str(path))
    dims = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = R.random(dims).astype(np.float32)
    x.reshape(-1)[x.size // 2] = NAN
    ort_sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = ort_sess.run(None, {model.graph.input[0].name: x})[0]
    assert np.isnan(want).all()
    name, precision = backend
    sess = edgesdk.Session(str(path), backend=name, precision=precision)
    got = sess.run({sess.input_names[0]: x})[sess.output_names[0]]
    assert np.isnan(got).all(), f"{name} {precision}: {got}"


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("m, k", [(1, 5), (1, 64), (1, 130), (2, 5), (2, 130)])
def test_infinite_codebook_entries_give_what_the_decoded_weights_give(m: int, k: int, per_channel: bool,
                                                                      backend) -> None:
    """A clustered layer runs straight from its codebook on cpu (the GEMV at batch 1): the packing
    pads K to the kernel's block, and padded columns must add exactly 0 (not entry 0 x 0 = NaN when
    entry 0 is inf)."""
    import dataclasses

    from edgesdk.compress import LayerSettings, Recipe, compress_model
    name, precision = backend
    n = 7
    w = R.standard_normal((k, n)).astype(np.float32)
    model = single_node_model("Gemm", (m, k), {"W": w}, transB=0)
    graph, _ = compress_model(model, Recipe(LayerSettings(cluster_bits=2, per_channel=per_channel)))
    tensor = next(t for t in graph.tensors.values() if t.encoding is not None)
    book = tensor.encoding.codebook.copy()
    book[:, 0] = INF  # every column that uses entry 0 is +inf; the inputs below are positive
    tensor.encoding = dataclasses.replace(tensor.encoding, codebook=book)
    tensor._data = None
    x = (R.random((m, k)) + 0.5).astype(np.float32)
    with np.errstate(all="ignore"):
        want = x @ tensor.data.reshape(n, k).T if tensor.data.shape == (n, k) else x @ tensor.data
    got = edgesdk.Session(graph, backend=name, precision=precision).run({"x": x})[graph.outputs[0]]
    rtol = 1e-4 if precision == "fp32" else 2e-2
    assert_same_specials(got, want.astype(np.float32), rtol, f"Gemm K={k} inf codebook on {name} {precision}")
