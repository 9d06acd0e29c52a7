"""The conv_transpose family (``edgesdk/ops/conv_transpose.py``) on every backend: ConvTranspose
2-D and 1-D with groups (depthwise too), strides, dilations, asymmetric pads, output_padding,
output_shape and auto_pad, with and without bias, a fused activation; what the importer refuses;
packages and compression (whose recipes leave its weights dense); torch exports and the
fine-tuning bridge."""
from __future__ import annotations


import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from conftest import ort_run
from edgesdk.compress import pack_model
from edgesdk.compress.recipe import LayerSettings, Recipe
from edgesdk.errors import UnsupportedModelError
from edgesdk.graph import Graph
from onnx_builders import single_node_model
from ops.op_tester import torch_export

R = np.random.default_rng(41)


def randn(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def conv_transpose_model(x_shape: tuple[int, ...], w_shape: tuple[int, ...], bias: bool = True, opset: int = 17,
                         **attrs) -> onnx.ModelProto:
    constants = {"w": randn(*w_shape)}
    if bias:
        constants["b"] = randn(w_shape[1] * attrs.get("group", 1))
    return single_node_model("ConvTranspose", x_shape, constants, opset=opset, **attrs)


# name: (x shape, weight shape (C_in, C_out / group, k...), bias, attributes)
CASES = {
    "plain_3x3": ((1, 3, 5, 6), (3, 4, 3, 3), True, {}),
    "stride2_pads_output_padding": ((1, 3, 5, 6), (3, 4, 3, 3), False, dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                                                            output_padding=[1, 1])),
    "upsample_2x2_stride2": ((2, 4, 4, 3), (4, 5, 2, 2), True, dict(strides=[2, 2])),
    "groups_dilations_asymmetric_pads": ((2, 4, 4, 3), (4, 3, 2, 3), True, dict(
        strides=[3, 2], dilations=[2, 1], pads=[0, 1, 2, 0], output_padding=[0, 1], group=2)),
    "depthwise_4x4_stride2": ((1, 6, 5, 5), (6, 1, 4, 4), True, dict(strides=[2, 2], pads=[1, 1, 1, 1], group=6)),
    "one_in_three_out_per_group": ((1, 3, 4, 4), (3, 3, 2, 3), False, dict(
        strides=[1, 2], dilations=[2, 1], pads=[0, 1, 1, 0], output_padding=[0, 1], group=3)),
    "pointwise": ((1, 5, 3, 3), (5, 7, 1, 1), True, {}),
    "many_channels": ((1, 33, 3, 4), (33, 17, 4, 4), True, dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "same_upper": ((1, 6, 5, 5), (6, 2, 3, 3), True, dict(strides=[2, 2], group=3, auto_pad="SAME_UPPER")),
    "same_lower": ((1, 6, 5, 5), (6, 2, 3, 3), False, dict(strides=[2, 2], group=3, auto_pad="SAME_LOWER")),
    "valid": ((1, 2, 4, 4), (2, 3, 3, 3), True, dict(strides=[2, 2], auto_pad="VALID")),
    "output_shape_smaller": ((1, 2, 4, 4), (2, 3, 3, 3), True, dict(strides=[2, 2], output_shape=[6, 5])),
    "output_shape_larger": ((1, 2, 4, 4), (2, 3, 3, 3), True, dict(strides=[3, 3], output_shape=[12, 11])),
    "output_shape_same_upper": ((1, 2, 4, 4), (2, 3, 3, 3), False, dict(strides=[2, 2], output_shape=[6, 5],
                                                                        auto_pad="SAME_UPPER")),
    "1d_stride2_output_padding": ((1, 3, 9), (3, 2, 3), True, dict(strides=[2], pads=[1, 1], output_padding=[1])),
    "1d_groups_dilated_output_shape": ((2, 4, 7), (4, 3, 4), False, dict(strides=[3], dilations=[2], group=2,
                                                                         output_shape=[22])),
    "1d_same_upper": ((1, 4, 7), (4, 2, 3), True, dict(strides=[2], auto_pad="SAME_UPPER")),
}


@pytest.mark.parametrize("case", CASES)
def test_conv_transpose(target, case: str) -> None:
    x_shape, w_shape, bias, attrs = CASES[case]
    sess = target.check(conv_transpose_model(x_shape, w_shape, bias, **attrs), {"x": randn(*x_shape)})
    assert [n.op for n in sess.graph.nodes if n.op != "Reshape"] == ["ConvTranspose"]


@pytest.mark.parametrize("activation", ["Relu", "LeakyRelu", "Sigmoid", "Softplus"])
def test_fused_activation(target, activation: str) -> None:
    """An activation after ConvTranspose runs inside it (the kernels' epilogue)."""
    nodes = [oh.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1],
                          output_padding=[1, 1]),
             oh.make_node(activation, ["t"], ["y"])]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 3, 5])],
                          [oh.make_empty_tensor_value_info("y")],
                          [onnx.numpy_helper.from_array(randn(4, 3, 3, 3), "w"),
                           onnx.numpy_helper.from_array(randn(3), "b")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    sess = target.check(model, {"x": randn(1, 4, 3, 5)})
    assert [(n.op, n.attrs["fused_activation"].kind) for n in sess.graph.nodes] == [("ConvTranspose", activation)]


def test_run_time_weights(target) -> None:
    """Weights fed at run time: the reference kernel on cpu and opencl (their kernels pack constant
    weights once), ONNX Runtime's numbers everywhere."""
    model = single_node_model("ConvTranspose", (1, 2, 3, 4), extra_inputs=["w"], strides=[2, 1])
    model.graph.input.append(oh.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [2, 3, 2, 2]))
    why = "weights computed at run time: the native kernels take packed constant weights"
    target.check(model, {"x": randn(1, 2, 3, 4), "w": randn(2, 3, 2, 2)}, may_fall_back={"ConvTranspose": why})


