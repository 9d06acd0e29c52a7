"""Export back to ONNX: ONNX -> .edgepkg (every encoding) -> ONNX -> ONNX Runtime, against edgesdk's
reference backend on the package; every op the importer accepts; fused activations unfused."""
from __future__ import annotations

import itertools
import json
import logging
import uuid

import numpy as np
import onnx
import pytest

import edgesdk
from conftest import assert_close, ort_run
from edgesdk.compress import LayerSettings, Recipe, pack_model
from edgesdk.export import ExportError, export_onnx, exportable_operators, to_onnx
from edgesdk.graph import Graph
from edgesdk.models import default_model_path
from edgesdk.package import read_package_info
from edgesdk.runtime.activations import Activation
from onnx_builders import single_node_model

# One recipe per encoding (and the fp16 variants of their codebooks / values / centroids).
ENCODING_RECIPES = {
    "fp16": (Recipe(LayerSettings(fp16=True)), {"fp16"}),
    "clustered": (Recipe(LayerSettings(cluster_bits=4)), {"clustered"}),
    "clustered_per_channel_fp16": (Recipe(LayerSettings(cluster_bits=3, per_channel=True, fp16=True)), {"clustered"}),
    "csr_values": (Recipe(LayerSettings(prune=0.85)), {"sparse_csr"}),
    "csr_codebook_fp16": (Recipe(LayerSettings(prune=0.9, cluster_bits=4, fp16=True)), {"sparse_csr"}),
    "nnm_shared": (Recipe(LayerSettings(nnm_rate=0.5)), {"nnm"}),
    "nnm_per_input_channel_fp16": (Recipe(LayerSettings(nnm_rate=0.5, nnm_mode="per_input_channel", fp16=True)),
                                   {"nnm"}),
}


def _checked(path) -> onnx.ModelProto:
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    return model


def _random_feeds(sess: edgesdk.Session, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in sess.input_shapes.items()}


def _assert_ort_matches_reference(package, exported, what: str) -> None:
    """ONNX Runtime on the exported file computes what the reference backend computes on the package."""
    sess = edgesdk.Session(package, backend="reference")
    feeds = _random_feeds(sess)
    expected = sess.run(feeds)
    model = _checked(exported)
    assert [o.name for o in model.graph.output] == sess.output_names
    for name, actual in zip(sess.output_names, ort_run(model, feeds)):
        assert_close(actual, expected[name], rtol=1e-4, what=f"{what}: {name}")


def _storage_kinds(package) -> set[str]:
    return {t["storage"] for t in read_package_info(package)["tensors"]}


@pytest.mark.parametrize("encoding", sorted(ENCODING_RECIPES))
def test_embedded_model_round_trip_with_every_encoding(tmp_path, encoding):
    recipe, kinds = ENCODING_RECIPES[encoding]
    package, exported = tmp_path / "digits.edgepkg", tmp_path / "digits.onnx"
    pack_model(default_model_path(), package, recipe)
    assert kinds <= _storage_kinds(package), f"the {encoding} recipe did not produce {kinds}"
    export_onnx(package, exported)
    _assert_ort_matches_reference(package, exported, encoding)
    model = onnx.load(str(exported))
    # decoded: plain float32 initializers, nothing compressed or half left
    assert {i.data_type for i in model.graph.initializer if i.name.endswith("weight")} == {onnx.TensorProto.FLOAT}
    # the optimiser fused each Relu into its Conv/Gemm: export writes them out again
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Relu") == 3 and "BatchNormalization" not in ops


def _zoo_round_trip(tmp_path, name: str, recipe: Recipe) -> None:
    from zoo.export import export_onnx as export_zoo_model
    source = export_zoo_model(name)
    package, exported = tmp_path / f"{name}.edgepkg", tmp_path / f"{name}.onnx"
    pack_model(source, package, recipe)
    export_onnx(package, exported)
    _assert_ort_matches_reference(package, exported, name)


MIXED_RECIPE = Recipe(LayerSettings(cluster_bits=4, per_channel=True), layers=(
    ("*fc*", {"nnm_rate": 0.5, "cluster_bits": None, "per_channel": False, "fp16": True}),
    ("*conv2*", {"prune": 0.7}),
))


@pytest.mark.parametrize("name", ["lenet5", "oddnet"])
@pytest.mark.parametrize("recipe", [MIXED_RECIPE, Recipe(LayerSettings(nnm_rate=0.5, fp16=True))], ids=["mixed", "nnm"])
def test_zoo_model_round_trip(tmp_path, name, recipe):
    _zoo_round_trip(tmp_path, name, recipe)


