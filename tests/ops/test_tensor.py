"""The tensor family (``edgesdk/ops/tensor.py``) on every backend: Reshape and the ops imported as
it (Flatten, Squeeze, Unsqueeze, Identity, Dropout), Pad, Split, Slice, Gather, Expand, Tile,
Transpose, Concat, DepthToSpace and SpaceToDepth on run-time tensors, in every attribute form the
exporters emit, also on a Conv's output (NHWC on cpu); views where the cpu backend can make them;
a torch export; the errors."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from edgesdk.errors import UnsupportedModelError
from onnx_builders import single_node_model

R = np.random.default_rng(13)
I64 = np.iinfo(np.int64)


def _x(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {"x": R.standard_normal(shape).astype(np.float32)}


def _ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _model(nodes: list, x_shape: tuple[int, ...], outputs: list[str], constants: dict[str, np.ndarray] | None = None,
           opset: int = 17) -> onnx.ModelProto:
    """A graph of ``nodes`` reading the float input "x"; ``constants`` become initializers."""
    graph = oh.make_graph(
        nodes, "tensor", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape))],
        [oh.make_empty_tensor_value_info(o) for o in outputs],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (constants or {}).items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    return model


def _conv_then(op_nodes: list, x_shape: tuple[int, ...], outputs: list[str], channels: int,
               constants: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """x -> 3x3 Conv (the cpu backend stores its output NHWC) -> ``op_nodes`` reading "c"."""
    weight = R.standard_normal((channels, x_shape[1], 3, 3)).astype(np.float32) * 0.3
    conv = oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    return _model([conv, *op_nodes], x_shape, outputs, {"w": weight, **(constants or {})})


def _placements(session: edgesdk.Session) -> dict[str, str]:
    return session._impl.placements


# -- Reshape and the views imported as it --------------------------------------------------------------
VIEW_CASES = {
    # name: (op, x shape, constants, attributes, opset)
    "reshape_zero_and_minus_one": ("Reshape", (2, 3, 4, 5), {"shape": _ints(0, -1, 5)}, {}, 17),
    "flatten_axis1": ("Flatten", (2, 3, 4, 5), {}, {"axis": 1}, 17),
    "flatten_axis2": ("Flatten", (2, 3, 4, 5), {}, {"axis": 2}, 17),
    "flatten_last_axis": ("Flatten", (2, 3, 4, 5), {}, {"axis": -1}, 17),
    "unsqueeze_axes_input": ("Unsqueeze", (2, 3, 4, 5), {"axes": _ints(0, -1)}, {}, 17),
    "unsqueeze_opset11_attribute": ("Unsqueeze", (2, 3, 4, 5), {}, {"axes": [1]}, 11),
    "squeeze_axes_input": ("Squeeze", (2, 1, 4, 1), {"axes": _ints(1)}, {}, 17),
    "squeeze_every_unit_axis": ("Squeeze", (2, 1, 4, 1), {}, {}, 17),
    "identity": ("Identity", (2, 3, 4, 5), {}, {}, 17),
    "dropout_ratio": ("Dropout", (2, 3, 4, 5), {"ratio": np.float32(0.3)}, {}, 17),  # inference: a copy
}


@pytest.mark.parametrize("case", VIEW_CASES)
def test_reshape_and_views(target, case: str) -> None:
    op, shape, constants, attrs, opset = VIEW_CASES[case]
    sess = target.check(single_node_model(op, shape, constants, opset=opset, **attrs), _x(shape),
                        exact=target.precision == "fp32")
    assert {n.op for n in sess.graph.nodes} <= {"Reshape"}


# -- Pad ----------------------------------------------------------------------------------------------
NO_PAD_KERNEL = "only constant padding has a native kernel (cpu and OpenCL)"
PAD_CASES = {
    # name: (x shape, pads, mode, constant value or None)
    "constant_value": ((1, 3, 5, 6), (0, 0, 1, 2, 0, 1, 2, 0), "constant", 0.5),
    "reflect": ((1, 3, 5, 6), (0, 0, 1, 2, 0, 1, 2, 0), "reflect", None),
    "edge": ((1, 3, 5, 6), (0, 0, 1, 2, 0, 1, 2, 0), "edge", None),
    "negative_crops": ((1, 2, 6, 6), (0, 0, -1, 2, 0, 0, 1, -2), "constant", None),
    "pad_and_crop_channels": ((1, 3, 5, 6), (0, 0, 2, -1, 0, 1, 1, 2), "constant", 0.5),
    # a crop larger than the dimension eats the padding (+10 / -10 on 4 rows: 4 padding rows)
    "pad_then_crop_past_it": ((1, 2, 4, 5), (0, 0, 10, 0, 0, 0, -10, 0), "constant", 0.25),
    "crop_past_then_pad": ((1, 2, 4, 5), (0, 0, -10, 0, 0, 0, 10, 0), "constant", 0.25),
    "crops_past_both_axes": ((1, 2, 4, 5), (0, 0, 6, -5, 0, 0, -9, 2), "constant", 0.25),
    "crop_all_pad_three": ((1, 2, 4, 5), (0, 0, -4, 0, 0, 0, 3, 0), "constant", 0.25),
}


@pytest.mark.parametrize("case", PAD_CASES)
def test_pad(target, case: str) -> None:
    shape, pads, mode, value = PAD_CASES[case]
    constants = {"pads": _ints(*pads), **({"value": np.float32(value)} if value is not None else {})}
    fallback = {"Pad": NO_PAD_KERNEL} if mode != "constant" else None
    target.check(single_node_model("Pad", shape, constants, mode=mode), _x(shape), may_fall_back=fallback)


AFTER_CONV_CASES = {  # name: (nodes reading the Conv's output "c", (1, 6, 7, 5), and the input "x"; constants)
    "reshape_flat": ([oh.make_node("Reshape", ["c", "flat"], ["y"])], {"flat": _ints(1, 6 * 7 * 5)}),
    "transpose_nwch": ([oh.make_node("Transpose", ["c"], ["y"], perm=[0, 3, 1, 2])], {}),
    "concat_with_the_nchw_input": ([oh.make_node("Concat", ["c", "x"], ["y"], axis=1)], {}),
    "pad": ([oh.make_node("Pad", ["c", "pads"], ["y"])], {"pads": _ints(0, 0, 1, 0, 0, 0, 0, 2)}),
}


@pytest.mark.parametrize("case", AFTER_CONV_CASES)
def test_after_a_conv(target, case: str) -> None:
    nodes, constants = AFTER_CONV_CASES[case]
    target.check(_conv_then(nodes, (1, 6, 7, 5), ["y"], 6, constants), _x((1, 6, 7, 5)))


# -- Split --------------------------------------------------------------------------------------------
SPLIT_CASES = {
    # name: (x shape, opset, initializer split or None, attributes, outputs)
    "attribute_unequal_axis1_opset11": ((2, 7, 3, 3), 11, None, {"axis": 1, "split": [2, 5]}, 2),
    "input_last_axis_opset13": ((2, 3, 10), 13, _ints(3, 3, 4), {"axis": -1}, 3),
    "equal_parts_axis0": ((4, 3, 5), 13, None, {"axis": 0}, 2),
    "num_outputs_uneven_opset18": ((2, 7, 4), 18, None, {"axis": 1, "num_outputs": 3}, 3),
    "num_outputs_even_opset18": ((1, 6, 2, 2), 18, None, {"axis": 1, "num_outputs": 2}, 2),
}


@pytest.mark.parametrize("case", SPLIT_CASES)
def test_split(target, case: str) -> None:
    shape, opset, sizes, attrs, outputs = SPLIT_CASES[case]
    constants = {"split": sizes} if sizes is not None else None
    model = single_node_model("Split", shape, constants, opset=opset, n_outputs=outputs, **attrs)
    target.check(model, _x(shape), exact=target.precision == "fp32")


def test_split_of_a_conv_output_on_channels(target) -> None:
    """The cpu backend reads the Conv's NHWC storage with strides (no layout conversion)."""
    split = oh.make_node("Split", ["c", "sizes"], ["a", "b"], axis=1)
    relu = oh.make_node("Relu", ["b"], ["rb"])
    model = _conv_then([split, relu], (1, 3, 6, 5), ["a", "rb"], 7, {"sizes": _ints(3, 4)})
    target.check(model, _x((1, 3, 6, 5)))


