"""The elementwise family (``edgesdk/ops/elementwise.py``) on every backend: the activations and math
functions (stand-alone and fused into a Conv/Gemm/MatMul/Add), Clip in every input form, Add, Sub,
Mul and Div broadcasting a constant or a run-time operand over a Conv's output (NHWC on cpu), Pow
and PRelu on run-time tensors,
and the passes that turn exporters' activation formulas into one node (SiLU, both GELUs, Mish,
hard-swish), which must leave the graph alone when an intermediate is used elsewhere or a constant
differs."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from edgesdk.errors import UnsupportedModelError
from edgesdk.runtime.activations import ACTIVATION_PARAMS, Activation
from onnx_builders import single_node_model
from ops.op_tester import torch_export

R = np.random.default_rng(13)
F = onnx.TensorProto.FLOAT


@pytest.fixture(autouse=True)
def _same_numbers_in_any_order():
    """Every test draws the same inputs whichever worker runs it, after whichever other tests."""
    global R
    R = np.random.default_rng(13)


def randn(*shape: int, scale: float = 2.0) -> np.ndarray:
    return (R.standard_normal(shape) * scale).astype(np.float32)


def model_of(nodes, inputs: dict[str, tuple], inits: dict[str, np.ndarray], outputs=("y",), opset: int = 17):
    """A model of ``nodes`` with float inputs of the given shapes and ``inits`` as initializers."""
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(n, F, list(s)) for n, s in inputs.items()],
                          [oh.make_empty_tensor_value_info(o) for o in outputs],
                          [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 8
    return model


def ops_of(sess: edgesdk.Session) -> list[str]:
    """Each node as "Op" or "Op+FusedActivation" (what the passes left)."""
    return [n.op + (f"+{n.attrs['fused_activation']}" if "fused_activation" in n.attrs else "")
            for n in sess.graph.nodes]


# -- stand-alone activations ----------------------------------------------------------------------
# id: (ONNX op, opset, attributes, input scale)
UNARY = {
    "Erf": ("Erf", 17, {}, 1.5), "Exp": ("Exp", 17, {}, 2.0), "Log": ("Log", 17, {}, 2.0),
    "Abs": ("Abs", 17, {}, 2.0), "Sqrt": ("Sqrt", 17, {}, 2.0), "Reciprocal": ("Reciprocal", 17, {}, 2.0),
    "Neg": ("Neg", 17, {}, 2.0), "Softplus": ("Softplus", 17, {}, 8.0), "Mish": ("Mish", 18, {}, 8.0),
    "Gelu": ("Gelu", 20, {}, 4.0), "Gelu-none": ("Gelu", 20, {"approximate": "none"}, 4.0),
    "Gelu-tanh": ("Gelu", 20, {"approximate": "tanh"}, 4.0), "Swish": ("Swish", 24, {}, 6.0),
    "Swish-alpha1": ("Swish", 24, {"alpha": 1.0}, 6.0),
    "Relu": ("Relu", 17, {}, 2.0), "LeakyRelu": ("LeakyRelu", 17, {"alpha": 0.2}, 2.0),
    "Sigmoid": ("Sigmoid", 17, {}, 4.0), "Tanh": ("Tanh", 17, {}, 2.0),
    "HardSigmoid": ("HardSigmoid", 17, {"alpha": 0.25, "beta": 0.4}, 4.0), "HardSwish": ("HardSwish", 17, {}, 4.0),
}


def unary_input(case: str, shape) -> np.ndarray:
    """Inputs in the function's domain: the harness compares against the output's scale, which a
    NaN would poison (NaN and infinities are tests/test_nan_inf.py's cases)."""
    x = randn(*shape, scale=UNARY[case][3])
    if case in ("Log", "Sqrt"):
        x = np.abs(x) + np.float32(1e-3)
    if case == "Reciprocal":  # away from 0, where 1/x dwarfs the rest of the output's scale
        x = np.where(np.abs(x) < 0.1, np.float32(0.5), x)
    return x


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (3, 37)], ids=["4d", "2d-odd"])
@pytest.mark.parametrize("case", UNARY)
def test_unary(target, case: str, shape) -> None:
    op, opset, attrs, _ = UNARY[case]
    sess = target.check(single_node_model(op, shape, opset=opset, **attrs), {"x": unary_input(case, shape)})
    assert ops_of(sess) == [op]


