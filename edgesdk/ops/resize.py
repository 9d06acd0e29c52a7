"""Resize (opsets 10-19) and Upsample (7, 9): nearest and linear interpolation of the last axis
of an (N, C, W) tensor or the last two of an (N, C, H, W) one.

The IR node is ``Resize(x)`` with normalised attributes: ``mode`` (nearest, linear),
``coordinate_transformation_mode``, ``nearest_mode``, ``scales`` (per axis, the scale the
coordinate transformation divides by) and ``sizes`` (the output shape). The scales and sizes
inputs, the opset-18 ``axes`` and ``keep_aspect_ratio_policy`` are resolved at import; Resize-10
and Upsample (which the opset upgrade turns into Resize-11 with the wrong defaults) keep their own
rules (asymmetric coordinates, ONNX Runtime's "simple" rounding).

Every backend reads the same per-axis tables, :func:`plane_tables`: for each output index the
source index (nearest), or the two source indices and the weight of the second (linear). They
are computed in float32 arithmetic in ONNX Runtime's order of operations, so a coordinate that
lands on a rounding boundary picks the same source pixel as ONNX Runtime does.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from .geometry import normalize_axis
from .registry import STRING, Signature, floats, ints, op

MODES = ("nearest", "linear")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn")
# "simple" is Resize-10's and Upsample's rounding (ONNX Runtime's name): truncate when
# upsampling, ceil when downsampling; the importer sets it for those ops only.
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")
HALF_TIE = 1e-6  # how close to a half a coordinate counts as a tie (ONNX Runtime's tolerance)

resize = op("Resize", family="resize", signature=Signature(1, 0, {
    "mode": STRING, "coordinate_transformation_mode": STRING, "nearest_mode": STRING,
    "scales": floats(), "sizes": ints()}),
    note="nearest and linear over the last axis of (N, C, W) or the last two of (N, C, H, W); no cubic, "
         "tf_crop_and_resize or antialias")
upsample = op("Upsample", family="resize", imports_as="Resize")


# -- the coordinate tables ------------------------------------------------------------------------
@dataclass(frozen=True)
class AxisTable:
    """Source positions of one resized axis, one entry per output index: ``first`` (nearest:
    the source index), and for linear ``second`` and the weight of the second, so that
    out = in[first] * (1 - weight) + in[second] * weight. Read-only (tables are cached)."""
    first: np.ndarray   # int32
    second: np.ndarray  # int32
    weight: np.ndarray  # float32


def source_coordinates(out_size: int, in_size: int, scale: float, coordinate_mode: str) -> np.ndarray:
    """The input coordinate of every output index (float32), as ONNX Runtime computes it."""
    x = np.arange(out_size, dtype=np.float32)
    s, half = np.float32(scale), np.float32(0.5)
    if coordinate_mode == "asymmetric":
        return x / s
    if coordinate_mode == "half_pixel":
        return (x + half) / s - half
    if coordinate_mode == "pytorch_half_pixel":
        return (x + half) / s - half if out_size > 1 else np.zeros(out_size, np.float32)
    if coordinate_mode == "tf_half_pixel_for_nn":
        return (x + half) / s
    if coordinate_mode == "align_corners":
        if out_size == 1:
            return np.zeros(1, np.float32)
        return x * np.float32(in_size - 1) / np.float32(out_size - 1)
    if coordinate_mode == "half_pixel_symmetric":
        # float32 up to the offset, then double (ORT's expression mixes in double literals)
        adjustment = np.float32(out_size) / (s * np.float32(in_size))
        offset = np.float32(in_size) / np.float32(2) * (np.float32(1) - adjustment)
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(np.float32)
    raise UnsupportedModelError(f"Resize coordinate_transformation_mode {coordinate_mode!r} is not supported")


def _nearest_indices(coords: np.ndarray, nearest_mode: str, downsampling: bool) -> np.ndarray:
    """Round source coordinates to indices (unclamped). ONNX Runtime counts a coordinate within
    1e-6 of a half as a tie (so 3.4999998, the float32 image of 3.5, still rounds as a half);
    other coordinates go to the nearest integer. In float64, where these steps are exact."""
    v = coords.astype(np.float64)
    if nearest_mode == "floor":
        return np.floor(v)
    if nearest_mode == "ceil":
        return np.ceil(v)
    if nearest_mode == "simple":
        return np.ceil(v) if downsampling else np.trunc(v)
    below = np.floor(v)
    tie = np.abs(v - below - 0.5) <= HALF_TIE
    if nearest_mode == "round_prefer_ceil":
        return np.where(tie, below + 1, np.floor(v + 0.5))
    if nearest_mode == "round_prefer_floor":
        return np.where(tie, below, np.floor(v + 0.5))
    raise UnsupportedModelError(f"Resize nearest_mode {nearest_mode!r} is not supported")


def _read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    for a in arrays:
        a.setflags(write=False)
    return arrays


@functools.lru_cache(maxsize=512)
def axis_table(in_size: int, out_size: int, scale: float, mode: str, coordinate_mode: str,
               nearest_mode: str) -> AxisTable:
    """The table of one axis. A scale of exactly 1 maps every index to itself, whatever the
    coordinate mode (ONNX Runtime skips the transformation then)."""
    if scale == 1.0:
        identity = np.minimum(np.arange(out_size), in_size - 1).astype(np.int32)
        return AxisTable(*_read_only(identity, identity, np.zeros(out_size, np.float32)))
    with np.errstate(all="ignore"):  # a (crafted) scale near 0 or float32's end overflows: clamp what comes out
        coords = source_coordinates(out_size, in_size, scale, coordinate_mode)
    coords = np.nan_to_num(coords, nan=0.0, posinf=in_size - 1, neginf=0.0)
    if mode == "nearest":
        rounded = _nearest_indices(coords, nearest_mode, scale < 1.0)
        index = np.clip(rounded, 0, in_size - 1).astype(np.int32)
        return AxisTable(*_read_only(index, index, np.zeros(out_size, np.float32)))
    clamped = np.clip(coords, np.float32(0), np.float32(in_size - 1))
    first = np.minimum(clamped.astype(np.int32), in_size - 1).astype(np.int32)
    second = np.minimum(first + 1, in_size - 1).astype(np.int32)
    weight = (clamped - first.astype(np.float32)).astype(np.float32)
    weight[first == second] = 0.0  # the last source pixel: all weight on it
    return AxisTable(*_read_only(first, second, weight))


_SINGLE_ROW = AxisTable(*_read_only(np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32)))


def plane_shape(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a rank-4 tensor; (N, C, 1, W) of a rank-3 one (the kernels' view)."""
    if len(shape) == 3:
        return (shape[0], shape[1], 1, shape[2])
    n, c, h, w = shape
    return (n, c, h, w)