def test_split_of_the_outer_axis_is_a_view_on_cpu() -> None:
    model = single_node_model("Split", (1, 144, 20), {"split": _ints(64, 80)}, n_outputs=2, axis=1)
    with edgesdk.Session(model, backend="cpu") as sess:  # YOLOv8's box/class split, batch 1
        assert _placements(sess) == {"Split_0": "view"}
        x = _x((1, 144, 20))["x"]
        a, b = sess.run(None, {"x": x})
        np.testing.assert_array_equal(a, x[:, :64])
        np.testing.assert_array_equal(b, x[:, 64:])


# -- Slice --------------------------------------------------------------------------------------------
SLICE_CASES = {
    # name: (x shape, starts, ends, axes or None, steps or None)
    "steps_and_negative_steps": ((3, 10, 6), (1, -1), (I64.max, -100), (1, 2), (3, -2)),
    "reverse_a_whole_axis": ((5, 4), (-1,), (I64.min,), (0,), (-1,)),
    "clamped_no_axes_no_steps": ((6, 5), (-100, 2), (100, 4), None, None),
    "negative_axis": ((2, 3, 8), (2,), (-1,), (-1,), None),
    "outer_axis": ((6, 4, 5), (2,), (5,), (0,), None),
    "all_four_axes": ((2, 5, 6, 7), (1, 1, -5, 6), (2, 5, 6, 0), (0, 1, 2, 3), (1, 2, 2, -3)),
}


