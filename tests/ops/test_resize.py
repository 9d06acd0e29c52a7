"""The resize family (``edgesdk/ops/resize.py``) on every backend: Resize (opsets 10-19) and
Upsample (7, 9), nearest and linear, every coordinate_transformation_mode and nearest_mode the
torch and TF exporters write, scales or sizes, opset-18 axes and keep_aspect_ratio_policy, 3-D
inputs, NHWC-stored inputs on cpu; the coordinate tables against ONNX Runtime's rounding; what
the importer refuses; torch exports and the fine-tuning bridge."""
from __future__ import annotations


import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from conftest import ort_run
from edgesdk.compress import pack_model
from edgesdk.errors import UnsupportedModelError
from edgesdk.graph import Graph
from edgesdk.ops.resize import axis_table
from ops.op_tester import torch_export

R = np.random.default_rng(31)


def randn(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def resize_model(x_shape: tuple[int, ...], opset: int = 17, scales: list[float] | None = None,
                 sizes: list[int] | None = None, op: str = "Resize", **attrs) -> onnx.ModelProto:
    """``op`` with scales or sizes where that opset takes them: opset 11 passes empty roi and
    scales tensors (as torch writes it), 13+ omits them, Resize-10 and Upsample-9 take scales as
    their second input, Upsample-7 as an attribute."""
    inits: dict[str, np.ndarray] = {}
    if op == "Upsample" and opset < 9:
        inputs, attrs = ["x"], {**attrs, "scales": [float(s) for s in scales]}
    elif opset < 11:
        inputs, inits["scales"] = ["x", "scales"], np.array(scales, np.float32)
    else:
        empty = np.zeros(0, np.float32)
        inits["roi"] = empty
        inits["scales"] = np.array(scales, np.float32) if scales is not None else empty
        if sizes is not None:
            inits["sizes"] = np.array(sizes, np.int64)
        inputs = ["x", "roi", "scales"] + (["sizes"] if sizes is not None else [])
        if opset >= 13:  # roi, and scales when sizes are given, as omitted inputs
            inputs = ["x", "", "" if sizes is not None else "scales"] + (["sizes"] if sizes is not None else [])
    used = {k: v for k, v in inits.items() if k in inputs}
    node = oh.make_node(op, inputs, ["y"], **attrs)
    graph = oh.make_graph([node], op.lower(), [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape))],
                          [oh.make_empty_tensor_value_info("y")],
                          [onnx.numpy_helper.from_array(v, k) for k, v in used.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8 if opset >= 11 else 5
    return model


NEAREST_FLOOR = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
# name: (x shape, opset, scales, sizes, attributes, op)
CASES = {
    # torch: nn.Upsample(mode="nearest") and F.interpolate(size=...) (asymmetric, floor)
    "nearest_2x_torch": ((1, 3, 4, 5), 17, [1, 1, 2, 2], None, NEAREST_FLOOR, "Resize"),
    "nearest_down_torch": ((1, 2, 7, 9), 17, [1, 1, 0.5, 0.5], None, NEAREST_FLOOR, "Resize"),
    "nearest_sizes_torch_opset11": ((1, 2, 5, 6), 11, None, [1, 2, 8, 13], NEAREST_FLOOR, "Resize"),
    # the ONNX defaults: half_pixel, round_prefer_floor
    "nearest_defaults_sizes": ((1, 2, 5, 7), 13, None, [1, 2, 8, 11], dict(mode="nearest"), "Resize"),
    # halves that float32 computes as x.4999998 still round as halves (ORT's tie tolerance)
    "nearest_round_prefer_ceil_ties": ((1, 1, 3, 20), 13, None, [1, 1, 5, 6],
                                       dict(mode="nearest", nearest_mode="round_prefer_ceil"), "Resize"),
    "nearest_round_prefer_floor_ties": ((1, 2, 11, 7), 13, None, [1, 2, 13, 8], dict(
        mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"), "Resize"),
    # TF (tf2onnx): half_pixel_centers nearest, align_corners nearest, ceil
    "nearest_tf_half_pixel": ((1, 2, 4, 5), 11, None, [1, 2, 9, 6], dict(
        mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode="round_prefer_ceil"),
        "Resize"),
    "nearest_tf_align_corners": ((1, 2, 4, 5), 13, None, [1, 2, 7, 9], dict(
        mode="nearest", coordinate_transformation_mode="align_corners", nearest_mode="round_prefer_ceil"), "Resize"),
    "nearest_ceil_pytorch_half_pixel": ((1, 2, 6, 5), 13, [1, 1, 1.5, 0.6], None, dict(
        mode="nearest", coordinate_transformation_mode="pytorch_half_pixel", nearest_mode="ceil"), "Resize"),
    # torch bilinear: align_corners False (pytorch_half_pixel) and True
    "linear_2x_torch": ((1, 3, 4, 5), 17, [1, 1, 2, 2], None, dict(
        mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), "Resize"),
    "linear_pytorch_half_pixel_to_one_column": ((1, 2, 5, 6), 13, None, [1, 2, 3, 1], dict(
        mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), "Resize"),
    "linear_align_corners_sizes": ((1, 3, 5, 7), 17, None, [1, 3, 9, 13], dict(
        mode="linear", coordinate_transformation_mode="align_corners"), "Resize"),
    # TF bilinear: half_pixel_centers (half_pixel), neither option (asymmetric)
    "linear_half_pixel_down": ((2, 2, 9, 8), 13, None, [2, 2, 4, 3], dict(mode="linear"), "Resize"),
    "linear_asymmetric_scales": ((1, 2, 4, 6), 13, [1, 1, 1.5, 2.5], None, dict(
        mode="linear", coordinate_transformation_mode="asymmetric"), "Resize"),
    "linear_half_pixel_symmetric": ((1, 2, 5, 7), 19, [1, 1, 0.6, 1.7], None, dict(
        mode="linear", coordinate_transformation_mode="half_pixel_symmetric"), "Resize"),
    "nearest_half_pixel_symmetric": ((1, 2, 7, 5), 19, [1, 1, 0.6, 1.4], None, dict(
        mode="nearest", coordinate_transformation_mode="half_pixel_symmetric"), "Resize"),
    # opset 18: axes, keep_aspect_ratio_policy
    "nearest_axes_not_larger": ((1, 2, 4, 5), 18, None, [7, 8], dict(
        mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_larger"), "Resize"),
    "linear_axes_not_smaller": ((1, 2, 4, 5), 18, None, [7, 8], dict(
        mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_smaller"), "Resize"),
    "linear_axes_reversed_scales": ((1, 2, 4, 5), 18, [2.0, 1.5], None, dict(mode="linear", axes=[3, 2]), "Resize"),
    # (N, C, W): the last axis only
    "linear_3d": ((2, 3, 7), 17, [1, 1, 2.5], None, dict(mode="linear"), "Resize"),
    "nearest_3d_sizes": ((1, 4, 9), 13, None, [1, 4, 4], NEAREST_FLOOR, "Resize"),
    # Resize-10 and Upsample: asymmetric coordinates, ONNX Runtime's truncate/ceil rounding
    "resize10_nearest_mixed": ((1, 2, 6, 9), 10, [1, 1, 0.5, 1.7], None, dict(mode="nearest"), "Resize"),
    "resize10_linear": ((1, 2, 4, 5), 10, [1, 1, 2, 1.5], None, dict(mode="linear"), "Resize"),
    "upsample7_nearest": ((1, 2, 3, 4), 7, [1, 1, 2, 3], None, dict(mode="nearest"), "Upsample"),
    "upsample9_linear": ((1, 2, 3, 4), 9, [1, 1, 2, 2.5], None, dict(mode="linear"), "Upsample"),
}


@pytest.mark.parametrize("case", CASES)
def test_resize(target, case: str) -> None:
    shape, opset, scales, sizes, attrs, op = CASES[case]
    sess = target.check(resize_model(shape, opset, scales, sizes, op, **attrs), {"x": randn(*shape)})
    assert [n.op for n in sess.graph.nodes] == ["Resize"]


def conv_then_resize(then_relu: bool = True, **attrs) -> onnx.ModelProto:
    """A Conv (its output stored NHWC on cpu) feeding a 2x Resize (then a Relu, or as the output)."""
    w = onnx.numpy_helper.from_array(randn(6, 3, 3, 3), "w")
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Resize", ["c", "", "scales"], ["r" if then_relu else "y"], **attrs)]
    if then_relu:
        nodes.append(oh.make_node("Relu", ["r"], ["y"]))
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 5, 6])],
                          [oh.make_empty_tensor_value_info("y")], [w, scales])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_of_a_channels_last_tensor(target, mode: str) -> None:
    sess = target.check(conv_then_resize(mode=mode), {"x": randn(1, 3, 5, 6)})
    if target.backend == "cpu":
        steps = sess._impl.steps
        assert [s.note.split(", ")[-1] for s in steps if s.op == "Resize"] == ["nhwc"]
        assert [s.note for s in steps if "->" in s.op] == ["layout of x"]  # the Conv's input only


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_to_a_graph_output_writes_graph_order(target, mode: str) -> None:
    """An upsampled graph output is written in graph order (its small input is converted), not
    transposed after the run."""
    sess = target.check(conv_then_resize(then_relu=False, mode=mode), {"x": randn(1, 3, 5, 6)})
    if target.backend == "cpu":
        steps = sess._impl.steps
        assert [s.note.split(", ")[-1] for s in steps if s.op == "Resize"] == ["nchw"]
        assert [s.note for s in steps if "->" in s.op] == ["layout of x", "layout of c"]


def test_same_shape_resize_is_a_copy(target) -> None:
    """A scale that leaves the size unchanged (1.25 on 2 rows) copies, as ONNX Runtime does."""
    model = resize_model((1, 2, 2, 3), 13, [1, 1, 1.25, 1.2], mode="nearest")
    sess = target.check(model, {"x": randn(1, 2, 2, 3)})
    assert "Resize" not in [n.op for n in sess.graph.nodes]


def test_coordinate_tables_round_as_onnxruntime() -> None:
    """Source indices of nearest resizing of one axis from every size 1-11 to every size 1-13,
    in every coordinate and rounding mode: exactly ONNX Runtime's (whose tie tolerance decides
    the halves float32 misses by an ulp). One ONNX model per mode pair, a Resize per size pair."""
    pairs = [(i, o) for i in range(1, 12) for o in range(1, 14) if i != o]
    inputs = {i: np.arange(i, dtype=np.float32).reshape(1, 1, 1, i) for i in range(1, 12)}
    wrong = []
    for mode in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                 "half_pixel_symmetric"):
        for rounding in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            nodes = [oh.make_node("Resize", [f"x{i}", "", "", f"s{o}"], [f"y{i}_{o}"], mode="nearest",
                                  coordinate_transformation_mode=mode, nearest_mode=rounding) for i, o in pairs]
            graph = oh.make_graph(
                nodes, "tables",
                [oh.make_tensor_value_info(f"x{i}", onnx.TensorProto.FLOAT, [1, 1, 1, i]) for i in inputs],
                [oh.make_empty_tensor_value_info(f"y{i}_{o}") for i, o in pairs],
                [onnx.numpy_helper.from_array(np.array([1, 1, 1, o], np.int64), f"s{o}") for o in range(1, 14)])
            model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 19)])
            model.ir_version = 9
            outputs = ort_run(model, {f"x{i}": x for i, x in inputs.items()})
            for (i, o), want in zip(pairs, outputs):
                scale = float(np.float32(o) / np.float32(i))
                if not np.array_equal(axis_table(i, o, scale, "nearest", mode, rounding).first, want.reshape(-1)):
                    wrong.append((i, o, mode, rounding))
    assert not wrong, f"{len(wrong)} tables differ from ONNX Runtime's, e.g. {wrong[:5]}"