def plane_tables(node: Node, in_shape: Sequence[int]) -> tuple[AxisTable, AxisTable]:
    """The (rows, columns) tables of ``node`` on an input of ``in_shape`` (rows: one entry for a
    rank-3 input)."""
    a = node.attrs
    modes = (a["mode"], a["coordinate_transformation_mode"], a["nearest_mode"])
    rank = len(in_shape)
    cols = axis_table(int(in_shape[-1]), int(a["sizes"][-1]), float(a["scales"][-1]), *modes)
    if rank == 3:
        return _SINGLE_ROW, cols
    rows = axis_table(int(in_shape[-2]), int(a["sizes"][-2]), float(a["scales"][-2]), *modes)
    return rows, cols


# -- import ---------------------------------------------------------------------------------------
def _constant_values(imp: Any, name: str, inputs: list[str], index: int, what: str) -> np.ndarray | None:
    """A constant input as a flat array, None when omitted or empty (opset 11 passes an empty
    tensor for the one of scales / sizes it does not use)."""
    value = imp.constant_input(name, inputs, index, what)
    return None if value is None or value.size == 0 else value.reshape(-1)


@resize.importer
def _import_resize(imp, name, inputs, outputs, attrs):
    legacy = imp.source_opset < 11  # Resize-10, which the importer's opset upgrade made a Resize-11
    scales = _constant_values(imp, name, inputs, 1 if imp.opset < 11 else 2, "Resize scales")
    sizes = _constant_values(imp, name, inputs, 3, "Resize sizes") if imp.opset >= 11 else None
    return resize_node(imp, name, inputs[0], outputs[0], attrs, scales, sizes, legacy)


@upsample.importer
def _import_upsample(imp, name, inputs, outputs, attrs):
    if "scales" in attrs:  # Upsample-7
        scales = np.asarray(attrs["scales"], np.float32)
    else:
        scales = _constant_values(imp, name, inputs, 1, "Upsample scales")
    return resize_node(imp, name, inputs[0], outputs[0], attrs, scales, None, legacy=True)