@pytest.mark.parametrize("case", SLICE_CASES)
def test_slice(target, case: str) -> None:
    shape, starts, ends, axes, steps = SLICE_CASES[case]
    constants = {"starts": _ints(*starts), "ends": _ints(*ends)}
    if axes is not None:
        constants["axes"] = _ints(*axes)
    if steps is not None:
        constants["steps"] = _ints(*steps)
    target.check(single_node_model("Slice", shape, constants), _x(shape), exact=target.precision == "fp32")


def test_slice_opset9_attributes(target) -> None:
    model = single_node_model("Slice", (4, 6, 3), opset=9, starts=[1, -4], ends=[3, 100], axes=[0, 1])
    target.check(model, _x((4, 6, 3)))


def test_slice_of_a_conv_output(target) -> None:
    slice_ = oh.make_node("Slice", ["c", "starts", "ends", "axes", "steps"], ["y"])
    model = _conv_then([slice_], (1, 2, 7, 6), ["y"], 5, {"starts": _ints(1, 5), "ends": _ints(4, 0),
                                                         "axes": _ints(1, 3), "steps": _ints(1, -2)})
    target.check(model, _x((1, 2, 7, 6)))


def test_a_slice_of_the_outer_axis_is_a_view_on_cpu() -> None:
    model = single_node_model("Slice", (1, 84, 20), {"starts": _ints(0), "ends": _ints(4), "axes": _ints(1)})
    with edgesdk.Session(model, backend="cpu") as sess:  # YOLOv8's box rows, batch 1
        assert _placements(sess) == {"Slice_0": "view"}


# -- Gather -------------------------------------------------------------------------------------------
GATHER_CASES = {
    # name: (x shape, indices, axis)
    "class_token": ((1, 5, 8), np.array(0, np.int64), 1),
    "scalar_negative_batch2": ((2, 5, 8), np.array(-1, np.int64), 1),
    "matrix_indices_axis2": ((2, 3, 6, 4), np.array([[3, 1], [-1, 0]], np.int64), 2),
    "repeated_axis0": ((5, 3), np.array([4, 4, 0, 2], np.int64), 0),
    "evenly_spaced_last_axis": ((2, 3, 9), np.array([1, 3, 5, 7], np.int32), -1),
    "rank3_indices_axis1": ((2, 6, 3), np.array([[[5, 0]], [[2, 2]]], np.int64), 1),
}


