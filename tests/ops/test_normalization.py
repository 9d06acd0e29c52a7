"""The normalization family (``edgesdk/ops/normalization.py``) on every backend: LayerNormalization,
InstanceNormalization, BatchNormalization (stand-alone, unfolded), LRN, Softmax and LogSoftmax on
any axis (opset >= 13 one axis, opset < 13 the input coerced to 2-D), each also on a Conv's
output (NHWC on cpu), what the importer refuses, torch exports, and the pass fusing the LayerNorm
arithmetic of torch's legacy exporter into one node."""
from __future__ import annotations


import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from edgesdk.backends import available_backends
from edgesdk.errors import UnsupportedModelError
from edgesdk.graph import Graph
from edgesdk.passes import fuse_layer_norm
from edgesdk.runtime.activations import Activation
from conftest import ort_run
from onnx_builders import graph_model, single_node_model
from onnx_node_cases import case_names, load_case
from ops.op_tester import provide_oracle, torch_export

R = np.random.default_rng(17)


def randn(*shape: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return (R.standard_normal(shape) * scale + shift).astype(np.float32)


def ops_of(sess: edgesdk.Session) -> list[str]:
    return [n.op for n in sess.graph.nodes]


# -- LayerNormalization ----------------------------------------------------------------------------
LAYER_NORM_CASES = {  # x shape, axis (None: default -1), scale shape, bias shape (None: omitted), epsilon
    "last_axis": ((2, 5, 16), None, (16,), (16,), None),
    "no_bias": ((3, 24), -1, (24,), None, None),
    "two_trailing_axes": ((2, 3, 4, 5), -2, (4, 5), (4, 5), 1e-3),
    "from_axis_1": ((2, 3, 4, 5), 1, (3, 4, 5), (3, 4, 5), None),
    "all_axes": ((6, 7), 0, (6, 7), (6, 7), None),
    "broadcast_scale": ((2, 4, 6), 1, (6,), (4, 1), None),  # ONNX lets scale/bias broadcast
    "rank_1": ((33,), 0, (33,), (33,), None),
    "long_rows": ((3, 700), -1, (700,), (700,), 1e-6),  # several elements per work-item
}


@pytest.mark.parametrize("case", LAYER_NORM_CASES)
def test_layer_norm(target, case: str) -> None:
    shape, axis, scale_shape, bias_shape, eps = LAYER_NORM_CASES[case]
    constants = {"scale": randn(*scale_shape, shift=1.0)}
    if bias_shape is not None:
        constants["bias"] = randn(*bias_shape)
    attrs = {k: v for k, v in (("axis", axis), ("epsilon", eps)) if v is not None}
    model = single_node_model("LayerNormalization", shape, constants, **attrs)
    target.check(model, {"x": randn(*shape, scale=3.0, shift=2.0)})


def test_layer_norm_unused_statistics_outputs_are_dropped(target) -> None:
    model = single_node_model("LayerNormalization", (4, 10), {"scale": randn(10)}, n_outputs=3, axis=1)
    del model.graph.output[1:]  # Mean and InvStdDev named, read by nobody
    sess = target.check(model, {"x": randn(4, 10)})
    assert ops_of(sess) == ["LayerNormalization"] and len(sess.graph.nodes[0].outputs) == 1


LAYER_NORM_NODE_CASES = [name for name in case_names() if name.startswith("test_layer_normalization_")]


@pytest.mark.parametrize("name", LAYER_NORM_NODE_CASES)
def test_onnx_layer_norm_node_cases_for_y(target, name: str) -> None:
    """ONNX's own cases return Mean and InvStdDev too (refused there): here Y alone, every axis."""
    case = load_case(name)
    del case.model.graph.output[1:]
    target.check(case.model, case.feeds)


def test_layer_norm_statistics_outputs_in_use_are_refused() -> None:
    model = single_node_model("LayerNormalization", (4, 10), {"scale": randn(10)}, n_outputs=3)
    words = r"Mean and InvStdDev outputs are not supported \(read: 'y1', 'y2'\)"
    with pytest.raises(UnsupportedModelError, match=words) as exc:
        edgesdk.Session(model, backend="reference")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("problem,model,words", [
    ("stash_type 0", single_node_model("LayerNormalization", (2, 8), {"scale": np.ones(8, np.float32)}, stash_type=0),
     "stash_type 0 is not supported"),
    ("run-time scale", single_node_model("LayerNormalization", (2, 8), extra_inputs=["x"]),
     "scale must be constant"),
    ("scale of another shape", single_node_model("LayerNormalization", (2, 8), {"scale": np.ones(3, np.float32)}),
     r"scale of shape \[3\] \(float32\) does not broadcast to the normalised shape \[8\]"),
    ("axis out of range", single_node_model("LayerNormalization", (2, 8), {"scale": np.ones(8, np.float32)}, axis=2),
     "axis 2 is out of range"),
    ("instance norm of a rank-2 input", single_node_model(
        "InstanceNormalization", (2, 8), {"s": np.ones(8, np.float32), "b": np.ones(8, np.float32)}),
     r"InstanceNormalization needs an \(N, C, spatial...\) input"),
    ("instance norm scale per element", single_node_model(
        "InstanceNormalization", (1, 2, 3), {"s": np.ones((2, 3), np.float32), "b": np.ones(2, np.float32)}),
     r"scale must hold one float per channel, shape \[2\], got of shape \[2, 3\]"),
    ("softmax axis", single_node_model("LogSoftmax", (2, 8), axis=-3), "LogSoftmax axis -3 is out of range"),
])
def test_refused_in_one_line(problem: str, model, words: str) -> None:
    with pytest.raises(UnsupportedModelError, match=words) as exc:
        edgesdk.Session(model, backend="reference")
    assert "\n" not in str(exc.value), problem


def test_malformed_graphs_are_refused_by_the_shape_rules() -> None:
    """What a package or a hand-built graph could hold that the importer never builds."""
    def graph(op: str, x: tuple[int, ...], constants: list[tuple[int, ...]], **attrs) -> Graph:
        g = Graph()
        g.add_input("x", x)
        names = [g.add_constant(f"c{i}", np.ones(s, np.float32)).name for i, s in enumerate(constants)]
        g.add_node(op, ["x", *names], ["y"], **attrs)
        g.outputs.append("y")
        return g
    bad = [graph("LayerNormalization", (2, 8), [(4,)], axis=1, epsilon=1e-5),
           graph("LayerNormalization", (2, 8), [(8,)], axis=2, epsilon=1e-5),
           graph("InstanceNormalization", (2, 3, 4), [(3,), (4,)], epsilon=1e-5),
           graph("Softmax", (2, 3), [], axis=2, coerce_2d=False)]
    for g in bad:
        with pytest.raises(UnsupportedModelError):
            edgesdk.Session(g, backend="reference")


def test_norms_and_softmaxes_round_trip_through_a_package(tmp_path) -> None:
    """The attributes and the broadcast scale the importer made are what a package stores."""
    from edgesdk.package import save_package
    nodes = [oh.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln"], axis=-2, epsilon=1e-3),
             oh.make_node("InstanceNormalization", ["ln", "c", "c"], ["inn"], epsilon=1e-2),
             oh.make_node("LogSoftmax", ["inn"], ["ls"], axis=1),
             oh.make_node("Softmax", ["ls"], ["y"], axis=0)]
    constants = {"scale": randn(4, 1, shift=1.0), "bias": randn(5), "c": randn(3)}
    graph = oh.make_graph(nodes, "norms", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 4, 5])],
                          [oh.make_empty_tensor_value_info("y")],
                          [onnx.numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    x = randn(2, 3, 4, 5, scale=2.0)
    want = edgesdk.Session(model, backend="reference").run(None, {"x": x})[0]
    save_package(edgesdk.Session(model, backend="reference").graph, tmp_path / "norms.edgepkg")
    for backend in available_backends():
        got = edgesdk.Session(tmp_path / "norms.edgepkg", backend=backend).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)