def resize_node(imp: Any, name: str, x: str, y: str, attrs: dict, scales: np.ndarray | None,
                sizes: np.ndarray | None, legacy: bool) -> Node:
    """The canonical Resize node (or a view, when no axis changes)."""
    what = f"node {name!r}: {imp.op_type}"
    mode = attrs.get("mode", "nearest")
    if mode not in MODES:
        raise UnsupportedModelError(f"{what} mode {mode!r} is not supported (nearest and linear are)")
    if attrs.get("antialias", 0):
        raise UnsupportedModelError(f"{what} with antialias=1 is not supported; export without antialiasing")
    coordinate = "asymmetric" if legacy else attrs.get("coordinate_transformation_mode", "half_pixel")
    if coordinate not in COORDINATE_MODES:
        raise UnsupportedModelError(f"{what} coordinate_transformation_mode {coordinate!r} is not supported "
                                    f"({', '.join(COORDINATE_MODES)} are)")
    nearest = "simple" if legacy else attrs.get("nearest_mode", "round_prefer_floor")
    if nearest not in NEAREST_MODES[:-1] and not legacy:
        raise UnsupportedModelError(f"{what} nearest_mode {nearest!r} is not supported")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy not in ASPECT_POLICIES:
        raise UnsupportedModelError(f"{what} keep_aspect_ratio_policy {policy!r} is not supported")
    # exclude_outside, extrapolation_value and cubic_coeff_a only act in cubic mode or with
    # tf_crop_and_resize (both refused above); roi only with tf_crop_and_resize: all ignored.
    shape = imp.shape(x)
    axes = _axes(what, attrs.get("axes"), len(shape))
    factors, out = _output_geometry(what, shape, axes, scales, sizes, policy)
    if tuple(out) == tuple(shape):
        return imp.alias(name, x, y)  # the same shape: ONNX Runtime copies the input, whatever the scales
    _check_resizable(what, shape, factors)
    return Node("Resize", name, [x], [y], {
        "mode": mode, "coordinate_transformation_mode": coordinate,
        "nearest_mode": nearest if mode == "nearest" else "round_prefer_floor",
        "scales": tuple(factors), "sizes": tuple(out)})


def _axes(what: str, axes: Sequence[int] | None, rank: int) -> list[int]:
    if axes is None:
        return list(range(rank))
    normalised = [normalize_axis(int(a), rank, "Resize axis") for a in axes]
    if len(set(normalised)) != len(normalised):
        raise UnsupportedModelError(f"{what} axes {list(axes)} repeat an axis")
    return normalised


def _output_geometry(what: str, shape: Sequence[int], axes: list[int], scales: np.ndarray | None,
                     sizes: np.ndarray | None, policy: str) -> tuple[list[float], list[int]]:
    """(scale, output size) per axis from the scales or the sizes input, as ONNX Runtime derives
    them: float32 products, truncated for scales; out / in for sizes, then the aspect policy."""
    if (scales is None) == (sizes is None):
        raise UnsupportedModelError(f"{what} needs exactly one of scales and sizes (constant, non-empty)")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise UnsupportedModelError(f"{what} has {len(given)} {'scales' if scales is not None else 'sizes'} "
                                    f"for {len(axes)} axes")
    factors, out = [1.0] * len(shape), [int(d) for d in shape]
    if scales is not None:
        for axis, s in zip(axes, scales.astype(np.float32)):
            with np.errstate(over="ignore"):
                product = s * np.float32(shape[axis])
            if not (s > 0 and np.isfinite(product)):
                raise UnsupportedModelError(f"{what} scale {float(s)} is not a positive number of float32 range")
            factors[axis] = float(s)
            out[axis] = _truncate(product)
    else:
        for axis, size in zip(axes, (int(v) for v in sizes)):
            if size < 1:
                raise UnsupportedModelError(f"{what} size {size} is not positive")
            out[axis] = size
            factors[axis] = float(np.float32(size) / np.float32(shape[axis]))
        if policy != "stretch":
            chosen = (min if policy == "not_larger" else max)(factors[a] for a in axes)
            for axis in axes:
                factors[axis] = chosen
                out[axis] = _round_half_away(np.float32(chosen) * np.float32(shape[axis]))
    if min(out) < 1:
        raise UnsupportedModelError(f"{what} output shape {out} is empty")
    return factors, out