# -- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem,model,words", [
    ("cubic", resize_model((1, 2, 4, 4), 13, [1, 1, 2, 2], mode="cubic"), "mode 'cubic' is not supported"),
    ("crop", resize_model((1, 2, 4, 4), 13, [1, 1, 2, 2], mode="linear",
                          coordinate_transformation_mode="tf_crop_and_resize"),
     "coordinate_transformation_mode 'tf_crop_and_resize' is not supported"),
    ("antialias", resize_model((1, 2, 4, 4), 18, [1, 1, 0.5, 0.5], mode="linear", antialias=1),
     "antialias=1 is not supported"),
    ("channels", resize_model((1, 2, 4, 4), 13, [1, 2, 2, 2], mode="nearest"), "scales the batch or channel axis"),
    ("rank 2", resize_model((4, 4), 13, [2, 2], mode="nearest"), "rank-2 tensor is not supported"),
    ("rank 5", resize_model((1, 1, 2, 4, 4), 13, [1, 1, 1, 2, 2], mode="nearest"), "rank-5 tensor is not supported"),
    ("empty output", resize_model((1, 1, 1, 4), 13, [1, 1, 0.5, 1], mode="nearest"),
     r"output shape \[1, 1, 0, 4\] is empty"),
    ("policy on every axis", resize_model((1, 2, 4, 5), 18, None, [1, 2, 7, 8], mode="nearest",
                                          keep_aspect_ratio_policy="not_smaller"), "scales the batch or channel axis"),
    ("no scales nor sizes", resize_model((1, 2, 4, 4), 11, [], mode="nearest"),
     "needs exactly one of scales and sizes"),
    ("bad nearest mode", resize_model((1, 2, 4, 4), 13, [1, 1, 2, 2], mode="nearest", nearest_mode="simple"),
     "nearest_mode 'simple' is not supported"),
])
def test_refused_in_one_line(problem: str, model, words: str) -> None:
    with pytest.raises(UnsupportedModelError, match=words) as exc:
        edgesdk.Session(model, backend="reference")
    assert "\n" not in str(exc.value), problem