@pytest.mark.parametrize("case", GATHER_CASES)
def test_gather(target, case: str) -> None:
    shape, indices, axis = GATHER_CASES[case]
    model = single_node_model("Gather", shape, {"indices": indices}, axis=axis)
    target.check(model, _x(shape), exact=target.precision == "fp32")


def test_gather_of_a_conv_output(target) -> None:
    gather = oh.make_node("Gather", ["c", "idx"], ["y"], axis=1)
    model = _conv_then([gather], (1, 2, 5, 5), ["y"], 6, {"idx": _ints(5, 0, 3)})
    target.check(model, _x((1, 2, 5, 5)))


def test_the_class_token_is_a_view_on_cpu() -> None:
    with edgesdk.Session(single_node_model("Gather", (1, 5, 8), {"i": np.array(0)}, axis=1), backend="cpu") as sess:
        assert _placements(sess) == {"Gather_0": "view"}


# -- Expand and Tile ----------------------------------------------------------------------------------
EXPAND_CASES = {
    "rank_up": ((3, 1, 5), (2, 3, 4, 5)),
    "both_ways": ((2, 1, 4), (3, 1)),  # ONNX broadcasts the shape and the input to (2, 3, 4)
    "batch_of_a_token": ((1, 1, 8), (4, 1, 8)),
}


@pytest.mark.parametrize("case", EXPAND_CASES)
def test_expand(target, case: str) -> None:
    shape, target_shape = EXPAND_CASES[case]
    model = single_node_model("Expand", shape, {"shape": _ints(*target_shape)})
    target.check(model, _x(shape), exact=target.precision == "fp32")


TILE_CASES = {
    "two_axes": ((2, 3, 4), (1, 2, 3)),
    "every_axis_of_4d": ((2, 3, 2, 3), (2, 2, 3, 2)),  # 8 strided dims: beyond the kernel's 6
}


@pytest.mark.parametrize("case", TILE_CASES)
def test_tile(target, case: str) -> None:
    shape, repeats = TILE_CASES[case]
    model = single_node_model("Tile", shape, {"repeats": _ints(*repeats)})
    target.check(model, _x(shape), exact=target.precision == "fp32")


# -- Transpose ----------------------------------------------------------------------------------------
TRANSPOSE_CASES = {
    "2d": ((4, 5), (1, 0)),
    "nchw_to_nhwc": ((2, 3, 4, 5), (0, 2, 3, 1)),
    "4d_reversed": ((2, 3, 4, 5), (3, 2, 1, 0)),
    "5d": ((2, 3, 4, 5, 6), (0, 2, 3, 4, 1)),
    "rank7_reversed": ((2, 3, 2, 3, 2, 3, 2), (6, 5, 4, 3, 2, 1, 0)),  # no dims merge: 7 > 6
    "default_perm": ((3, 4, 5), None),
    "unit_axes_only": ((1, 3, 1, 4), (0, 2, 1, 3)),
}


@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_transpose(target, case: str) -> None:
    shape, perm = TRANSPOSE_CASES[case]
    model = single_node_model("Transpose", shape, **({"perm": list(perm)} if perm else {}))
    target.check(model, _x(shape), exact=target.precision == "fp32")


def test_transpose_of_a_conv_output_to_nhwc_is_a_view_on_cpu(target) -> None:
    transpose = oh.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])
    sess = target.check(_conv_then([transpose], (1, 3, 5, 4), ["y"], 6), _x((1, 3, 5, 4)))
    if target.backend == "cpu":
        assert [s["placement"] for s in sess._impl.describe() if s["op"] == "Transpose"] == ["view"]