@pytest.mark.slow
def test_mobilenet_style_round_trip(tmp_path):
    """Depthwise convs, HardSwish / HardSigmoid (squeeze-excite) fused and unfused, Mul, Add."""
    _zoo_round_trip(tmp_path, "mobilenet_v3_style", Recipe(LayerSettings(cluster_bits=4, prune=0.5)))


def test_every_importable_node_case_exports():
    """Every ONNX backend node case edgesdk imports exports to a model that passes the full
    checker and computes the case's expected outputs in ONNX Runtime, before and after the passes."""
    from onnx_node_cases import case_names, load_case
    failures, exported_ops, exported = [], set(), 0
    for name in case_names():
        case = load_case(name)
        try:
            sessions = [edgesdk.Session(case.model, optimize=False), edgesdk.Session(case.model)]
        except edgesdk.EdgeSDKError:
            continue  # refused at import (test_onnx_node_cases checks why): nothing to export
        for sess in sessions:
            exported_ops.update(n.op for n in sess.graph.nodes)
            try:
                model = to_onnx(sess.graph)
                onnx.checker.check_model(model, full_check=True)
                outputs = ort_run(model, {k: v for k, v in case.feeds.items() if k in sess.input_names})
                for actual, expected in zip(outputs, case.expected):
                    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
                    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-6)
                exported += 1
            except Exception as exc:  # collect them all: one run names every broken op
                failures.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    assert not failures, "\n".join(failures)
    assert exported >= 2 * 270, f"only {exported} exports ran"
    # the node cases reach every op the runtime has, so every one of them is exported above (but
    # those whose every case is refused, exported by their own tests)
    assert exported_ops | REFUSED_IN_EVERY_CASE == set(exportable_operators())


# ReduceLogSumExp: every node case is float64 or empty (tests/ops/test_reduce.py exports it);
# LayerNormalization: every node case reads the Mean/InvStdDev outputs (exported below).
# The integer ops: their node cases feed integer graph inputs, which edgesdk refuses
# (tests/test_quant.py::test_every_integer_op_exports exports each of them).
# LQQuantize: edgesdk's own op, no ONNX node case (tests/test_lq.py exports it).
REFUSED_IN_EVERY_CASE = {"ReduceLogSumExp", "LayerNormalization", "QLinearConv", "QLinearMatMul", "QGemm",
                         "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearAveragePool",
                         "QLinearConcat", "QLinearLookup", "DequantizeLinear", "QuantizeLinear", "LQQuantize"}


@pytest.mark.parametrize("axis, bias", [(-1, True), (1, False)])
def test_layer_normalization_exports(axis, bias, rng):
    shape = (2, 3, 4, 5)
    normalized = shape[axis:] if axis >= 0 else shape[axis:]
    consts = {"scale": rng.standard_normal(normalized).astype(np.float32)}
    if bias:
        consts["B"] = rng.standard_normal(normalized).astype(np.float32)
    source = single_node_model("LayerNormalization", shape, consts, axis=axis, epsilon=1e-3)
    x = rng.standard_normal(shape).astype(np.float32)
    model = to_onnx(edgesdk.Session(source).graph)
    onnx.checker.check_model(model, full_check=True)
    (expected,), (actual,) = ort_run(source, {"x": x}), ort_run(model, {"x": x})
    assert_close(actual, expected, 1e-5)


@pytest.mark.parametrize("kind, params", [
    ("Relu", ()), ("Clip", (0.0, 6.0)), ("Clip", (-np.inf, 1.5)), ("Clip", (-1.0, np.inf)),
    ("LeakyRelu", (0.1,)), ("Sigmoid", ()), ("Tanh", ()), ("HardSigmoid", (0.2, 0.5)), ("HardSwish", ()),
])
@pytest.mark.parametrize("producer", ["Conv", "Gemm", "MatMul", "Add", "BatchNormalization"])
def test_fused_activation_is_unfused(producer, kind, params, rng):
    """A Graph built by hand, with the activation fused into each producer the runtime fuses into."""
    graph = Graph(f"{producer}_{kind}")
    if producer in ("Conv", "BatchNormalization"):
        graph.add_input("x", (1, 3, 5, 5))
    else:
        graph.add_input("x", (2, 4))
    inputs = {
        "Conv": [("w", (4, 3, 3, 3)), ("b", (4,))], "Gemm": [("w", (4, 3)), ("b", (3,))],
        "MatMul": [("w", (4, 3))], "Add": [("w", (2, 4))],
        "BatchNormalization": [("scale", (3,)), ("bias", (3,)), ("mean", (3,)), ("var", (3,))],
    }[producer]
    for name, shape in inputs:
        value = rng.standard_normal(shape).astype(np.float32)
        graph.add_constant(name, np.abs(value) + 0.5 if name == "var" else value)
    attrs = {"Conv": dict(kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), group=1),
             "Gemm": dict(alpha=1.0, beta=1.0, transA=False, transB=False),
             "BatchNormalization": dict(epsilon=1e-5)}.get(producer, {})
    graph.add_node(producer, ["x"] + [n for n, _ in inputs], ["y"], fused_activation=Activation(kind, params), **attrs)
    graph.outputs.append("y")
    sess = edgesdk.Session(graph, optimize=False)
    feeds = {"x": 3 * rng.standard_normal(sess.input_shapes["x"]).astype(np.float32)}
    model = to_onnx(sess.graph)
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node] == [producer, kind]
    (actual,) = ort_run(model, feeds)
    assert_close(actual, sess.run(feeds)["y"], rtol=1e-5, what=f"{producer}+{kind}")