def test_swish_with_another_slope(target) -> None:
    """x * sigmoid(alpha x): cpu scales, runs the native sigmoid and multiplies; opencl has no such
    activation and runs the reference kernel (said by NotLowerable's reason)."""
    model = single_node_model("Swish", (2, 3, 4, 5), opset=24, alpha=0.5)
    target.check(model, {"x": randn(2, 3, 4, 5, scale=6.0)},
                 may_fall_back={"opencl/fp32:Swish": "no OpenCL Swish with alpha != 1",
                                "opencl/fp16:Swish": "no OpenCL Swish with alpha != 1"})


@pytest.mark.parametrize("kind, params", [("Gelu", (0.0,)), ("Gelu", (1.0,)), ("Mish", ()), ("Swish", (1.0,)),
                                          ("Erf", ()), ("Exp", ()), ("Softplus", ()), ("Sqrt", ()),
                                          ("Reciprocal", ()), ("Log", ()), ("Abs", ()), ("Neg", ())],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("producer", ["Conv", "Gemm", "MatMul", "Add"])
def test_math_activation_fused_into_producer(target, producer: str, kind: str, params) -> None:
    """The activation node follows the producer in the ONNX model; the passes fuse it and every
    backend applies it in the producer's epilogue."""
    act = Activation(kind, params)
    # Log, Sqrt and Reciprocal of positive values only (products of positive weights and inputs):
    # the harness compares against the output's scale, which a NaN or a huge 1/x would swamp
    positive = kind in ("Log", "Sqrt", "Reciprocal")

    def w(shape):
        values = R.standard_normal(shape)
        return np.abs(values) + 0.1 if positive else values
    if producer == "Conv":
        first = oh.make_node("Conv", ["x", "w", "b"], ["z"], pads=[1, 1, 1, 1])
        shape, inits = (1, 3, 6, 7), {"w": (w((5, 3, 3, 3)) * 0.3).astype(np.float32), "b": (w(5) * 0.3).astype(np.float32)}
    elif producer == "Gemm":
        first = oh.make_node("Gemm", ["x", "w", "b"], ["z"], transB=1)
        shape, inits = (3, 20), {"w": (w((9, 20)) * 0.3).astype(np.float32), "b": (w(9) * 0.3).astype(np.float32)}
    elif producer == "MatMul":
        first = oh.make_node("MatMul", ["x", "w"], ["z"])
        shape, inits = (2, 4, 20), {"w": (w((20, 9)) * 0.3).astype(np.float32)}
    else:
        first = oh.make_node("Add", ["x", "c"], ["z"])
        shape, inits = (2, 3, 4, 5), {"c": (w(5) * 1.0).astype(np.float32)}
    attrs = {"approximate": "tanh"} if (kind, params) == ("Gelu", (1.0,)) else {}
    opset = {"Gelu": 20, "Mish": 18, "Swish": 24}.get(kind, 17)
    model = model_of([first, oh.make_node(kind, ["z"], ["y"], **attrs)], {"x": shape}, inits, opset=opset)
    x = randn(*shape, scale=1.0)
    sess = target.check(model, {"x": np.abs(x) if positive else x})
    assert ops_of(sess) == [f"{producer}+{act}"]


def test_activation_kinds_print_and_check_their_parameters() -> None:
    assert [str(Activation("Gelu", (p,))) for p in (0.0, 1.0)] == ["Gelu", "Gelu(tanh)"]
    assert str(Activation("Swish", (1.0,))) == "Silu" and str(Activation("Swish", (0.5,))) == "Swish(0.5)"
    assert Activation("Swish", (1.0,)).fusable and not Activation("Swish", (2.0,)).fusable
    with pytest.raises(ValueError, match="approximate"):
        Activation("Gelu", (0.5,))
    assert set(ACTIVATION_PARAMS) <= {s.name for s in onnx.defs.get_all_schemas()}  # every kind is an ONNX op


def test_gelu_with_an_unknown_approximation_is_refused() -> None:
    with pytest.raises(UnsupportedModelError, match="approximate='fast'"):
        edgesdk.Session(single_node_model("Gelu", (2, 3), opset=20, approximate="fast"))


def test_torch_lowering_of_every_kind() -> None:
    """apply_torch (fine-tuning) computes what the numpy reference computes."""
    torch = pytest.importorskip("torch")
    x = randn(4, 33, scale=4.0)
    kinds = [Activation(k, ()) for k, p in ACTIVATION_PARAMS.items() if not p] + [
        Activation("Gelu", (0.0,)), Activation("Gelu", (1.0,)), Activation("Swish", (1.0,)),
        Activation("Swish", (0.5,)), Activation("LeakyRelu", (0.1,)), Activation("Clip", (-1.0, 2.0)),
        Activation("HardSigmoid", (0.2, 0.5))]
    for act in kinds:
        want = act.apply(x.astype(np.float64))
        got = act.apply_torch(torch.from_numpy(x.astype(np.float64))).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=str(act))