# -- Concat -------------------------------------------------------------------------------------------
def test_concat_of_a_constant_class_token_and_patches(target) -> None:
    """ViT: the class token (a constant) in front of the run-time patches."""
    token = R.standard_normal((1, 1, 8)).astype(np.float32)
    model = _model([oh.make_node("Concat", ["token", "x"], ["y"], axis=1)], (1, 6, 8), ["y"], {"token": token})
    target.check(model, _x((1, 6, 8)))


@pytest.mark.parametrize("axis", [0, 1, -2, 3])
def test_concat_with_a_constant(target, axis: int) -> None:
    other = [2, 3, 4, 5]
    other[axis] = 3 if axis != -2 else 1
    model = single_node_model("Concat", (2, 3, 4, 5), {"c": R.standard_normal(other).astype(np.float32)}, axis=axis)
    target.check(model, _x((2, 3, 4, 5)), exact=target.precision == "fp32")


CONCAT_CASES = {
    # name: (x shape, axis): y = Concat(x, Relu(x) sliced or not, x) on that axis
    "axis0": ((2, 3, 4), 0),
    "last_axis": ((2, 3, 4), -1),
    "5d_axis3": ((1, 2, 3, 2, 4), 3),
    "2d_axis1": ((3, 5), 1),
}


@pytest.mark.parametrize("case", CONCAT_CASES)
def test_concat_of_run_time_tensors(target, case: str) -> None:
    shape, axis = CONCAT_CASES[case]
    nodes = [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Concat", ["x", "r", "x"], ["y"], axis=axis)]
    target.check(_model(nodes, shape, ["y"]), _x(shape))


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_concat_of_conv_outputs(target, axis: int) -> None:
    nodes = [oh.make_node("Conv", ["c", "w2"], ["d"], pads=[1, 1, 1, 1]),
             oh.make_node("Concat", ["c", "d", "const"], ["y"], axis=axis)]
    shape = (1, 4, 5, 6)
    const_shape = list(shape)
    const_shape[axis] = 2
    model = _conv_then(nodes, (1, 3, 5, 6), ["y"], 4, {
        "w2": R.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3,
        "const": R.standard_normal(const_shape).astype(np.float32)})
    target.check(model, _x((1, 3, 5, 6)))


# Concats whose inputs the cpu backend's convolutions write in place (Builder.write_nhwc_part):
# e1 = Relu(Conv1x1(x) + b), e3 = Conv3x3(x), r = Relu(x), const; z = Conv1x1(Concat(parts)).
# name: (x shape, channels of e1 and e3, concat inputs, convolutions writing in place on cpu,
#        the Concat left as a view on cpu)
FIRE_CASES = {
    # SqueezeNet's fire module: both expands write their channel slices, the Concat copies nothing
    "fire": ((1, 8, 7, 9), (5, 6), ["e1", "e3"], 2, True),
    # batch 2 (the slices' pixel stride spans images); the 3x3 expand runs Winograd (16 -> 16, 16 tiles)
    "fire_batch2_winograd": ((2, 16, 16, 16), (16, 16), ["e3", "e1"], 2, True),
    # a constant and a non-conv input are copied into their slices, the two convs write theirs
    "with_constant_and_relu": ((1, 4, 6, 6), (3, 5), ["e1", "const", "e3", "r"], 2, False),
    # the same tensor twice cannot be written into two slices: e1 gets a buffer and is copied
    "twice": ((1, 4, 5, 5), (3, 2), ["e1", "e3", "e1"], 1, False),
}


@pytest.mark.parametrize("case", FIRE_CASES)
def test_concat_of_convolutions_written_in_place(target, case: str) -> None:
    shape, (c1, c3), parts, in_place, view = FIRE_CASES[case]
    n, c, h, w = shape
    channels = {"e1": c1, "e3": c3, "r": c, "const": 2}
    constants = {"w1": R.standard_normal((c1, c, 1, 1)).astype(np.float32) * 0.3,
                 "b1": R.standard_normal(c1).astype(np.float32),
                 "w3": R.standard_normal((c3, c, 3, 3)).astype(np.float32) * 0.2,
                 "wn": R.standard_normal((4, sum(channels[p] for p in parts), 1, 1)).astype(np.float32) * 0.2}
    nodes = [oh.make_node("Conv", ["x", "w1", "b1"], ["c1"]), oh.make_node("Relu", ["c1"], ["e1"]),
             oh.make_node("Conv", ["x", "w3"], ["e3"], pads=[1, 1, 1, 1])]
    if "r" in parts:
        nodes.append(oh.make_node("Relu", ["x"], ["r"]))
    if "const" in parts:
        constants["const"] = R.standard_normal((n, 2, h, w)).astype(np.float32)
    nodes += [oh.make_node("Concat", parts, ["y"], axis=1), oh.make_node("Conv", ["y", "wn"], ["z"])]
    model = _model(nodes, shape, ["z"], constants)
    target.check(model, _x(shape))
    if target.backend == "cpu" and target.precision == "fp32":
        steps = target.session(model)._impl.steps
        concat = next(s for s in steps if s.op == "Concat")
        assert (concat.placement == "view") == view, concat
        assert sum("written into its Concat's channels" in s.note for s in steps) == in_place, [s.note for s in steps]


# -- DepthToSpace and SpaceToDepth ---------------------------------------------------------------------
DEPTH_CASES = {
    # name: (op, x shape, blocksize, mode or None, opset)
    "d2s_dcr": ("DepthToSpace", (1, 8, 3, 5), 2, "DCR", 17),
    "d2s_crd": ("DepthToSpace", (2, 8, 2, 3), 2, "CRD", 17),
    "d2s_default_block3": ("DepthToSpace", (1, 18, 2, 2), 3, None, 17),
    "s2d_block2": ("SpaceToDepth", (1, 3, 4, 6), 2, None, 17),
    "s2d_block3": ("SpaceToDepth", (2, 2, 6, 3), 3, None, 17),
    "s2d_crd_opset28": ("SpaceToDepth", (1, 2, 4, 6), 2, "CRD", 28),
}


@pytest.mark.parametrize("case", DEPTH_CASES)
def test_depth_and_space(target, case: str) -> None:
    op, shape, block, mode, opset = DEPTH_CASES[case]
    attrs = {"blocksize": block, **({"mode": mode} if mode else {})}
    target.check(single_node_model(op, shape, opset=opset, **attrs), _x(shape), exact=target.precision == "fp32")


# -- exporters' graphs ----------------------------------------------------------------------------------
def test_yolov8_style_head(target) -> None:
    """Two scales reshaped and concatenated, split into boxes and classes, boxes sliced into
    halves, classes transposed: the head's run-time data movement."""
    nodes = [oh.make_node("Conv", ["x", "w2"], ["p2"], strides=[2, 2], pads=[1, 1, 1, 1]),
             oh.make_node("Conv", ["x", "w1"], ["p1"], pads=[1, 1, 1, 1]),
             oh.make_node("Reshape", ["p1", "flat1"], ["f1"]), oh.make_node("Reshape", ["p2", "flat2"], ["f2"]),
             oh.make_node("Concat", ["f1", "f2"], ["cat"], axis=2),
             oh.make_node("Split", ["cat", "sizes"], ["box", "cls"], axis=1),
             oh.make_node("Slice", ["box", "zero", "two", "one"], ["xy"]),
             oh.make_node("Slice", ["box", "two", "four", "one"], ["wh"]),
             oh.make_node("Sub", ["wh", "xy"], ["d"]),
             oh.make_node("Sigmoid", ["cls"], ["s"]), oh.make_node("Transpose", ["s"], ["y"], perm=[0, 2, 1])]
    model = _model(nodes, (1, 3, 8, 8), ["d", "y"], {
        "w1": R.standard_normal((9, 3, 3, 3)).astype(np.float32) * 0.3,
        "w2": R.standard_normal((9, 3, 3, 3)).astype(np.float32) * 0.3,
        "flat1": _ints(1, 9, 64), "flat2": _ints(1, 9, 16), "sizes": _ints(4, 5),
        "zero": _ints(0), "two": _ints(2), "four": _ints(4), "one": _ints(1)})
    target.check(model, _x((1, 3, 8, 8)))


def _torch_module():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class DataMovement(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shuffle, self.unshuffle = nn.PixelShuffle(2), nn.PixelUnshuffle(2)

        def forward(self, x):
            a, b = torch.split(x, [3, 5], dim=1)
            left, right = torch.chunk(x, 2, dim=3)
            return (torch.cat([b, a], 1), torch.cat([right, left * 2], -1), x[:, 1:5, ::2], x[:, 0],
                    x.reshape(1, 2, 4, 6, 6).permute(0, 2, 3, 4, 1), self.shuffle(x), self.unshuffle(x))
    return torch, DataMovement()


def _torch_export() -> onnx.ModelProto:
    torch, module = _torch_module()
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.zeros(1, 8, 6, 6),), buffer, dynamo=False, opset_version=17, input_names=["x"])
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the legacy exporter says it is legacy
def test_torch_export(target) -> None:
    model = _torch_export()
    sess = target.check(model, _x((1, 8, 6, 6)), exact=target.precision == "fp32")
    ops = {node.op for node in sess.graph.nodes}
    assert {"Split", "Slice", "Gather", "Concat", "Transpose", "DepthToSpace"} <= ops, ops


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_bridge_runs_the_imported_graph() -> None:
    """The fine-tuning bridge's torch lowerings compute what the reference kernels compute, at
    the graph's batch and at another one (whole axes stay whole)."""
    torch, module = _torch_module()
    from edgesdk.compress.torch_bridge import GraphModule
    model = _torch_export()
    with edgesdk.Session(model, backend="reference") as sess:
        x = _x((1, 8, 6, 6))["x"]
        expected = sess.run(None, {"x": x})
        bridge = GraphModule(sess.graph)
    with torch.no_grad():
        got = bridge(torch.from_numpy(x))
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g.numpy(), e)