def test_run_time_scales_are_refused() -> None:
    model = resize_model((1, 2, 4, 4), 13, [1, 1, 2, 2], mode="nearest")
    model.graph.input.append(oh.make_tensor_value_info("scales", onnx.TensorProto.FLOAT, [4]))
    del model.graph.initializer[:]
    with pytest.raises(UnsupportedModelError, match="Resize scales must be constant"):
        edgesdk.Session(model, backend="reference")


def test_malformed_nodes_are_refused_by_the_shape_rule() -> None:
    """What a package or a hand-built graph could hold that the importer never builds."""
    good = dict(mode="linear", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor",
                scales=(1.0, 1.0, 2.0, 2.0), sizes=(1, 2, 8, 8))
    for change in [dict(mode="cubic"), dict(coordinate_transformation_mode="tf_crop_and_resize"),
                   dict(scales=(1.0, 1.0, 0.0, 2.0)), dict(scales=(1.0, 1.0, float("nan"), 2.0)),
                   dict(sizes=(1, 2, 0, 8)), dict(sizes=(1, 3, 8, 8)), dict(scales=(1.0, 2.0)),
                   dict(scales=(1.0, 2.0, 2.0, 2.0))]:
        g = Graph()
        g.add_input("x", (1, 2, 4, 4))
        g.add_node("Resize", ["x"], ["y"], **{**good, **change})
        g.outputs.append("y")
        with pytest.raises(UnsupportedModelError):
            edgesdk.Session(g, backend="reference")