# -- Clip -------------------------------------------------------------------------------------------
CLIP = {  # id: (opset, min and max as constant inputs (None: omitted), attributes)
    "min_max": (17, (-0.5, 0.7), {}),
    "min_only": (17, (0.0, None), {}),
    "max_only": (17, (None, 0.7), {}),
    "opset10_attributes": (10, None, {"min": -0.2, "max": 0.3}),  # upgraded to inputs at import
}


@pytest.mark.parametrize("case", CLIP)
def test_clip(target, case: str) -> None:
    opset, bounds, attrs = CLIP[case]
    constants, names = {}, []
    for name, value in zip(("min", "max"), bounds or ()):
        if value is not None:
            constants[name] = np.float32(value)
        names.append(name if value is not None else "")
    while names and names[-1] == "":
        names.pop()
    model = single_node_model("Clip", (2, 3, 5, 5), constants, opset=opset, extra_inputs=names, **attrs)
    sess = target.check(model, {"x": randn(2, 3, 5, 5)})
    assert ops_of(sess) == ["Clip"]


# -- Add, Sub, Mul, Div -------------------------------------------------------------------------------
BINARY_OPS = ["Add", "Sub", "Mul", "Div"]
BROADCASTS = {  # id: (x shape, constant shape)
    "per_channel": ((2, 3, 4, 5), (3, 1, 1)),
    "same_2d": ((2, 3), (2, 3)),
    "both_ways": ((1, 4, 1), (3, 1, 5)),
    "scalar": ((4,), ()),
    "last_axis": ((2, 3, 4, 5), (5,)),
    "same_4d": ((2, 3, 4, 5), (2, 3, 4, 5)),
}


def divisor_safe(op: str, value: np.ndarray) -> np.ndarray:
    """A Div's divisor kept away from 0 (a huge quotient would swamp the output's scale)."""
    return (np.abs(value) + np.float32(0.5)).astype(np.float32) if op == "Div" else value


@pytest.mark.parametrize("op", BINARY_OPS)
@pytest.mark.parametrize("case", BROADCASTS)
def test_binary_with_a_constant(target, op: str, case: str) -> None:
    x_shape, c_shape = BROADCASTS[case]
    const = divisor_safe(op, randn(*c_shape) if c_shape else np.float32(1.7))
    sess = target.check(single_node_model(op, x_shape, {"C": const}), {"x": randn(*x_shape)})
    assert ops_of(sess) == [op]