def test_hand_built_layer_norm_with_an_omitted_bias_and_a_nan_epsilon() -> None:
    """An omitted bias may be written as ""; a NaN epsilon (every output NaN) cannot be an OpenCL
    -D constant, so that node runs on the reference kernel there, with its reason."""
    g = Graph()
    g.add_input("x", (3, 8))
    g.add_constant("scale", randn(8))
    g.add_node("LayerNormalization", ["x", "scale", ""], ["y"], name="ln", axis=1, epsilon=1e-5)
    g.add_node("LayerNormalization", ["x", "scale"], ["z"], name="nan_eps", axis=1, epsilon=float("nan"))
    g.outputs += ["y", "z"]
    x = randn(3, 8, scale=2.0)
    want = layer_norm_of(x, (1,), 1e-5, g.const("scale"))
    for backend in available_backends():
        sess = edgesdk.Session(g, backend=backend)
        y, z = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5, err_msg=backend)
        assert np.isnan(z).all(), backend
        if backend != "reference":
            expected = {"nan_eps": "LayerNormalization with a NaN epsilon"} if backend == "opencl" else {}
            assert sess._impl.fallback_reasons == expected, backend


# -- InstanceNormalization -------------------------------------------------------------------------
INSTANCE_NORM_CASES = {
    "rank_3": ((2, 3, 17), 1e-5),
    "rank_4": ((2, 4, 5, 6), 1e-5),
    "rank_5_epsilon": ((1, 3, 2, 3, 4), 1e-2),
    "one_pixel": ((2, 5, 1, 1), 1e-5),  # variance 0: the output is the bias
    "large_spatial": ((1, 2, 40, 30), 1e-5),
}