def test_torch_lowerings_of_canonical_nodes() -> None:
    """Every op of the family through the bridge, against the reference kernels (negative
    steps, both DepthToSpace modes, Expand with new leading axes, Tile, Gather of a matrix)."""
    torch = pytest.importorskip("torch")
    from edgesdk.compress.torch_bridge import GraphModule
    models = [single_node_model("Slice", (3, 10, 6), {"s": _ints(1, -1), "e": _ints(9, -100), "a": _ints(1, 2),
                                                       "t": _ints(3, -2)}),
              single_node_model("Gather", (2, 3, 6, 4), {"i": np.array([[3, 1], [-1, 0]])}, axis=2),
              single_node_model("Expand", (3, 1, 5), {"s": _ints(2, 3, 4, 5)}),
              single_node_model("Tile", (2, 3, 4), {"r": _ints(1, 2, 3)}),
              single_node_model("Split", (2, 7, 4), {"s": _ints(2, 5)}, axis=1, n_outputs=2),
              single_node_model("DepthToSpace", (1, 8, 3, 5), blocksize=2, mode="DCR"),
              single_node_model("DepthToSpace", (1, 8, 3, 5), blocksize=2, mode="CRD"),
              single_node_model("SpaceToDepth", (1, 2, 4, 6), blocksize=2),
              single_node_model("SpaceToDepth", (1, 2, 4, 6), opset=28, blocksize=2, mode="CRD")]
    for model in models:
        shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        x = _x(shape)["x"]
        with edgesdk.Session(model, backend="reference") as sess:
            expected = sess.run(None, {"x": x})
            got = GraphModule(sess.graph)(torch.from_numpy(x))
        got = got if isinstance(got, tuple) else (got,)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g.detach().numpy(), e, err_msg=model.graph.node[0].op_type)