def test_onnx_to_onnx_keeps_the_model(tmp_path, rng):
    """An ONNX file, an onnx.ModelProto and a Graph all export; ORT gives the source's outputs."""
    source = onnx.load(str(default_model_path()))
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    (expected,) = ort_run(source, {"input": x})
    graph = edgesdk.Session(source, optimize=False).graph
    for i, model in enumerate([default_model_path(), source, graph]):
        out = export_onnx(model, tmp_path / f"m{i}.onnx")
        (actual,) = ort_run(_checked(out), {"input": x})
        assert_close(actual, expected, rtol=1e-5, what=f"source {i}")
    assert not list(tmp_path.glob(".*.tmp")), "the atomic write left a temp file"


def test_metadata_and_opset(tmp_path):
    package = tmp_path / "d.edgepkg"
    pack_model(default_model_path(), package, Recipe(LayerSettings(cluster_bits=4)))
    model = onnx.load(str(export_onnx(package, tmp_path / "d.onnx")))
    props = {p.key: p.value for p in model.metadata_props}
    assert model.producer_name == "edgesdk" and model.opset_import[0].version == 17
    assert json.loads(props["edgesdk.fixed_dimensions"]) == [
        {"input": "input", "axis": 0, "dim_param": "N", "size": 1}]
    assert json.loads(props["edgesdk.package.recipe"]) == {"default": {"cluster_bits": 4}}
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 1, 8, 8]


@pytest.mark.parametrize("op, attrs, x_shape, constants", [
    ("Pad", dict(mode="wrap"), (1, 2, 4, 5), {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)}),
    ("AveragePool", dict(kernel_shape=[2, 2], dilations=[2, 2]), (1, 2, 7, 7), {}),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), (1, 1, 6, 6), {}),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2], ceil_mode=1), (1, 1, 4, 5), {}),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2], ceil_mode=1), (1, 1, 4, 5), {}),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2], ceil_mode=1, count_include_pad=1),
     (1, 1, 4, 5), {}),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1), (1, 1, 6, 6), {}),
    ("ReduceMean", dict(axes=[1], keepdims=0), (2, 3, 4), {}),
    ("Softmax", dict(axis=1), (2, 3, 4), {}),
])
def test_ops_with_version_or_shape_subtleties(op, attrs, x_shape, constants, rng):
    """Opset-19 ops (wrap padding, dilated average pooling) raise the exported opset; ceil-mode
    pools whose last window would start in the padding keep their output size; opset-11 Softmax
    (normalising over all axes from ``axis``) keeps its meaning at opset 17."""
    opset = 19 if op in ("Pad", "AveragePool") and ("dilations" in attrs or attrs.get("mode") == "wrap") else 11
    source = single_node_model(op, x_shape, constants, opset=opset, **attrs)
    x = rng.standard_normal(x_shape).astype(np.float32)
    (expected,) = ort_run(source, {"x": x})
    model = to_onnx(edgesdk.Session(source).graph)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == (19 if opset == 19 else 17)
    (actual,) = ort_run(model, {"x": x})
    assert_close(actual, expected, rtol=1e-5, what=op)