@pytest.mark.parametrize("case", INSTANCE_NORM_CASES)
def test_instance_norm(target, case: str) -> None:
    shape, eps = INSTANCE_NORM_CASES[case]
    c = shape[1]
    model = single_node_model("InstanceNormalization", shape, {"scale": randn(c, shift=1.0), "bias": randn(c)},
                              epsilon=eps)
    target.check(model, {"x": randn(*shape, scale=2.0, shift=-1.0)})


# -- BatchNormalization and LRN ----------------------------------------------------------------------
def batchnorm_constants(c: int) -> dict[str, np.ndarray]:
    return {"s": randn(c), "b": randn(c), "m": randn(c), "v": np.abs(randn(c)) + np.float32(0.5)}


def test_batchnorm(target) -> None:
    """A BatchNormalization no Conv or Gemm precedes (nothing to fold it into)."""
    model = single_node_model("BatchNormalization", (2, 5, 4, 4), batchnorm_constants(5), epsilon=1e-3)
    target.check(model, {"x": randn(2, 5, 4, 4)})


LRN_ON_CPU = "no native cpu LRN: it runs the reference kernel (README's operator table)"
LRN_FALLBACK = {"cpu/fp32:LRN": LRN_ON_CPU, "cpu/fp16:LRN": LRN_ON_CPU}
LRN_CASES = {  # id: (x shape, attributes)
    "size3": ((2, 9, 5, 4), dict(size=3, alpha=1e-2, beta=0.75, bias=1.5)),
    "size4_even": ((2, 9, 5, 4), dict(size=4, alpha=1e-2, beta=0.75, bias=1.5)),
    "size5": ((2, 9, 5, 4), dict(size=5, alpha=1e-2, beta=0.75, bias=1.5)),
    "size5_default_attributes": ((1, 7, 5, 5), dict(size=5)),
}