# -- packages -----------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_package_of_the_torch_export_runs_everywhere(tmp_path) -> None:
    """Split's several outputs and every canonical attribute survive a package."""
    from edgesdk.loader import load_model
    from edgesdk.package import save_package
    model = _torch_export()
    x = _x((1, 8, 6, 6))
    path = tmp_path / "moves.edgepkg"
    save_package(load_model(model), path)
    with edgesdk.Session(model, backend="reference") as sess:
        expected = sess.run(None, x)
    for backend in ("reference", "cpu", "opencl"):
        try:
            sess = edgesdk.Session(path, backend=backend)
        except edgesdk.errors.BackendUnavailableError:
            continue
        with sess:
            for g, e in zip(sess.run(None, x), expected):
                np.testing.assert_array_equal(g, e, err_msg=backend)


# -- errors ----------------------------------------------------------------------------------------------
ERROR_CASES = {
    "gather_index_out_of_range": (single_node_model("Gather", (2, 5), {"i": _ints(5)}, axis=1),
                                  "Gather index 5 is out of range for axis 1 of (2, 5)"),
    "gather_run_time_indices": (_model([oh.make_node("Gather", ["c", "x"], ["y"])], (2,), ["y"],
                                       {"c": np.ones((3, 4), np.float32)}), "Gather indices must be constant"),
    "slice_step_0": (single_node_model("Slice", (4, 4), {"s": _ints(0), "e": _ints(2), "a": _ints(0), "t": _ints(0)}),
                     "Slice step 0 on axis 0"),
    "slice_selects_nothing": (single_node_model("Slice", (4, 4), {"s": _ints(3), "e": _ints(1)}),
                              "does not run zero-sized tensors"),
    "slice_run_time_starts": (_model([oh.make_node("Slice", ["c", "x", "e"], ["y"])], (1,), ["y"],
                                     {"c": np.ones((4,), np.float32), "e": _ints(3)}),
                              "Slice starts must be constant"),
    "split_sizes_do_not_add_up": (single_node_model("Split", (2, 7), {"s": _ints(3, 3)}, axis=1, n_outputs=2),
                                  "split [3, 3] does not cut 7 into 2 parts"),
    "split_unequal_without_sizes": (single_node_model("Split", (2, 7), axis=1, n_outputs=2),
                                    "Split of 7 into 2 equal parts"),
    "expand_does_not_broadcast": (single_node_model("Expand", (2, 3), {"s": _ints(4, 3, 2)}), "do not broadcast"),
    "tile_repeats_per_axis": (single_node_model("Tile", (2, 3), {"r": _ints(2)}), "one repeat per axis"),
    "depth_to_space_channels": (single_node_model("DepthToSpace", (1, 6, 2, 2), blocksize=2),
                                "6 channels do not split into blocks of 2x2"),
    "space_to_depth_odd_width": (single_node_model("SpaceToDepth", (1, 2, 4, 5), blocksize=2),
                                 "4x5 does not split into blocks of 2x2"),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_bad_models_are_refused_in_one_line(case: str) -> None:
    model, words = ERROR_CASES[case]
    with pytest.raises(UnsupportedModelError) as info:
        edgesdk.Session(model, backend="reference")
    message = str(info.value)
    assert words in message and "\n" not in message, message


def test_constant_cases_still_fold() -> None:
    """Shape arithmetic: Gather, Slice, Expand and Tile of constants fold at import (the shape
    of x feeds a Reshape target through all four)."""
    nodes = [oh.make_node("Shape", ["x"], ["s"]),
             oh.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             oh.make_node("Slice", ["s", "one", "big"], ["rest"]),
             oh.make_node("Expand", ["n", "one"], ["n1"]),
             oh.make_node("Tile", ["rest", "one"], ["rest1"]),
             oh.make_node("Concat", ["n1", "rest1"], ["target"], axis=0),
             oh.make_node("Reshape", ["x", "target"], ["y"])]
    model = _model(nodes, (2, 3, 4), ["y"], {"zero": _ints(0), "one": _ints(1), "big": _ints(I64.max)})
    with edgesdk.Session(model, backend="cpu") as sess:
        assert [n.op for n in sess.graph.nodes] in ([], ["Reshape"])
        x = _x((2, 3, 4))["x"]
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)