def test_onnx_node_cases(target) -> None:
    """ONNX's own ConvTranspose cases (all but the 3-D one, refused) on every backend."""
    from onnx_node_cases import case_names, load_case
    names = [n for n in case_names() if n.startswith("test_convtranspose") and n != "test_convtranspose_3d"]
    assert len(names) >= 9
    for name in names:
        case = load_case(name)
        target.check(case.model, case.feeds)


# -- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem,model,words", [
    ("3-D", conv_transpose_model((1, 2, 3, 3, 3), (2, 2, 2, 2, 2)), "only 1-D and 2-D ConvTranspose are supported"),
    ("group not dividing", conv_transpose_model((1, 3, 4, 4), (3, 2, 3, 3), group=2),
     "group dividing C_in"),
    ("pads remove everything", conv_transpose_model((1, 2, 2, 2), (2, 2, 2, 2), pads=[2, 2, 2, 2]),
     "pads remove the whole 2x2 output"),
    ("unknown auto_pad", conv_transpose_model((1, 2, 4, 4), (2, 2, 3, 3), auto_pad="SAME"), "unknown auto_pad 'SAME'"),
    ("kernel_shape", conv_transpose_model((1, 2, 4, 4), (2, 2, 3, 3), kernel_shape=[2, 2]),
     r"kernel_shape \[2, 2\] does not match the weights' \[3, 3\]"),
])
def test_refused_in_one_line(problem: str, model, words: str) -> None:
    with pytest.raises(UnsupportedModelError, match=words) as exc:
        edgesdk.Session(model, backend="reference")
    assert "\n" not in str(exc.value), problem


def test_malformed_nodes_are_refused_by_the_shape_rule() -> None:
    """What a package or a hand-built graph could hold that the importer never builds."""
    good = dict(kernel_shape=(3, 3), strides=(2, 2), dilations=(1, 1), pads=(1, 1, 1, 1), output_padding=(1, 1),
                group=1)
    for change, bias_shape in [(dict(group=3), (4,)), (dict(kernel_shape=(2, 2)), (4,)),
                               (dict(pads=(9, 9, 9, 9)), (4,)), ({}, (5,)), (dict(strides=(0, 1)), (4,))]:
        g = Graph()
        g.add_input("x", (1, 2, 4, 4))
        g.add_constant("w", np.ones((2, 4, 3, 3), np.float32))
        g.add_constant("b", np.ones(bias_shape, np.float32))
        g.add_node("ConvTranspose", ["x", "w", "b"], ["y"], **{**good, **change})
        g.outputs.append("y")
        with pytest.raises(UnsupportedModelError):
            edgesdk.Session(g, backend="reference")