def lrn_of(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """The ONNX definition in float64: the squares of channels c - floor((size - 1) / 2) to
    c + ceil((size - 1) / 2), clipped to the input's."""
    x64, c = x.astype(np.float64), x.shape[1]
    window = np.zeros_like(x64)
    for i in range(c):
        window[:, i] = np.square(x64[:, max(0, i - (size - 1) // 2): min(c, i + size // 2 + 1)]).sum(axis=1)
    return (x64 / (bias + alpha / size * window) ** beta).astype(np.float32)


@pytest.mark.parametrize("case", LRN_CASES)
def test_lrn(target, case: str) -> None:
    shape, attrs = LRN_CASES[case]
    model, feeds = single_node_model("LRN", shape, **attrs), {"x": randn(*shape)}
    if attrs["size"] % 2 == 0:  # ONNX Runtime takes odd sizes only: the fp32 oracle is numpy's
        provide_oracle(model, feeds, [lrn_of(feeds["x"], **attrs)])
    target.check(model, feeds, may_fall_back=LRN_FALLBACK)


@pytest.mark.parametrize("op", ["BatchNormalization", "LRN"])
def test_batchnorm_and_lrn_of_a_channels_last_tensor(target, op: str) -> None:
    """The Conv's output is a graph output too, so the BatchNormalization does not fold into it."""
    constants = {"w": randn(6, 3, 3, 3, scale=0.3)}
    if op == "BatchNormalization":
        constants.update(batchnorm_constants(6))
    attrs = dict(epsilon=1e-5) if op == "BatchNormalization" else dict(size=3, alpha=1e-3, beta=0.75, bias=2.0)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node(op, ["c", *list(constants)[1:]], ["y"], **attrs)]
    model = graph_model(nodes, {"x": (1, 3, 5, 7)}, ["c", "y"], constants)
    sess = target.check(model, {"x": randn(1, 3, 5, 7)}, may_fall_back=LRN_FALLBACK)
    assert [n.op for n in sess.graph.nodes] == ["Conv", op]


# -- Softmax and LogSoftmax ------------------------------------------------------------------------
SOFTMAX_CASES = {  # shape, opset, axis (None: the opset's default)
    "last_axis": ((3, 10), 13, None),
    "last_axis_long": ((2, 1000), 13, -1),
    "channels": ((2, 5, 4, 3), 13, 1),
    "middle_axis": ((2, 3, 4, 5), 13, 2),
    "first_axis": ((4, 3, 2), 13, 0),
    "few_columns_long_axis": ((1, 300, 3), 13, 1),
    "many_columns": ((1, 6, 40, 40), 13, 1),
    "opset11_default": ((2, 3, 4), 11, None),  # coerced to (2, 12)
    "opset11_axis_2": ((2, 3, 4, 5), 11, 2),
    "opset11_axis_0": ((3, 4, 5), 11, 0),
    "opset11_last_axis": ((2, 3, 7), 11, -1),
    "rank_1": ((9,), 13, 0),
    "axis_of_one": ((3, 1, 4), 13, 1),
}


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("case", SOFTMAX_CASES)
def test_softmax(target, op: str, case: str) -> None:
    shape, opset, axis = SOFTMAX_CASES[case]
    attrs = {} if axis is None else {"axis": axis}
    target.check(single_node_model(op, shape, opset=opset, **attrs), {"x": randn(*shape, scale=4.0)})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_large_and_masked_values(target, op: str) -> None:
    x = randn(3, 4, 9, scale=50.0) + np.float32(1000.0)
    x[:, :, 0] = np.float32(-3.4e38)  # a mask: probability 0 (LogSoftmax: a huge negative number)
    # Half storage cannot hold these inputs (steps of 0.5 near 1000, -3.4e38 overflows), and the
    # fp16 reference rounds the feeds where the cpu backend keeps them float32.
    skip = {"cpu/fp16": "inputs beyond half's range", "opencl/fp16": "inputs beyond half's range"}
    for axis in (1, 2):
        target.check(single_node_model(op, x.shape, axis=axis), {"x": x}, skip=skip)


def assert_same_specials(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """NaN and infinities at the same places, the finite values close."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN")
    infinite = np.isinf(want)
    np.testing.assert_array_equal(got[infinite], want[infinite], err_msg=f"{what}: infinities")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6, err_msg=what)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_nan_and_infinities_as_onnx_runtime(op: str, axis: int) -> None:
    """A -inf entry gives 0 (LogSoftmax -inf); a NaN or +inf, or only -inf, makes its row NaN."""
    x = randn(2, 6, 7, scale=3.0)
    rows = np.moveaxis(x, axis, -1)  # a view: rows[i, j] is one softmax row of x
    rows[0, 1, 2] = np.nan
    rows[1, 0, :] = -np.inf
    rows[1, 2, 3] = np.inf
    rows[1, 4, ::2] = -np.inf
    model = single_node_model(op, x.shape, axis=axis)
    (want,) = ort_run(model, {"x": x})
    assert np.isnan(np.moveaxis(want, axis, -1)[[0, 1, 1], [1, 0, 2]]).all()
    for backend in available_backends():
        (got,) = edgesdk.Session(model, backend=backend).run(None, {"x": x})
        assert_same_specials(got, want, f"{backend} {op} axis {axis}")


def _conv_then(op: str, constants: dict[str, np.ndarray] | None = None, **attrs) -> onnx.ModelProto:
    """Conv (the cpu backend stores its output NHWC, 6 channels of 5 x 7) followed by ``op``."""
    constants = {"w": randn(6, 3, 3, 3, scale=0.3), **(constants or {})}
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node(op, ["c", *list(constants)[1:]], ["y"], **attrs)]
    graph = oh.make_graph(nodes, "conv_then", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 5, 7])],
                          [oh.make_empty_tensor_value_info("y")],
                          [onnx.numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2, 3])
def test_softmax_of_a_channels_last_tensor(target, op: str, axis: int) -> None:
    target.check(_conv_then(op, axis=axis), {"x": randn(1, 3, 5, 7)})


def test_opset11_softmax_of_a_channels_last_tensor(target) -> None:
    """Opset 11's Softmax coerces the input to 2-D at the axis: (1, 6 * 5 * 7) rows at axis 1
    here would be one row; at axis 2, 6 rows of 5 * 7 read across the NHWC storage."""
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Softmax", ["c"], ["y"], axis=2)]
    model = graph_model(nodes, {"x": (1, 3, 5, 7)}, ["y"], {"w": randn(6, 3, 3, 3, scale=0.3)}, opset=11)
    target.check(model, {"x": randn(1, 3, 5, 7)})


@pytest.mark.parametrize("op,constants,attrs", [
    ("LayerNormalization", {"scale": randn(7, shift=1.0), "bias": randn(7)}, {}),
    ("LayerNormalization", {"scale": randn(6, 5, 7, shift=1.0)}, {"axis": 1}),
    ("InstanceNormalization", {"scale": randn(6, shift=1.0), "bias": randn(6)}, {}),
], ids=["layer_norm_last_axis", "layer_norm_axis_1", "instance_norm"])
def test_norms_of_a_channels_last_tensor(target, op: str, constants: dict, attrs: dict) -> None:
    target.check(_conv_then(op, constants, **attrs), {"x": randn(1, 3, 5, 7)})


def test_softmax_after_conv_reads_the_channels_last_storage() -> None:
    """A softmax over one axis strides over the NHWC storage: no layout conversion step."""
    sess = edgesdk.Session(_conv_then("LogSoftmax", axis=2), backend="cpu")
    steps = sess._impl.steps
    assert [s.placement for s in steps if s.op == "LogSoftmax"] == ["native"]
    assert [s.note for s in steps if "->" in s.op] == ["layout of x"]  # the Conv's input only


# -- torch exports ----------------------------------------------------------------------------------
try:
    import torch
except ImportError:  # the torch tests skip; everything above still runs
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")




def norms_module():
    """GroupNorm (exported as Reshape, InstanceNormalization, Reshape, Mul, Add), InstanceNorm2d,
    a LayerNorm over the last axis and softmaxes."""
    class Norms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.group = torch.nn.GroupNorm(2, 4)
            self.instance = torch.nn.InstanceNorm2d(4, affine=True)
            self.layer = torch.nn.LayerNorm(6)
            for p in self.parameters():
                torch.nn.init.uniform_(p, 0.5, 1.5)

        def forward(self, x):
            y = self.layer(self.instance(self.group(x)))
            return torch.log_softmax(y, dim=1) + torch.softmax(y, dim=-1)
    return Norms()


@pytest.fixture(scope="module")
def norms_model() -> onnx.ModelProto:
    return torch_export(norms_module(), torch.randn(2, 4, 5, 6))


@pytest.fixture(scope="module")
def legacy_layer_norm_model() -> onnx.ModelProto:
    """Opset 14: torch writes ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add."""
    module = torch.nn.LayerNorm(12)
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
        module.bias.uniform_(-1, 1)
    return torch_export(module, torch.randn(2, 3, 12), opset=14)


@needs_torch
def test_torch_norms_and_softmaxes(target, norms_model) -> None:
    model = norms_model
    sess = target.check(model, {model.graph.input[0].name: randn(2, 4, 5, 6, scale=3.0)})
    assert {"InstanceNormalization", "LayerNormalization", "Softmax", "LogSoftmax"} <= set(ops_of(sess))


@needs_torch
def test_torch_legacy_layer_norm_fuses_into_one_node(target, legacy_layer_norm_model) -> None:
    model = legacy_layer_norm_model
    assert "LayerNormalization" not in {n.op_type for n in model.graph.node}
    sess = target.check(model, {model.graph.input[0].name: randn(2, 3, 12, scale=2.0, shift=1.0)})
    assert ops_of(sess) == ["LayerNormalization"]


@needs_torch
def test_torch_legacy_layer_norm_over_the_spatial_axes_fuses(target) -> None:
    """LayerNorm([H, W]) of (N, C, H, W): its means import as GlobalAveragePool."""
    module = torch.nn.LayerNorm([5, 7], elementwise_affine=False)
    model = torch_export(module, torch.randn(1, 3, 5, 7), opset=14)
    sess = target.check(model, {model.graph.input[0].name: randn(1, 3, 5, 7, scale=2.0)})
    assert ops_of(sess) == ["LayerNormalization"] and sess.graph.nodes[0].attrs["axis"] == 2


@needs_torch
def test_torch_lowerings_match_the_reference(norms_model) -> None:
    """The fine-tuning bridge runs each node's torch lowering: same numbers as the reference."""
    from edgesdk.compress.torch_bridge import GraphModule
    for opset11 in (False, True):
        graph = edgesdk.Session(norms_model, backend="reference").graph
        if opset11:
            for node in graph.nodes:
                if node.op in ("Softmax", "LogSoftmax") and node.attrs["axis"] == 1:
                    node.attrs["coerce_2d"] = True
        x = randn(2, 4, 5, 6, scale=3.0)
        want = edgesdk.Session(graph, backend="reference").run(None, {graph.inputs[0]: x})[0]
        with torch.no_grad():
            got = GraphModule(graph)(torch.from_numpy(x))
        got = got[0] if isinstance(got, (tuple, list)) else got
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


# -- the LayerNorm fusion ---------------------------------------------------------------------------
def unfused_layer_norm(shape: tuple[int, ...], axes: tuple[int, ...] = (-1,), *, square: str = "Pow",
                       divide: str = "Div", gamma: np.ndarray | None = None, beta: np.ndarray | None = None,
                       eps: np.ndarray | str = np.float32(1e-5), extra_outputs: tuple[str, ...] = ()) -> Graph:
    """The arithmetic torch's legacy exporter writes for LayerNorm, as the IR the importer makes of
    it (ReduceMean axes normalised, Sqrt and Reciprocal unary nodes, Pow with a constant exponent).
    ``eps`` may name a graph input instead (not constant); ``extra_outputs`` are intermediate
    tensors also returned by the graph."""
    rank = len(shape)
    axes = tuple(sorted(a % rank for a in axes))
    reduced = tuple(1 if i in axes else d for i, d in enumerate(shape))
    g = Graph("unfused_layer_norm")
    g.add_input("x", shape)
    if isinstance(eps, str):
        g.add_input(eps, ())
    else:
        g.add_constant("eps", eps)
    g.add_constant("two", np.float32(2.0))

    def node(op: str, inputs: list[str], out: str, out_shape: tuple[int, ...], **attrs) -> str:
        g.add_node(op, inputs, [out], name=f"/ln/{out}", **attrs)
        g.add_tensor(out, out_shape, np.float32)
        return out

    mean = node("ReduceMean", ["x"], "mean", reduced, axes=axes, keepdims=True)
    d = node("Sub", ["x", mean], "d", shape)
    sq = node("Pow", [d, "two"], "sq", shape) if square == "Pow" else node("Mul", [d, d], "sq", shape)
    var = node("ReduceMean", [sq], "var", reduced, axes=axes, keepdims=True)
    eps_name, eps_shape = (eps, ()) if isinstance(eps, str) else ("eps", np.shape(eps))
    reduced = np.broadcast_shapes(reduced, eps_shape)  # an epsilon per element widens the rest
    ve = node("Add", [var, eps_name], "ve", reduced)
    std = node("Sqrt", [ve], "std", reduced, activation=Activation("Sqrt"))
    if divide == "Div":
        out = node("Div", [d, std], "n", shape)
    else:
        out = node("Mul", [node("Reciprocal", [std], "rstd", reduced, activation=Activation("Reciprocal")), d], "n",
                   shape)
    for op, value, name in (("Mul", gamma, "gamma"), ("Add", beta, "beta")):
        if isinstance(value, str):  # a graph input
            g.add_input(value, shape[-1:])
            out = node(op, [out, value], f"{name}_out", shape)
        elif value is not None:
            g.add_constant(name, value)
            out = node(op, [name, out] if op == "Add" else [out, name], f"{name}_out", shape)
    g.outputs += [out, *extra_outputs]
    return g


def layer_norm_of(x: np.ndarray, axes: tuple[int, ...], eps: float, gamma=None, beta=None) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    y = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return y * (1 if gamma is None else gamma) + (0 if beta is None else beta)


FUSED_CASES = {  # shape, axes, square, divide, gamma shape, beta shape
    "torch": ((2, 3, 8), (-1,), "Pow", "Div", (8,), (8,)),
    "square_by_mul": ((4, 8), (1,), "Mul", "Div", (8,), None),
    "reciprocal_then_mul": ((2, 3, 8), (2,), "Mul", "Reciprocal", (1, 1, 8), (8,)),
    "no_affine": ((5, 6), (-1,), "Pow", "Div", None, None),
    "two_trailing_axes": ((2, 3, 4, 5), (2, 3), "Pow", "Div", (4, 5), (1, 5)),
    "scalar_gamma": ((3, 7), (-1,), "Pow", "Div", (), None),
}


@pytest.mark.parametrize("case", FUSED_CASES)
def test_layer_norm_arithmetic_fuses_into_one_node(case: str) -> None:
    shape, axes, square, divide, gamma_shape, beta_shape = FUSED_CASES[case]
    gamma = None if gamma_shape is None else randn(*gamma_shape, shift=1.0)
    beta = None if beta_shape is None else randn(*beta_shape)
    g = unfused_layer_norm(shape, axes, square=square, divide=divide, gamma=gamma, beta=beta)
    assert fuse_layer_norm(g) == 1
    (node,) = g.nodes
    first = min(a % len(shape) for a in axes)
    assert node.op == "LayerNormalization" and node.attrs == {"axis": first, "epsilon": float(np.float32(1e-5))}
    assert node.name == "/ln/LayerNormalization" and node.outputs == g.outputs
    x = randn(*shape, scale=2.0, shift=1.0)
    want = layer_norm_of(x, tuple(range(first, len(shape))), 1e-5, gamma, beta)
    for backend in available_backends():
        got = edgesdk.Session(g, backend=backend).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=backend)


def test_tf_style_layer_norm_arithmetic_fuses_into_one_node(target) -> None:
    """Mul(d, d) for the square, Sqrt then Reciprocal (TF's rsqrt) and a multiply, opset 13."""
    c = 10
    const = {"eps": np.float32(1e-3), "gamma": randn(c, shift=1.0), "beta": randn(1, c)}
    nodes = [oh.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
             oh.make_node("Sub", ["x", "mean"], ["d"]),
             oh.make_node("Mul", ["d", "d"], ["sq"]),
             oh.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
             oh.make_node("Add", ["var", "eps"], ["ve"]),
             oh.make_node("Sqrt", ["ve"], ["std"]),
             oh.make_node("Reciprocal", ["std"], ["rstd"]),
             oh.make_node("Mul", ["rstd", "d"], ["n"]),
             oh.make_node("Mul", ["gamma", "n"], ["scaled"]),
             oh.make_node("Add", ["scaled", "beta"], ["y"])]
    graph = oh.make_graph(nodes, "tf_layer_norm", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4, c])],
                          [oh.make_empty_tensor_value_info("y")],
                          [onnx.numpy_helper.from_array(v, k) for k, v in const.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 8
    sess = target.check(model, {"x": randn(3, 4, c, scale=3.0, shift=-2.0)})
    assert ops_of(sess) == ["LayerNormalization"] and sess.graph.nodes[0].attrs["epsilon"] == float(np.float32(1e-3))


def node_ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


UNFUSED_OPS = ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div"]


@pytest.mark.parametrize("why,graph", [
    ("the deviations are also an output", lambda: unfused_layer_norm((2, 8), extra_outputs=("d",))),
    ("the mean is also an output", lambda: unfused_layer_norm((2, 8), extra_outputs=("mean",))),
    ("the variance is also an output", lambda: unfused_layer_norm((2, 8), extra_outputs=("var",))),
    ("not the trailing axes", lambda: unfused_layer_norm((2, 8, 3), (1,))),
    ("epsilon computed at run time", lambda: unfused_layer_norm((2, 8), eps="eps_in")),
    ("epsilon per element", lambda: unfused_layer_norm((2, 8), eps=np.full((1, 8), 1e-5, np.float32))),
])
def test_near_misses_stay_unfused(why: str, graph) -> None:
    g = graph()
    before = [(n.op, list(n.inputs), list(n.outputs)) for n in g.nodes]
    assert fuse_layer_norm(g) == 0, why
    assert [(n.op, list(n.inputs), list(n.outputs)) for n in g.nodes] == before, why
    x = randn(*g.tensors["x"].shape, scale=2.0)
    eps = g.const("eps") if "eps" in g.tensors else np.float32(1e-5)
    feeds = {"x": x, **({"eps_in": np.asarray(eps)} if "eps_in" in g.inputs else {})}
    sess = edgesdk.Session(g, backend="cpu")  # the arithmetic still runs as written
    assert "LayerNormalization" not in ops_of(sess), why
    want = layer_norm_of(x, tuple(g.nodes[0].attrs["axes"]), eps)
    np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-5, atol=1e-5, err_msg=why)


def test_a_second_reader_of_an_intermediate_keeps_the_subgraph() -> None:
    g = unfused_layer_norm((2, 8))
    g.add_node("Mul", ["std", "std"], ["std2"])  # the standard deviation is read outside
    g.add_tensor("std2", (2, 1), np.float32)
    g.outputs.append("std2")
    assert fuse_layer_norm(g) == 0 and node_ops(g) == UNFUSED_OPS + ["Mul"]


def test_a_pow_other_than_a_square_keeps_the_subgraph() -> None:
    g = unfused_layer_norm((2, 8))
    g.tensors["two"].data = np.float32(3.0)
    assert fuse_layer_norm(g) == 0 and node_ops(g) == UNFUSED_OPS


def test_run_time_gamma_and_beta_stay_after_the_fused_node() -> None:
    g = unfused_layer_norm((2, 8), gamma="gamma_in", beta="beta_in")
    assert fuse_layer_norm(g) == 1
    assert node_ops(g) == ["LayerNormalization", "Mul", "Add"]
    x, gamma, beta = randn(2, 8), randn(8), randn(8)
    got = edgesdk.Session(g, backend="cpu").run(None, {"x": x, "gamma_in": gamma, "beta_in": beta})[0]
    np.testing.assert_allclose(got, layer_norm_of(x, (1,), 1e-5, gamma, beta), rtol=1e-5, atol=1e-5)


def test_gamma_that_broadcasts_over_rows_is_not_absorbed() -> None:
    g = unfused_layer_norm((2, 3, 8), gamma=randn(3, 1))  # one factor per row: not LayerNorm's scale
    assert fuse_layer_norm(g) == 1
    assert node_ops(g) == ["LayerNormalization", "Mul"]