def _truncate(value: np.float32) -> int:
    return int(math.trunc(float(value)))


def _round_half_away(value: np.float32) -> int:
    v = float(value)
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def _check_resizable(what: str, shape: Sequence[int], factors: Sequence[float]) -> None:
    rank = len(shape)
    if rank not in (3, 4):
        raise UnsupportedModelError(f"{what} of a rank-{rank} tensor is not supported; edgesdk resizes the "
                                    f"last axis of (N, C, W) and the last two of (N, C, H, W) tensors")
    if factors[0] != 1.0 or factors[1] != 1.0:
        raise UnsupportedModelError(f"{what} scales the batch or channel axis (scales {list(factors)}); only "
                                    f"the spatial axes can be resized")


# -- export ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OnnxForm:
    """A standard ONNX Resize that ONNX Runtime computes exactly as the node does: attributes,
    the scales or the sizes input (over ``axes`` when given), the least opset it needs."""
    attrs: dict[str, Any]
    scales: tuple[float, ...] | None = None
    sizes: tuple[int, ...] | None = None
    opset: int = 17


def onnx_form(node: Node, in_shape: Sequence[int]) -> OnnxForm:
    """The first of: the sizes (when the scales are out / in), the scales (when each size is
    their truncated product, :func:`_exported_scales`), or opset 18's sizes over the resized
    axes with a keep_aspect_ratio_policy that yields the node's one scale (checked with the
    importer's own rules). Resize-10's rounding becomes floor (upsampling) or ceil."""
    a = node.attrs
    scales, sizes = [float(s) for s in a["scales"]], [int(o) for o in a["sizes"]]
    what = f"node {node.name!r}: Resize with scales {scales} to {sizes}"
    resized = [axis for axis, s in enumerate(scales) if s != 1.0]
    nearest = a["nearest_mode"]
    if nearest == "simple":
        up = [scales[axis] > 1 for axis in resized]
        if any(up) and not all(up):
            raise UnsupportedModelError(f"{what}: Resize-10 rounding that up- and downsamples at once has no "
                                        f"form in later opsets")
        nearest = "floor" if all(up) else "ceil"
    attrs = {"mode": a["mode"], "coordinate_transformation_mode": a["coordinate_transformation_mode"],
             "nearest_mode": nearest}
    opset = 19 if a["coordinate_transformation_mode"] == "half_pixel_symmetric" else 17
    if all(s == float(np.float32(o) / np.float32(i)) for s, i, o in zip(scales, in_shape, sizes)):
        return OnnxForm(attrs, sizes=tuple(sizes), opset=opset)
    exported = _exported_scales(node, in_shape, scales, sizes)
    if exported is not None:
        return OnnxForm(attrs, scales=exported, opset=opset)
    for policy in ("not_smaller", "not_larger"):
        given = [_policy_size(policy, sizes[axis], in_shape[axis], scales[axis]) for axis in resized]
        try:
            factors, out = _output_geometry(what, in_shape, resized, None, np.array(given), policy)
        except UnsupportedModelError:
            continue
        if factors == scales and out == sizes:
            return OnnxForm({**attrs, "axes": resized, "keep_aspect_ratio_policy": policy}, sizes=tuple(given),
                            opset=19)
    raise UnsupportedModelError(f"{what} has no standard ONNX Resize form (ONNX Runtime would compute other "
                                f"coordinates)")


def _exported_scales(node: Node, in_shape: Sequence[int], scales: list[float], sizes: list[int]
                     ) -> tuple[float, ...] | None:
    """Scales that give ``sizes`` both in ONNX Runtime (the float32 product, truncated) and in
    onnx's shape inference (the double product, floored), with the node's coordinate tables:
    its own, or one a few ulps away where the two products disagree (1.4 x 5 is 7 in float32,
    6.99... in double)."""
    exported = []
    for s, i, o in zip(scales, in_shape, sizes):
        candidate = np.float32(s)
        for _ in range(64):
            if _truncate(candidate * np.float32(i)) == o and math.floor(float(candidate) * i) == o:
                break
            candidate = np.nextafter(candidate, np.float32(np.inf if float(candidate) * i < o else 0))
        else:
            return None
        if float(candidate) != s and not _same_tables(node, i, o, s, float(candidate)):
            return None
        exported.append(float(candidate))
    return tuple(exported)