def test_ceil_mode_pool_sweep(rng):
    """Ceil-mode pools over sizes, kernels, strides (also larger than the kernel) and paddings:
    the export passes the strict checker and ONNX Runtime computes the reference's windows."""
    failures, checked = [], 0
    for op, include_pad in (("MaxPool", 0), ("AveragePool", 0), ("AveragePool", 1)):
        for size, kernel, stride in itertools.product((4, 5, 7), (2, 3), (1, 2, 3, 4)):
            for begin, end in itertools.product(range(kernel), repeat=2):
                attrs = dict(kernel_shape=[kernel, 2], strides=[stride, 2], pads=[begin, 0, end, 1], ceil_mode=1)
                if op == "AveragePool":
                    attrs["count_include_pad"] = include_pad
                sess = edgesdk.Session(single_node_model(op, (1, 1, size, 5), **attrs))
                x = rng.standard_normal((1, 1, size, 5)).astype(np.float32)
                model = to_onnx(sess.graph)
                try:
                    onnx.checker.check_model(model, full_check=True)
                    (actual,) = ort_run(model, {"x": x})
                    np.testing.assert_allclose(actual, sess.run({"x": x})["y"], rtol=1e-6, atol=1e-6)
                except Exception as exc:
                    failures.append(f"{op} size {size} {attrs}: {str(exc).splitlines()[0][:150]}")
                checked += 1
    assert not failures, "\n".join(failures)
    assert checked == 3 * 3 * 4 * (4 + 9)


def test_constant_output_and_input_passthrough(rng):
    """A graph output that is a constant (folded at import) is written by a Constant node."""
    graph = Graph("consts")
    graph.add_input("x", (2, 3))
    graph.add_constant("c", rng.standard_normal((3,)).astype(np.float32))
    graph.add_node("Add", ["x", "c"], ["y"])
    graph.outputs += ["y", "c"]
    model = to_onnx(edgesdk.Session(graph, optimize=False).graph)
    onnx.checker.check_model(model, full_check=True)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y, c = ort_run(model, {"x": x})
    np.testing.assert_array_equal(c, graph.const("c"))
    np.testing.assert_allclose(y, x + graph.const("c"), rtol=1e-6)


def test_malformed_hand_built_graph_is_a_typed_error():
    graph = Graph("bad")
    graph.add_input("x", (1, 2, 3))
    graph.add_node("Transpose", ["x"], ["y"], perm=(2, 1, 0))
    graph.outputs.append("y")
    sess = edgesdk.Session(graph, optimize=False)
    del sess.graph.nodes[0].attrs["perm"]
    with pytest.raises(edgesdk.UnsupportedModelError, match="'Transpose' .* cannot be exported.*perm"):
        to_onnx(sess.graph)
    sess.graph.nodes[0].op = "Einsum"
    with pytest.raises(edgesdk.UnsupportedModelError, match="cannot export op 'Einsum'"):
        to_onnx(sess.graph)


def test_write_errors_are_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for target, words in [(tmp_path, "is a directory"), (blocker / "m.onnx", "cannot write"),
                          (default_model_path(), "is the model being exported")]:
        with pytest.raises(ExportError, match=words) as info:
            export_onnx(default_model_path(), target)
        assert "\n" not in str(info.value)


def test_fixed_batch_is_said_once_and_recorded(caplog):
    name = f"x_{uuid.uuid4().hex[:8]}"  # a name no earlier test logged a note for
    model = single_node_model("Relu", (1, 3, 4, 4))
    model.graph.input[0].name = name
    model.graph.node[0].input[0] = name
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with caplog.at_level(logging.WARNING, logger="edgesdk"):
        first = edgesdk.Session(model)
        edgesdk.Session(model)
    notes = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(notes) == 1 and "\n" not in notes[0], notes
    assert "'batch'" in notes[0] and "dimension 0" in notes[0]
    assert f"input_shapes={{{name!r}: (4, 3, 4, 4)}}" in notes[0] and f"--input-shape {name}=4x3x4x4" in notes[0]
    assert first.graph.metadata["fixed_dimensions"] == [{"input": name, "axis": 0, "dim_param": "batch", "size": 1}]
    chosen = edgesdk.Session(model, input_shapes={name: (2, 3, 4, 4)})
    assert "fixed_dimensions" not in chosen.graph.metadata  # the user chose the size: nothing to say


def test_static_model_gets_no_note(caplog):
    with caplog.at_level(logging.WARNING, logger="edgesdk"):
        sess = edgesdk.Session(single_node_model("Relu", (1, 3, 4, 4)))
    assert not caplog.records and "fixed_dimensions" not in sess.graph.metadata


def test_exportable_operators_cover_the_runtime():
    from edgesdk.runtime.shapes import RUNTIME_OPS
    assert set(exportable_operators()) == set(RUNTIME_OPS)