OPERANDS_AFTER_CONV = {  # id: the other operand of y = op(Conv(x), other), Conv's output (1, 6, 7, 5)
    "channel": (1, 6, 1, 1), "scalar": (1,), "full": (1, 6, 7, 5), "row": (5,),
    "activation": "a second Conv's output", "activation_channel": "the Conv's GlobalAveragePool",
}


@pytest.mark.parametrize("op", BINARY_OPS)
@pytest.mark.parametrize("other", OPERANDS_AFTER_CONV)
def test_binary_after_a_conv(target, op: str, other: str) -> None:
    """The Conv's output (NHWC storage on cpu) with a constant or a run-time operand; Sub with the
    Conv's output second; Add and Mul again followed by a ReLU (fused into Add, Mul's stays)."""
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    constants = {"w": randn(6, 6, 3, 3, scale=1.0), "b": randn(6, scale=1.0)}
    if other == "activation":  # the same weights: Sub gives 0 and Div 1 (c / c), exact on every backend
        nodes.append(oh.make_node("Conv", ["x", "w", "b"], ["k"], pads=[1, 1, 1, 1]))
    elif other == "activation_channel":
        nodes.append(oh.make_node("GlobalAveragePool", ["c"], ["k"]))
    else:
        shape = OPERANDS_AFTER_CONV[other]
        constants["k"] = divisor_safe(op, randn(*shape, scale=1.0))
    nodes.append(oh.make_node(op, ["k", "c"] if op == "Sub" else ["c", "k"], ["y"]))
    outputs = ["y"]
    if op in ("Add", "Mul"):
        nodes += [oh.make_node(op, ["c", "k"], ["t"]), oh.make_node("Relu", ["t"], ["y2"])]
        outputs.append("y2")
    model = model_of(nodes, {"x": (1, 6, 7, 5)}, constants, outputs=tuple(outputs))
    sess = target.check(model, {"x": randn(1, 6, 7, 5, scale=1.0)})
    if op == "Add":
        assert "Add+Relu" in ops_of(sess)


# -- Pow ------------------------------------------------------------------------------------------
POW_CONSTANT = {  # id: (exponent, base scale) with the base a run-time tensor; a negative
    # scale makes the base positive (a fractional power of a negative base is NaN)
    "square": (np.float32(2.0), 2.0), "cube": (np.float32(3.0), 2.0), "half": (np.float32(0.5), -2.0),
    "inverse": (np.float32(-1.0), 2.0), "int64-exponent": (np.int64(3), 1.5),
    "per-channel": (np.float32([1.0, 2.0, 0.5]).reshape(3, 1, 1), -2.0),
    "full": (np.abs(randn(3, 4, 5, scale=1.0)) + 0.5, -1.5),
}


@pytest.mark.parametrize("case", POW_CONSTANT)
def test_pow_with_a_constant_exponent(target, case: str) -> None:
    exponent, scale = POW_CONSTANT[case]
    x = randn(2, 3, 4, 5, scale=abs(scale))
    x = np.abs(x) + np.float32(0.01) if scale < 0 else x
    sess = target.check(single_node_model("Pow", x.shape, {"e": exponent}), {"x": x})
    assert ops_of(sess) == ["Pow"]


@pytest.mark.parametrize("shapes", [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (3, 1, 1)), ((5,), (2, 3, 5))],
                         ids=["same", "per-channel", "broadcast-base"])
def test_pow_with_a_run_time_exponent(target, shapes) -> None:
    base_shape, exponent_shape = shapes
    model = model_of([oh.make_node("Pow", ["x", "e"], ["y"])], {"x": base_shape, "e": exponent_shape}, {})
    target.check(model, {"x": np.abs(randn(*base_shape)) + 0.1, "e": randn(*exponent_shape, scale=1.5)})