def _same_tables(node: Node, in_size: int, out_size: int, scale: float, other: float) -> bool:
    modes = (node.attrs["mode"], node.attrs["coordinate_transformation_mode"], node.attrs["nearest_mode"])
    a, b = axis_table(in_size, out_size, scale, *modes), axis_table(in_size, out_size, other, *modes)
    return (np.array_equal(a.first, b.first) and np.array_equal(a.second, b.second)
            and np.allclose(a.weight, b.weight, rtol=0, atol=1e-6))


def _policy_size(policy: str, size: int, in_size: int, scale: float) -> int:
    """A size for one axis under ``policy``: its own where out / in is the node's scale,
    else one whose ratio loses the min / max to the axes that set the scale."""
    if float(np.float32(size) / np.float32(in_size)) == scale:
        return size
    return 1 if policy == "not_smaller" else math.ceil(scale * in_size) + 1


# -- shape ----------------------------------------------------------------------------------------
@resize.shape
def _shape(node, shapes):
    """The output shape; also checks what a package may have stored (the tables assume it)."""
    a, shape = node.attrs, shapes[0]
    what = f"node {node.name!r}: Resize"
    if (a["mode"] not in MODES or a["coordinate_transformation_mode"] not in COORDINATE_MODES
            or a["nearest_mode"] not in NEAREST_MODES):
        raise UnsupportedModelError(f"{what} has mode {a['mode']!r}, coordinate_transformation_mode "
                                    f"{a['coordinate_transformation_mode']!r}, nearest_mode {a['nearest_mode']!r}; "
                                    f"supported: {MODES}, {COORDINATE_MODES}, {NEAREST_MODES}")
    scales, sizes = tuple(a["scales"]), tuple(int(s) for s in a["sizes"])
    if len(scales) != len(shape) or len(sizes) != len(shape):
        raise UnsupportedModelError(f"{what} has scales {list(scales)} and sizes {list(sizes)} for a "
                                    f"rank-{len(shape)} input")
    if not all(math.isfinite(s) and s > 0 for s in scales) or min(sizes) < 1:
        raise UnsupportedModelError(f"{what} scales {list(scales)} or sizes {list(sizes)} are not positive")
    _check_resizable(what, shape, scales)
    if sizes[:2] != tuple(shape[:2]):
        raise UnsupportedModelError(f"{what} sizes {list(sizes)} change the batch or channels of {list(shape)}")
    return [sizes]


# -- reference ------------------------------------------------------------------------------------
def _lerp(a, b, weight):
    """a * (1 - weight) + b * weight, the kernels' expression (numpy or torch)."""
    return a * (1 - weight) + b * weight


@resize.reference
def _reference(node, x: np.ndarray) -> np.ndarray:
    rows, cols = plane_tables(node, x.shape)
    planes = x.reshape(plane_shape(x.shape))
    if node.attrs["mode"] == "nearest":
        y = planes[:, :, rows.first][:, :, :, cols.first]
    else:
        wx, wy = cols.weight.astype(x.dtype), rows.weight.astype(x.dtype)[:, None]
        along_x = _lerp(planes[..., cols.first], planes[..., cols.second], wx)
        y = _lerp(along_x[:, :, rows.first], along_x[:, :, rows.second], wy)
    return np.ascontiguousarray(y).reshape(node.attrs["sizes"])


@resize.torch
def _torch(m, node, x):
    import torch
    rows, cols = plane_tables(node, tuple(x.shape))  # the batch may differ from the graph's: tables ignore it
    planes = x.reshape(x.shape[0], x.shape[1], -1, x.shape[-1])

    def index(t: np.ndarray):
        return torch.from_numpy(t.astype(np.int64)).to(x.device)

    def weight(t: np.ndarray):
        return torch.from_numpy(t.copy()).to(device=x.device, dtype=x.dtype)

    if node.attrs["mode"] == "nearest":
        y = planes.index_select(2, index(rows.first)).index_select(3, index(cols.first))
    else:
        along_x = _lerp(planes.index_select(3, index(cols.first)), planes.index_select(3, index(cols.second)),
                        weight(cols.weight))
        y = _lerp(along_x.index_select(2, index(rows.first)), along_x.index_select(2, index(rows.second)),
                  weight(rows.weight)[:, None])
    return y.reshape((x.shape[0],) + tuple(node.attrs["sizes"][1:]))

