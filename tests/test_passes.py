"""Graph passes: each rewrite happens when it is safe, not when it is not, and never changes results."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from edgesdk.passes import eliminate_dead_nodes, fold_affine, fold_batchnorm, fuse_activations
from conftest import assert_close, ort_run

R = np.random.default_rng(3)


def _t(name, *shape, positive=False):
    v = R.standard_normal(shape).astype(np.float32)
    return onnx.numpy_helper.from_array(np.abs(v) + np.float32(0.5) if positive else v, name)


def _model(nodes, inits, outputs=("y",), x_shape=(1, 3, 8, 8), opset=17):
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape))],
                          [oh.make_empty_tensor_value_info(o) for o in outputs], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _bn_inits(prefix, c):
    return [_t(f"{prefix}s", c), _t(f"{prefix}b", c), _t(f"{prefix}m", c), _t(f"{prefix}v", c, positive=True)]


def _bn(prefix, x, y):
    return oh.make_node("BatchNormalization", [x, f"{prefix}s", f"{prefix}b", f"{prefix}m", f"{prefix}v"], [y],
                        epsilon=1e-3)


def _ops(sess):
    return [n.op for n in sess.graph.nodes]


def _compare(model, x_shape=(1, 3, 8, 8)):
    x = R.standard_normal(x_shape).astype(np.float32)
    sess = edgesdk.Session(model)
    got = sess.run({"x": x})
    for name, exp in zip(sess.output_names, ort_run(model, {"x": x})):
        assert_close(got[name], exp, what=name)
    return sess


def test_conv_bn_relu_folds_and_fuses():
    model = _model([oh.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]), _bn("bn", "c", "n"),
                    oh.make_node("Relu", ["n"], ["y"])], [_t("w", 4, 3, 3, 3), _t("cb", 4)] + _bn_inits("bn", 4))
    sess = _compare(model)
    assert _ops(sess) == ["Conv"]
    assert str(sess.graph.nodes[0].attrs["fused_activation"]) == "Relu"
    assert sess.optimization_stats["fold_batchnorm"] == 1


def test_conv_without_bias_and_gemm_fold():
    model = _model([oh.make_node("Conv", ["x", "w"], ["c"]), _bn("bn", "c", "n"),
                    oh.make_node("Flatten", ["n"], ["f"]),
                    oh.make_node("Gemm", ["f", "g", "gc"], ["h"], transB=1, beta=0.5), _bn("bn2", "h", "y")],
                   [_t("w", 2, 3, 3, 3), _t("g", 5, 72), _t("gc", 5)] + _bn_inits("bn", 2) + _bn_inits("bn2", 5))
    sess = _compare(model)
    assert "BatchNormalization" not in _ops(sess)


def test_bn_not_folded_when_conv_output_is_also_used_elsewhere():
    model = _model([oh.make_node("Conv", ["x", "w", "cb"], ["c"]), _bn("bn", "c", "n"),
                    oh.make_node("Add", ["n", "c"], ["y"])], [_t("w", 3, 3, 1, 1), _t("cb", 3)] + _bn_inits("bn", 3))
    sess = _compare(model)
    assert "BatchNormalization" in _ops(sess)


def _const(name, value):
    return onnx.numpy_helper.from_array(np.asarray(value, np.float32), name)


# (what follows the layer, constants): each folds into the layer's weights and bias
AFFINE_FOLDS = {
    "scalar_mul_first_then_channel_add": (
        [oh.make_node("Mul", ["s", "c"], ["m"]), oh.make_node("Add", ["m", "t"], ["a"]),
         oh.make_node("Relu", ["a"], ["y"])], [_const("s", [0.7]), _const("t", R.standard_normal((1, 4, 1, 1)))]),
    "channel_div_then_scalar_sub": (
        [oh.make_node("Div", ["c", "s"], ["m"]), oh.make_node("Sub", ["m", "t"], ["y"])],
        [_const("s", R.uniform(0.5, 2, (4, 1, 1))), _const("t", 0.25)]),
    "add_first": ([oh.make_node("Add", ["t", "c"], ["y"])], [_const("t", R.standard_normal((4, 1, 1)))]),
}


def _fold_affine(model, x_shape=(1, 3, 8, 8)):
    """(rewrites, ops) of the optimized model after fold_affine, which must keep ONNX Runtime's
    results (post-training quantization runs the pass; optimize does not)."""
    graph = edgesdk.Session(model).graph.copy()
    folded = fold_affine(graph)
    sess = edgesdk.Session(graph, optimize=False)
    x = R.standard_normal(x_shape).astype(np.float32)
    got = sess.run({"x": x})
    for name, exp in zip(sess.output_names, ort_run(model, {"x": x})):
        assert_close(got[name], exp, what=name)
    return folded, _ops(sess), sess


@pytest.mark.parametrize("layer", ["Conv", "ConvTranspose"])
@pytest.mark.parametrize("case", list(AFFINE_FOLDS))
def test_constant_scale_and_shift_fold_into_the_layer(case: str, layer: str):
    follow, consts = AFFINE_FOLDS[case]
    w = _t("w", 4, 3, 3, 3) if layer == "Conv" else _t("w", 3, 4, 3, 3)
    model = _model([oh.make_node(layer, ["x", "w"], ["c"], pads=[1, 1, 1, 1])] + follow, [w] + consts)
    folded, ops, sess = _fold_affine(model)
    assert ops == [layer]
    assert folded == len([n for n in follow if n.op_type != "Relu"])
    if any(n.op_type == "Relu" for n in follow):  # fused into the Add, it moves onto the layer
        assert str(sess.graph.nodes[0].attrs["fused_activation"]) == "Relu"


def test_gemm_takes_a_per_output_scale_and_shift():
    model = _model([oh.make_node("Flatten", ["x"], ["f"]), oh.make_node("Gemm", ["f", "g", "gc"], ["h"], beta=0.5),
                    oh.make_node("Mul", ["h", "s"], ["m"]), oh.make_node("Sub", ["m", "t"], ["y"])],
                   [_t("g", 192, 5), _t("gc", 5), _const("s", R.standard_normal(5)), _const("t", R.standard_normal((1, 5)))])
    folded, ops, _ = _fold_affine(model)
    assert folded == 2 and ops[-1] == "Gemm"


NOT_AFFINE_FOLDS = {
    "constant_minus_x": [oh.make_node("Sub", ["t", "c"], ["y"])],   # -x: not a scale of the layer's output
    "constant_over_x": [oh.make_node("Div", ["t", "c"], ["y"])],    # 1/x
    "varies_along_height": [oh.make_node("Mul", ["c", "h"], ["y"])],
    "divides_by_zero": [oh.make_node("Div", ["c", "z"], ["y"])],    # x / 0 is inf or nan, not a weight
    "not_finite": [oh.make_node("Mul", ["c", "inf"], ["y"])],       # x * inf is +-inf; folded, all nan
    "layer_output_shared": [oh.make_node("Mul", ["c", "t"], ["m"]), oh.make_node("Add", ["m", "c"], ["y"])],
}


@pytest.mark.parametrize("case", list(NOT_AFFINE_FOLDS))
def test_no_fold_where_it_would_change_results(case: str):
    consts = [_t("w", 4, 3, 3, 3), _const("t", R.standard_normal((1, 4, 1, 1))),
              _const("h", R.standard_normal((1, 1, 8, 1))), _const("inf", np.inf),
              _const("z", np.array([1, 0, 2, 3], np.float32).reshape(4, 1, 1))]
    follow = NOT_AFFINE_FOLDS[case]
    model = _model([oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])] + follow, consts)
    graph = edgesdk.Session(model).graph.copy()
    assert fold_affine(graph) == 0
    assert len(graph.nodes) == 1 + len(follow)


def test_batchnorm_folds_into_conv_transpose():
    model = _model([oh.make_node("ConvTranspose", ["x", "w"], ["c"], strides=[2, 2]), _bn("bn", "c", "y")],
                   [_t("w", 3, 4, 2, 2)] + _bn_inits("bn", 4))
    sess = _compare(model)
    assert _ops(sess) == ["ConvTranspose"]


def test_activation_not_fused_into_a_graph_output_or_shared_tensor():
    model = _model([oh.make_node("Conv", ["x", "w"], ["c"]), oh.make_node("Relu", ["c"], ["r"]),
                    oh.make_node("Sigmoid", ["c"], ["s"]), oh.make_node("Add", ["r", "s"], ["y"]),
                    oh.make_node("Tanh", ["y"], ["t"])],
                   [_t("w", 3, 3, 1, 1)], outputs=("y", "t"))
    sess = _compare(model)
    assert _ops(sess) == ["Conv", "Relu", "Sigmoid", "Add", "Tanh"]  # nothing fused: c is shared, y is an output


def test_add_relu_and_clip_fuse_as_relu6():
    model = _model([oh.make_node("Conv", ["x", "w"], ["c"]), oh.make_node("Add", ["c", "x"], ["a"]),
                    oh.make_node("Clip", ["a", "lo", "hi"], ["y"])],
                   [_t("w", 3, 3, 1, 1), onnx.numpy_helper.from_array(np.float32(0), "lo"),
                    onnx.numpy_helper.from_array(np.float32(6), "hi")])
    sess = _compare(model)
    assert _ops(sess) == ["Conv", "Add"]
    assert str(sess.graph.nodes[1].attrs["fused_activation"]) == "Relu6"


def test_shape_chain_folds_into_one_reshape():
    # torch's x.view(x.size(0), -1)
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             oh.make_node("Unsqueeze", ["n", "axes"], ["n1"]), oh.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             oh.make_node("Identity", ["x"], ["xi"]), oh.make_node("Reshape", ["xi", "shape"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "axes"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    sess = _compare(_model(nodes, inits))
    assert _ops(sess) == ["Reshape"] and sess.output_shapes == {"y": (1, 192)}


def test_identity_to_graph_output_keeps_the_output_name():
    model = _model([oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Identity", ["r"], ["y"])], [])
    sess = _compare(model)
    assert _ops(sess) == ["Relu"] and sess.output_names == ["y"]


def test_dead_nodes_and_unused_weights_removed():
    model = _model([oh.make_node("Conv", ["x", "w"], ["y"]), oh.make_node("Conv", ["x", "w2"], ["unused"])],
                   [_t("w", 2, 3, 1, 1), _t("w2", 2, 3, 1, 1)])
    sess = _compare(model)
    assert _ops(sess) == ["Conv"] and "w2" not in sess.graph.tensors


def test_passes_are_idempotent_and_session_leaves_caller_graph_alone():
    model = _model([oh.make_node("Conv", ["x", "w"], ["c"]), _bn("bn", "c", "n"), oh.make_node("Relu", ["n"], ["y"])],
                   [_t("w", 2, 3, 3, 3)] + _bn_inits("bn", 2))
    graph = edgesdk.Session(model, optimize=False).graph
    before = [n.op for n in graph.nodes]
    edgesdk.Session(graph)  # optimises a private copy
    assert [n.op for n in graph.nodes] == before == ["Conv", "BatchNormalization", "Relu"]
    copy = graph.copy()
    assert fold_batchnorm(copy) == 1 and fuse_activations(copy) == 1
    assert fold_batchnorm(copy) == 0 and fuse_activations(copy) == 0 and eliminate_dead_nodes(copy) == 0


def test_hand_built_graph_runs_in_any_node_order():
    from edgesdk.runtime.activations import Activation
    g = edgesdk.Graph("hand")
    g.add_input("x", (1, 2, 5, 5))
    g.add_constant("w", R.standard_normal((3, 2, 3, 3)).astype(np.float32))
    # listed consumer first: the loader sorts nodes and infers the missing output tensors
    g.add_node("Relu", ["c"], ["y"], activation=Activation("Relu"))
    g.add_node("Conv", ["x", "w"], ["c"], kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1),
               pads=(1, 1, 1, 1), group=1)
    g.outputs = ["y"]
    sess = edgesdk.Session(g)
    assert sess.output_shapes == {"y": (1, 3, 5, 5)} and _ops(sess) == ["Conv"]
    x = R.standard_normal((1, 2, 5, 5)).astype(np.float32)
    ref = edgesdk.Session(g, optimize=False).run({"x": x})["y"]
    np.testing.assert_allclose(sess.run({"x": x})["y"], ref, rtol=1e-6)
    assert (ref >= 0).all()


@pytest.mark.parametrize("form", ["x*r/6", "x*(r/6)", "r/6", "r*(1/6)"])
def test_hard_activation_formulas_fuse(form: str) -> None:
    """Paddle's and Keras' hard-swish / hard-sigmoid formulas become one activation node that
    computes the same values."""
    import onnx.helper as oh
    from onnx_builders import graph_model
    nodes = [oh.make_node("Add", ["x", "three"], ["a"]), oh.make_node("Clip", ["a", "zero", "six"], ["r"])]
    if form == "x*r/6":
        nodes += [oh.make_node("Mul", ["x", "r"], ["m"]), oh.make_node("Div", ["m", "six"], ["y"])]
    elif form == "x*(r/6)":
        nodes += [oh.make_node("Div", ["r", "six"], ["h"]), oh.make_node("Mul", ["h", "x"], ["y"])]
    elif form == "r/6":
        nodes += [oh.make_node("Div", ["r", "six"], ["y"])]
    else:
        nodes += [oh.make_node("Mul", ["r", "sixth"], ["y"])]
    consts = {"three": np.float32(3), "zero": np.float32(0), "six": np.float32(6), "sixth": np.float32(1 / 6)}
    model = graph_model(nodes, {"x": (1, 3, 5, 5)}, ["y"], {k: v for k, v in consts.items()
                                                            if any(k in n.input for n in nodes)})
    sess = edgesdk.Session(model, backend="reference")
    want = "HardSigmoid" if form in ("r/6", "r*(1/6)") else "HardSwish"
    assert [n.op for n in sess.graph.nodes] == [want]
    x = np.linspace(-5, 5, 75, dtype=np.float32).reshape(1, 3, 5, 5)
    r = np.clip(x + 3, 0, 6)
    expected = r / 6 if want == "HardSigmoid" else x * r / 6
    np.testing.assert_allclose(sess.run({"x": x})["y"], expected, rtol=1e-6, atol=1e-7)