def test_pow_of_a_constant_base(target) -> None:
    """2 ** x: a constant base (broadcast), the run-time tensor as exponent."""
    base = np.float32([[2.0], [1.5], [0.5]])
    model = model_of([oh.make_node("Pow", ["b", "x"], ["y"])], {"x": (3, 7)}, {"b": base})
    target.check(model, {"x": randn(3, 7, scale=2.0)})


def test_pow_of_constants_still_folds() -> None:
    """Pow, Neg and Sqrt left the constant-only ops: on constants they still fold at import, with
    the ONNX types (integer shape arithmetic stays integer)."""
    nodes = [oh.make_node("Pow", ["two", "one"], ["rows"]), oh.make_node("Neg", ["minus_four"], ["cols"]),
             oh.make_node("Concat", ["rows", "cols"], ["shape"], axis=0), oh.make_node("Reshape", ["x", "shape"], ["r"]),
             oh.make_node("Sqrt", ["four"], ["root"]), oh.make_node("Mul", ["r", "root"], ["y"])]
    inits = {"two": np.array([2], np.int64), "one": np.array([1], np.int64), "minus_four": np.array([-4], np.int64),
             "four": np.float32(4.0)}
    sess = edgesdk.Session(model_of(nodes, {"x": (8,)}, inits))
    assert ops_of(sess) == ["Reshape", "Mul"]
    x = randn(8)
    np.testing.assert_array_equal(sess.run({"x": x})["y"], 2 * x.reshape(2, 4))


def test_one_over_x_imports_as_reciprocal(target) -> None:
    """Div(1, x) (torch.rsqrt's tail, 1 / norm) becomes the Reciprocal activation (native, fusable)."""
    nodes = [oh.make_node("Sqrt", ["x"], ["s"]), oh.make_node("Div", ["one", "s"], ["y"])]
    x = np.abs(randn(2, 3, 4)) + 0.05
    sess = target.check(model_of(nodes, {"x": x.shape}, {"one": np.float32(1.0)}), {"x": x})
    assert ops_of(sess) == ["Sqrt", "Reciprocal"]


# -- PRelu ----------------------------------------------------------------------------------------
PRELU = {  # id: (input shape, slope)
    "per-channel": ((2, 3, 5, 4), np.float32([0.1, -0.3, 2.0]).reshape(3, 1, 1)),
    "one-slope": ((2, 3, 5, 4), np.float32([0.25])),
    "scalar-slope": ((2, 3, 5, 4), np.float32(0.25)),
    "full": ((1, 3, 4, 5), randn(3, 4, 5, scale=0.5)),
    "last-axis": ((2, 3, 4, 6), randn(6, scale=0.5)),  # TF exporters: channels last
    "2d": ((4, 9), randn(9, scale=0.5)),
}


@pytest.mark.parametrize("case", PRELU)
def test_prelu(target, case: str) -> None:
    shape, slope = PRELU[case]
    sess = target.check(single_node_model("PRelu", shape, {"slope": slope}), {"x": randn(*shape)})
    assert ops_of(sess) == ["PRelu"]


def test_prelu_slope_must_broadcast_to_the_input() -> None:
    with pytest.raises(UnsupportedModelError, match=r"PRelu slope of shape \(2, 3, 1, 1\) does not broadcast"):
        edgesdk.Session(single_node_model("PRelu", (1, 3, 4, 4), {"slope": np.ones((2, 3, 1, 1), np.float32)}))


# -- fusions of exporters' formulas -----------------------------------------------------------------
def _exported(module, shape) -> onnx.ModelProto:
    torch = pytest.importorskip("torch")
    return torch_export(module, torch.randn(*shape))