def test_packaged_resize_round_trips(tmp_path) -> None:
    model = resize_model((1, 2, 5, 7), 13, [1, 1, 1.5, 0.6], mode="linear",
                         coordinate_transformation_mode="align_corners")
    path = tmp_path / "resize.edgepkg"
    pack_model(model, path)
    x = randn(1, 2, 5, 7)
    want = ort_run(model, {"x": x})[0]
    for backend in ("reference", "cpu"):
        got = edgesdk.Session(str(path), backend=backend).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)


@pytest.mark.parametrize("case", [c for c in CASES if c != "resize10_nearest_mixed"])
def test_export_round_trips(case: str) -> None:
    """The exported ONNX Resize (sizes, scales or opset 18's aspect policy; Resize-10 rounding as
    floor / ceil) computes in ONNX Runtime exactly what the original model does."""
    from edgesdk.export import to_onnx
    shape, opset, scales, sizes, attrs, op = CASES[case]
    model = resize_model(shape, opset, scales, sizes, op, **attrs)
    x = randn(*shape)
    exported = to_onnx(edgesdk.Session(model, backend="reference").graph)
    onnx.checker.check_model(exported, full_check=True)
    np.testing.assert_array_equal(ort_run(exported, {"x": x})[0], ort_run(model, {"x": x})[0])