@pytest.mark.parametrize("case", CASES)
def test_export_round_trips(case: str) -> None:
    """The exported ConvTranspose (explicit pads and output_padding) computes what the original does."""
    from edgesdk.export import to_onnx
    x_shape, w_shape, bias, attrs = CASES[case]
    model = conv_transpose_model(x_shape, w_shape, bias, **attrs)
    x = randn(*x_shape)
    exported = to_onnx(edgesdk.Session(model, backend="reference").graph)
    onnx.checker.check_model(exported, full_check=True)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(ort_run(exported, {"x": x})[0], want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


# -- packages and compression ---------------------------------------------------------------------
def conv_then_conv_transpose() -> onnx.ModelProto:
    """A small decoder: Conv, ReLU, ConvTranspose 2x, ReLU."""
    nodes = [oh.make_node("Conv", ["x", "wc"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Relu", ["c"], ["r"]),
             oh.make_node("ConvTranspose", ["r", "wt", "bt"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1],
                          output_padding=[1, 1]),
             oh.make_node("Relu", ["t"], ["y"])]
    inits = {"wc": randn(8, 3, 3, 3), "wt": randn(8, 4, 3, 3), "bt": randn(4)}
    graph = oh.make_graph(nodes, "decoder", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 6, 5])],
                          [oh.make_empty_tensor_value_info("y")],
                          [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("recipe", [None, Recipe(LayerSettings(cluster_bits=4))], ids=["dense", "clustered"])
def test_packaged_conv_transpose(tmp_path, recipe) -> None:
    """A package with a ConvTranspose (fused ReLU) loads and runs natively; a compression recipe
    encodes the Conv and leaves the ConvTranspose weights dense."""
    model = conv_then_conv_transpose()
    path = tmp_path / "decoder.edgepkg"
    pack_model(model, path, recipe)
    x = randn(1, 3, 6, 5)
    want = edgesdk.Session(str(path), backend="reference").run(None, {"x": x})[0]
    if recipe is None:
        np.testing.assert_allclose(want, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    graph = edgesdk.Session(str(path), backend="reference").graph
    node = next(n for n in graph.nodes if n.op == "ConvTranspose")
    assert node.attrs["fused_activation"].kind == "Relu" and graph.tensors[node.inputs[1]].encoding is None
    sess = edgesdk.Session(str(path), backend="cpu")
    assert not sess._impl.fallback_reasons
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


# -- torch -----------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


class Decoder(torch.nn.Module):
    """ConvTranspose2d with stride 2, output_padding 1 and groups 2 (then ReLU), a 4x4 stride-2
    upsampling one, and a ConvTranspose1d."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up4 = torch.nn.ConvTranspose2d(6, 3, 4, stride=2, padding=1, bias=False)
        self.line = torch.nn.ConvTranspose1d(4, 2, 5, stride=3, padding=2, output_padding=1, dilation=2)

    def forward(self, x):
        image = self.up4(torch.relu(self.up(x)))
        return image, self.line(x.flatten(2))




@pytest.fixture(scope="module")
def decoder_model() -> onnx.ModelProto:
    torch.manual_seed(0)
    return torch_export(Decoder(), torch.randn(1, 4, 3, 5))


def test_torch_conv_transposes(target, decoder_model) -> None:
    sess = target.check(decoder_model, {decoder_model.graph.input[0].name: randn(1, 4, 3, 5)})
    fused = [n.attrs.get("fused_activation") for n in sess.graph.nodes if n.op == "ConvTranspose"]
    assert len(fused) == 3 and str(fused[0]) == "Relu"


def test_torch_lowering_matches_the_reference(decoder_model) -> None:
    """The fine-tuning bridge runs F.conv_transpose2d (ConvTranspose weights stay frozen buffers:
    only Conv and Gemm weights train), on batches larger than the graph's."""
    from edgesdk.compress.torch_bridge import GraphModule
    graph = edgesdk.Session(decoder_model, backend="reference").graph
    sess = edgesdk.Session(graph, backend="reference")
    x = randn(2, 4, 3, 5)
    with torch.no_grad():
        outs = GraphModule(graph)(torch.from_numpy(x))
    for i in range(2):
        for got, want in zip(outs, sess.run(None, {graph.inputs[0]: x[i:i + 1]})):
            np.testing.assert_allclose(got[i:i + 1].numpy(), want, rtol=1e-5, atol=1e-5)