def _torch_modules() -> dict:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class XSigmoid(nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x)

    class SigmoidX(nn.Module):
        def forward(self, x):
            return torch.sigmoid(x) * x

    class NewGelu(nn.Module):  # Hugging Face's GPT-2 GELU: Pow(x, 3), (0.5 * x) * (...)
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class ErfGeluReordered(nn.Module):  # x * 0.7071 instead of x / sqrt 2, (x * 0.5) * (...)
        def forward(self, x):
            return x * 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))

    class ConvGelu(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.act = nn.Conv2d(3, 6, 3, padding=1), nn.GELU()

        def forward(self, x):
            return self.act(self.conv(x))

    return {"GELU": (nn.GELU(), ["Gelu"]), "GELU-tanh": (nn.GELU(approximate="tanh"), ["Gelu"]),
            "SiLU": (nn.SiLU(), ["Swish"]), "Mish": (nn.Mish(), ["Mish"]), "x*sigmoid(x)": (XSigmoid(), ["Swish"]),
            "sigmoid(x)*x": (SigmoidX(), ["Swish"]), "NewGELU": (NewGelu(), ["Gelu"]),
            "erf-GELU-reordered": (ErfGeluReordered(), ["Gelu"]), "Conv+GELU": (ConvGelu(), ["Conv+Gelu"])}


TORCH_CASES = ["GELU", "GELU-tanh", "SiLU", "Mish", "x*sigmoid(x)", "sigmoid(x)*x", "NewGELU", "erf-GELU-reordered",
               "Conv+GELU"]


@pytest.mark.parametrize("case", TORCH_CASES)
def test_torch_exports_import_fused(target, case: str) -> None:
    """torch's legacy exporter at opset 17 writes these as formulas; they import as one node."""
    module, want_ops = _torch_modules()[case]
    shape = (1, 3, 6, 7)
    model = _exported(module.eval(), shape)
    sess = target.check(model, {model.graph.input[0].name: randn(*shape)})
    assert ops_of(sess) == want_ops
    if case == "GELU-tanh":
        assert str(sess.graph.nodes[0].attrs["activation"]) == "Gelu(tanh)"


def _gelu_erf_nodes(sqrt2: float = math.sqrt(2.0), one: float = 1.0, half: float = 0.5):
    nodes = [oh.make_node("Div", ["x", "sqrt2"], ["d"]), oh.make_node("Erf", ["d"], ["e"]),
             oh.make_node("Add", ["e", "one"], ["a"]), oh.make_node("Mul", ["x", "a"], ["m"]),
             oh.make_node("Mul", ["m", "half"], ["y"])]
    inits = {"sqrt2": np.float32(sqrt2), "one": np.float32(one), "half": np.float32(half)}
    return nodes, inits


def _gelu_tanh_nodes(outer: str = "(x*a)*0.5"):
    nodes = [oh.make_node("Mul", ["x", "x"], ["sq"]), oh.make_node("Mul", ["sq", "x"], ["cube"]),
             oh.make_node("Mul", ["cube", "k"], ["kc"]), oh.make_node("Add", ["kc", "x"], ["p"]),
             oh.make_node("Mul", ["p", "s"], ["u"]), oh.make_node("Tanh", ["u"], ["t"]),
             oh.make_node("Add", ["one", "t"], ["a"])]
    if outer == "(x*a)*0.5":
        nodes += [oh.make_node("Mul", ["a", "x"], ["m"]), oh.make_node("Mul", ["half", "m"], ["y"])]
    else:  # x * (a * 0.5)
        nodes += [oh.make_node("Mul", ["a", "half"], ["m"]), oh.make_node("Mul", ["x", "m"], ["y"])]
    inits = {"k": np.float32(0.044715), "s": np.float32(math.sqrt(2 / math.pi)), "one": np.float32(1.0),
             "half": np.float32(0.5)}
    return nodes, inits


def test_gelu_formula_groupings_fuse(target) -> None:
    nodes, inits = _gelu_tanh_nodes("x*(a*0.5)")
    sess = target.check(model_of(nodes, {"x": (2, 3, 5)}, inits), {"x": randn(2, 3, 5)})
    assert ops_of(sess) == ["Gelu"] and str(sess.graph.nodes[0].attrs["activation"]) == "Gelu(tanh)"
    nodes, inits = _gelu_erf_nodes()
    sess = target.check(model_of(nodes, {"x": (2, 3, 5)}, inits), {"x": randn(2, 3, 5)})
    assert ops_of(sess) == ["Gelu"]


UNFUSED = {  # id: (nodes, initializers, extra graph outputs) that must stay as they are
    "gelu-erf-output-used": (*_gelu_erf_nodes(), ["e"]),
    "gelu-sqrt2-differs": (*_gelu_erf_nodes(sqrt2=1.5), []),
    "gelu-one-differs": (*_gelu_erf_nodes(one=1.1), []),
    "gelu-half-differs": (*_gelu_erf_nodes(half=0.6), []),
    "gelu-tanh-cube-used": (*_gelu_tanh_nodes(), ["cube"]),
    "silu-sigmoid-used": ([oh.make_node("Sigmoid", ["x"], ["s"]), oh.make_node("Mul", ["x", "s"], ["y"])], {}, ["s"]),
    "silu-other-operand": ([oh.make_node("Sigmoid", ["x"], ["s"]), oh.make_node("Mul", ["s", "s"], ["y"])], {}, []),
    "hardswish-wrong-alpha": ([oh.make_node("HardSigmoid", ["x"], ["s"], alpha=0.2, beta=0.5),
                               oh.make_node("Mul", ["x", "s"], ["y"])], {}, []),
    "mish-softplus-used": ([oh.make_node("Softplus", ["x"], ["sp"]), oh.make_node("Tanh", ["sp"], ["t"]),
                            oh.make_node("Mul", ["x", "t"], ["y"])], {}, ["sp"]),
}


@pytest.mark.parametrize("case", UNFUSED)
def test_patterns_with_a_difference_stay_unfused(case: str) -> None:
    nodes, inits, extra = UNFUSED[case]
    model = model_of(nodes, {"x": (2, 3, 5)}, inits, outputs=("y", *extra))
    sess = edgesdk.Session(model, backend="reference")
    assert [n.op for n in sess.graph.nodes] == [n.op_type for n in nodes]
    x = randn(2, 3, 5)
    from conftest import ort_run
    for got, want in zip(sess.run(None, {"x": x}), ort_run(model, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_hard_sigmoid_gate_fuses_into_hardswish(target) -> None:
    nodes = [oh.make_node("HardSigmoid", ["x"], ["s"], alpha=1.0 / 6.0, beta=0.5), oh.make_node("Mul", ["s", "x"], ["y"])]
    sess = target.check(model_of(nodes, {"x": (2, 3, 5)}, {}), {"x": randn(2, 3, 5, scale=4.0)})
    assert ops_of(sess) == ["HardSwish"]


def test_silu_on_a_conv_output_fuses_into_the_conv(target) -> None:
    w = (R.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Sigmoid", ["c"], ["s"]),
             oh.make_node("Mul", ["c", "s"], ["y"])]
    sess = target.check(model_of(nodes, {"x": (1, 3, 5, 6)}, {"w": w}), {"x": randn(1, 3, 5, 6)})
    assert ops_of(sess) == ["Conv+Silu"]


def test_swish_with_another_slope_is_not_fused() -> None:
    w = (R.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"]), oh.make_node("Swish", ["c"], ["y"], alpha=2.0)]
    sess = edgesdk.Session(model_of(nodes, {"x": (1, 3, 5, 6)}, {"w": w}, opset=24), backend="cpu")
    assert ops_of(sess) == ["Conv", "Swish"] and not sess._impl.fallback_reasons


# -- what the rest of the SDK does with the new kinds -------------------------------------------------
def _conv_then(kind: str, attrs: dict, opset: int) -> onnx.ModelProto:
    w = (R.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), oh.make_node(kind, ["c"], ["y"], **attrs)]
    return model_of(nodes, {"x": (1, 3, 5, 6)}, {"w": w}, opset=opset)


EXPORTED = {"Gelu": ("Gelu", {}, 20), "Gelu(tanh)": ("Gelu", {"approximate": "tanh"}, 20), "Mish": ("Mish", {}, 18),
            "Silu": ("Swish", {}, 24), "Swish(0.5)": ("Swish", {"alpha": 0.5}, 24), "Erf": ("Erf", {}, 17),
            "Softplus": ("Softplus", {}, 17)}


@pytest.mark.parametrize("case", EXPORTED)
def test_export_writes_opset_17_formulas_that_import_fused_again(case: str) -> None:
    """to_onnx writes Gelu, Mish and Swish (ONNX ops of opsets 18-24) as the opset-17 formulas;
    ONNX Runtime computes what edgesdk computes, and the importer fuses them back."""
    from conftest import ort_run

    from edgesdk.export import to_onnx
    kind, attrs, opset = EXPORTED[case]
    sess = edgesdk.Session(_conv_then(kind, attrs, opset), backend="reference")
    exported = to_onnx(sess.graph)
    onnx.checker.check_model(exported, full_check=True)
    x = randn(1, 3, 5, 6)
    np.testing.assert_allclose(ort_run(exported, {"x": x})[0], sess.run({"x": x})["y"], rtol=1e-5, atol=1e-6)
    again = edgesdk.Session(exported, backend="reference")
    # x * sigmoid(0.5 x) stays three nodes: opencl runs those natively, a Swish(0.5) it could not
    want = ["Conv", "Mul", "Sigmoid", "Mul"] if case == "Swish(0.5)" else ops_of(sess)
    assert ops_of(again) == want, [n.op_type for n in exported.graph.node]


def test_packages_keep_the_new_activations(tmp_path) -> None:
    from edgesdk.package.writer import save_package
    model = model_of([oh.make_node("Conv", ["x", "w"], ["c"]), oh.make_node("Gelu", ["c"], ["g"], approximate="tanh"),
                      oh.make_node("Swish", ["g"], ["s"], alpha=0.5), oh.make_node("PRelu", ["s", "slope"], ["p"]),
                      oh.make_node("Pow", ["p", "e"], ["y"])],
                     {"x": (1, 3, 5, 6)}, {"w": randn(4, 3, 1, 1), "slope": randn(4, 1, 1), "e": np.float32(2.0)}, opset=24)
    sess = edgesdk.Session(model, backend="reference")
    save_package(sess.graph, tmp_path / "m.edgepkg")
    loaded = edgesdk.Session(tmp_path / "m.edgepkg", backend="cpu")
    assert ops_of(loaded) == ["Conv+Gelu(tanh)", "Swish", "PRelu", "Pow"]
    x = randn(1, 3, 5, 6)
    np.testing.assert_allclose(loaded.run({"x": x})["y"], sess.run({"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_fine_tuning_module_runs_the_new_ops() -> None:
    """The torch bridge (fine-tuning) lowers Pow, PRelu and the fused and stand-alone kinds."""
    torch = pytest.importorskip("torch")
    from edgesdk.compress.torch_bridge import GraphModule
    model = model_of([oh.make_node("Conv", ["x", "w"], ["c"]), oh.make_node("Mish", ["c"], ["m"]),
                      oh.make_node("PRelu", ["m", "slope"], ["p"]), oh.make_node("Pow", ["p", "e"], ["q"]),
                      oh.make_node("Gelu", ["q"], ["y"])],
                     {"x": (2, 3, 5, 6)}, {"w": randn(4, 3, 3, 3, scale=0.3), "slope": randn(4, 1, 1),
                                           "e": np.float32(2.0)}, opset=20)
    sess = edgesdk.Session(model, backend="reference")
    x = randn(2, 3, 5, 6)
    got = GraphModule(sess.graph)(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, sess.run({"x": x})["y"], rtol=1e-4, atol=1e-5)