def test_resize10_that_up_and_downsamples_has_no_export() -> None:
    from edgesdk.export import to_onnx
    graph = edgesdk.Session(resize_model(*CASES["resize10_nearest_mixed"][:2], [1, 1, 0.5, 1.7], mode="nearest"),
                            backend="reference").graph
    with pytest.raises(UnsupportedModelError, match="up- and downsamples at once"):
        to_onnx(graph)


# -- torch -----------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


class Upsamplers(torch.nn.Module):
    """What torch models resize with: nn.Upsample nearest and bilinear (align_corners False and
    True), F.interpolate to a size (nearest and bilinear), a 1-D linear interpolation."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.nearest = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.bilinear = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.corners = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)

    def forward(self, x):
        import torch.nn.functional as F
        c = self.conv(x)
        up = self.nearest(c) + self.bilinear(c) + self.corners(c)
        sized = F.interpolate(c, size=(7, 9), mode="bilinear") + F.interpolate(c, size=(7, 9), mode="nearest")
        line = F.interpolate(c.flatten(2), size=31, mode="linear")
        return up, sized, line




@pytest.fixture(scope="module")
def upsamplers_model() -> onnx.ModelProto:
    torch.manual_seed(0)
    return torch_export(Upsamplers(), torch.randn(1, 3, 4, 5))


def test_torch_upsampling(target, upsamplers_model) -> None:
    sess = target.check(upsamplers_model, {upsamplers_model.graph.input[0].name: randn(1, 3, 4, 5)})
    assert sum(n.op == "Resize" for n in sess.graph.nodes) == 6


def test_torch_lowering_matches_the_reference_and_trains(upsamplers_model) -> None:
    """The fine-tuning bridge runs Resize through index tables: the reference's numbers, on
    batches larger than the graph's, with gradients reaching the Conv below it."""
    from edgesdk.compress.torch_bridge import GraphModule
    graph = edgesdk.Session(upsamplers_model, backend="reference").graph
    sess = edgesdk.Session(graph, backend="reference")
    x = randn(3, 3, 4, 5)
    module = GraphModule(graph)
    outs = module(torch.from_numpy(x))
    for i in range(3):
        want = sess.run(None, {graph.inputs[0]: x[i:i + 1]})
        for got, expected in zip(outs, want):
            np.testing.assert_allclose(got[i:i + 1].detach().numpy(), expected, rtol=1e-5, atol=1e-5)
    sum(o.square().sum() for o in outs).backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in module.tensor_params.values())


def test_onnx_node_cases(target) -> None:
    """ONNX's own Resize and Upsample cases that edgesdk imports (not cubic, crop or antialias),
    on every backend, against ONNX Runtime."""
    from onnx_node_cases import case_names, load_case
    ran = 0
    for name in case_names():
        if not name.startswith(("test_resize", "test_upsample")):
            continue
        case = load_case(name)
        try:
            edgesdk.Session(case.model, backend="reference")
        except UnsupportedModelError as exc:
            assert any(w in str(exc) for w in ("cubic", "tf_crop_and_resize", "antialias")), (name, exc)
            continue
        target.check(case.model, case.feeds)
        ran += 1
    assert ran >= 20
