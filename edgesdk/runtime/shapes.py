"""Static shape math shared by the importer, the planner and every backend.

Each runtime op has a shape function over its *normalised* attributes (see ``onnx_import``):
Conv/pool pads are always explicit ``(top, left, bottom, right)``, Reshape carries its final shape,
axes are non-negative. Outputs are ``(shape, dtype)`` pairs.
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import EdgeSDKError, ModelTooLargeError, UnsupportedModelError
from ..graph import Graph, Node

Shape = tuple[int, ...]
ShapeFn = Callable[[Node, list[Shape]], list[Shape]]


def conv_output_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int,
                     pad_end: int) -> int:
    extent = (kernel - 1) * dilation + 1
    return (size + pad_begin + pad_end - extent) // stride + 1


def pool_output_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int,
                     pad_end: int, ceil_mode: bool) -> int:
    """Output length of a pooling window sweep.

    With ceil_mode the last window may hang over the end, but it must start inside the input or
    the begin padding; otherwise it is dropped (the rule PyTorch and ONNX Runtime share).
    """
    extent = (kernel - 1) * dilation + 1
    span = size + pad_begin + pad_end - extent
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def pool_sweep(node: Node, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output size of a pooling node on an h x w input, and the padding its window sweep needs:
    the explicit pads plus the ceil_mode overhang past the end, as (top, left, bottom, right)."""
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    oh = pool_output_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
    ow = pool_output_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
    over_h = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + pt + pb))
    over_w = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + pl + pr))
    return (oh, ow), (pt, pl, pb + over_h, pr + over_w)


def same_pads(auto_pad: str, sizes: Shape, kernel: Shape, strides: Shape, dilations: Shape
              ) -> tuple[int, ...]:
    """Explicit (begin..., end...) pads for ONNX auto_pad SAME_UPPER / SAME_LOWER / VALID."""
    if auto_pad == "VALID":
        return (0,) * (2 * len(sizes))
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else big)
        ends.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begins + ends)


def broadcast_shapes(*shapes: Shape) -> Shape:
    """numpy's broadcasting rule in Python ints: numpy's own refuses dims past int64 with a
    misleading error, and the size checks need the exact (however absurd) result."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(int(d) for d in s) for s in shapes]):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise UnsupportedModelError(f"shapes {' and '.join(map(str, shapes))} do not broadcast")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise UnsupportedModelError(f"{what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _conv(node: Node, shapes: list[Shape]) -> list[Shape]:
    (n, c, h, w), wshape = shapes[0], shapes[1]
    a = node.attrs
    if c != wshape[1] * a["group"]:
        raise UnsupportedModelError(
            f"node {node.name!r}: input has {c} channels but weights expect {wshape[1]} x group {a['group']}")
    kh, kw = a["kernel_shape"]
    if (kh, kw) != tuple(wshape[2:]):  # ONNX requires them equal; kernels follow the weights
        raise UnsupportedModelError(f"node {node.name!r}: kernel_shape {[kh, kw]} does not match the "
                                    f"weights' {list(wshape[2:])}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    if oh <= 0 or ow <= 0:
        raise UnsupportedModelError(f"node {node.name!r}: input {h}x{w} is too small for its kernel")
    return [(n, wshape[0], oh, ow)]


def _pool(node: Node, shapes: list[Shape]) -> list[Shape]:
    n, c, h, w = shapes[0]
    a = node.attrs
    kh, kw = a["kernel_shape"]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    oh = pool_output_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
    ow = pool_output_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
    if oh <= 0 or ow <= 0:
        raise UnsupportedModelError(f"node {node.name!r}: input {h}x{w} is too small for its window")
    return [(n, c, oh, ow)]


def _global_pool(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [shapes[0][:2] + (1,) * (len(shapes[0]) - 2)]


def _gemm(node: Node, shapes: list[Shape]) -> list[Shape]:
    a_shape, b_shape = shapes[0], shapes[1]
    m, k = a_shape[::-1] if node.attrs["transA"] else a_shape
    k2, n = b_shape[::-1] if node.attrs["transB"] else b_shape
    if k != k2:
        raise UnsupportedModelError(f"node {node.name!r}: Gemm inner sizes differ ({k} vs {k2})")
    if len(shapes) > 2 and shapes[2]:
        broadcast_shapes((m, n), shapes[2])
    return [(m, n)]


def _matmul(node: Node, shapes: list[Shape]) -> list[Shape]:
    a, b = shapes
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise UnsupportedModelError(f"node {node.name!r}: MatMul inner sizes differ ({a} x {b})")
    out = broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [out]


def _eltwise(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [broadcast_shapes(*shapes)]


def _same(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [shapes[0]]


def _reshape(node: Node, shapes: list[Shape]) -> list[Shape]:
    target = tuple(node.attrs["shape"])
    if math.prod(target) != math.prod(shapes[0]):
        raise UnsupportedModelError(f"node {node.name!r}: cannot reshape {shapes[0]} to {target}")
    return [target]


def _transpose(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [tuple(shapes[0][p] for p in node.attrs["perm"])]


def _concat(node: Node, shapes: list[Shape]) -> list[Shape]:
    axis = node.attrs["axis"]
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis):
            raise UnsupportedModelError(f"node {node.name!r}: cannot concatenate {first} and {s} on axis {axis}")
    return [first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]]


def _pad(node: Node, shapes: list[Shape]) -> list[Shape]:
    pads, rank = node.attrs["pads"], len(shapes[0])
    out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shapes[0]))
    if min(out) < 0:
        raise UnsupportedModelError(f"node {node.name!r}: pads {pads} crop {shapes[0]} below zero")
    return [out]


def _reduce(node: Node, shapes: list[Shape]) -> list[Shape]:
    axes, keep = node.attrs["axes"], node.attrs["keepdims"]
    return [tuple(1 if i in axes else d for i, d in enumerate(shapes[0]) if keep or i not in axes)]


SHAPE_FUNCTIONS: dict[str, ShapeFn] = {
    "Conv": _conv,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _eltwise, "Sub": _eltwise, "Mul": _eltwise, "Div": _eltwise,
    "Relu": _same, "Clip": _same, "LeakyRelu": _same, "Sigmoid": _same, "Tanh": _same,
    "HardSigmoid": _same, "HardSwish": _same,
    "BatchNormalization": _same, "Softmax": _same, "LRN": _same,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Concat": _concat,
    "Pad": _pad,
    "ReduceMean": _reduce,
}

RUNTIME_OPS = frozenset(SHAPE_FUNCTIONS)


def infer_node(node: Node, graph: Graph, limit: "SizeLimit | None" = None) -> list[tuple[Shape, np.dtype]]:
    """Output shapes and dtypes of ``node`` from its input tensors in ``graph``. Raises
    ModelTooLargeError when an output, the node's scratch or an attribute is beyond what this
    machine holds or the kernels index: this runs before any backend allocates the node."""
    fn = SHAPE_FUNCTIONS[node.op]
    shapes = [graph.tensors[i].shape if i else () for i in node.inputs]
    dtype = graph.tensors[node.inputs[0]].dtype
    outputs = fn(node, shapes)
    limit = limit or size_limit()
    for name, shape in zip(node.outputs, outputs):
        check_tensor_size(name, shape, dtype, role="activation", node=node, limit=limit)
    check_node(node, shapes, dtype, limit)
    return [(s, dtype) for s in outputs]


def infer_shapes(graph: Graph) -> None:
    """Create (or check) the tensor of every node output, in node order. For hand-built graphs
    and packages; inputs and constants are size-checked first, each node's outputs as inferred."""
    limit = size_limit()
    for name in graph.inputs:
        tensor = graph.tensors[name]
        check_tensor_size(name, tensor.shape, tensor.dtype, role="input", limit=limit)
    for tensor in graph.constants():
        check_tensor_size(tensor.name, tensor.shape, tensor.dtype, role="constant", limit=limit)
    for node in graph.nodes:
        if node.op not in SHAPE_FUNCTIONS:
            raise UnsupportedModelError(f"node {node.name!r}: op {node.op!r} has no runtime kernel; "
                                        f"supported: {', '.join(sorted(SHAPE_FUNCTIONS))}")
        for name, (shape, dtype) in zip(node.outputs, infer_node(node, graph, limit)):
            existing = graph.tensors.get(name)
            if existing is None:
                graph.add_tensor(name, shape, dtype)
            elif existing.shape != shape:
                raise UnsupportedModelError(
                    f"node {node.name!r}: output {name!r} is declared {existing.shape} but computes to {shape}")


# ---------------------------------------------------------------------------------------------
# Size limits. Every tensor's bytes follow from its static shape, so an absurd model (a declared
# 1x3x100000x100000 input, Conv pads of 2**62, a ConstantOfShape of 10**12 elements) is refused
# here, in one typed line, before numpy or the native code allocates it or overflows on it. All
# arithmetic is on Python ints, which cannot wrap.
# ---------------------------------------------------------------------------------------------
INT32_MAX = 2**31 - 1  # the OpenCL kernels index elements and take attributes as 32-bit int
INT64_MAX = 2**63 - 1  # numpy's intp; the C++ kernels' size_t / ptrdiff_t index arithmetic
MAX_BYTES_ENV = "EDGESDK_MAX_TENSOR_BYTES"
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_MULTIPLIERS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50, "e": 2**60}
# ONNX TensorProto.DataType -> numpy dtype, for the folding predictions (without importing onnx,
# which a Session running a package never needs)
_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
                7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


@dataclass(frozen=True)
class SizeLimit:
    """The most bytes one tensor (or the live activations together) may take, and where that
    number comes from, for the error message."""
    nbytes: int
    source: str

    def describe(self) -> str:
        if self.source == MAX_BYTES_ENV:
            return f"the {format_bytes(self.nbytes)} limit set by {MAX_BYTES_ENV}"
        return f"the {format_bytes(self.nbytes)} of {self.source} ({MAX_BYTES_ENV} overrides it)"


def format_bytes(n: int) -> str:
    """``n`` bytes in binary units, e.g. ``223.5 GiB``; exact, absurd sizes stay readable."""
    if n < 1024:
        return f"{n} B"
    if n.bit_length() > 1000:  # beyond what a float holds: the power of two says enough
        return f"about 2^{n.bit_length() - 1} bytes"
    value = n / 1024
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}" if value < 1e4 else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _parse_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtpe]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if match is None or float(match[1]) <= 0:
        raise EdgeSDKError(f"{MAX_BYTES_ENV}={text!r} is not a positive size in bytes; use e.g. "
                           f"{MAX_BYTES_ENV}=68719476736 or {MAX_BYTES_ENV}=64G")
    number, multiplier = match[1], _MULTIPLIERS[match[2].lower()]
    return int(number) * multiplier if number.isdigit() else int(float(number) * multiplier)


@functools.lru_cache(maxsize=1)
def _machine_limit() -> SizeLimit:
    """Physical memory, or the container's memory limit (cgroup v2, then v1) where smaller: a
    tensor larger than either can never be held, only swapped or OOM-killed."""
    limit = SizeLimit(INT64_MAX, "the 64-bit address range")  # where sysconf does not exist
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if physical > 0:
            limit = SizeLimit(physical, "physical memory")
    except (AttributeError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:  # not pathlib: it is not imported on `import edgesdk`
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < limit.nbytes:  # "max" (v2) or ~2^63 (v1): no limit
            limit = SizeLimit(int(text), "the container's memory limit")
    return limit


def size_limit() -> SizeLimit:
    """The per-tensor (and peak activation) limit: ``EDGESDK_MAX_TENSOR_BYTES`` when set (bytes,
    or a number with K/M/G/T/P/E, binary), else this machine's memory."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    return SizeLimit(_parse_bytes(raw), MAX_BYTES_ENV) if raw else _machine_limit()


def max_tensor_bytes() -> int:
    """The most bytes one tensor may take here (see :func:`size_limit`)."""
    return size_limit().nbytes


def tensor_nbytes(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of a dense tensor, exact for any shape (``Tensor.nbytes`` wraps past int64)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def _dims_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape) if len(shape) else "scalar"


def _subject(name: str, shape: Sequence[int], dtype: Any, role: str, node: Node | None) -> str:
    label = name if role == "scratch" else repr(name)  # a scratch name already says what it is
    what = f"{label} of shape {_dims_text(shape)} {np.dtype(dtype)}"
    where = f"node {node.name!r} ({node.op}): " if node is not None else ""
    return where + {"input": "input ", "activation": "output ", "constant": "constant ",
                    "scratch": ""}[role] + what


def _way_out(role: str, name: str) -> str:
    if role == "input":
        # a package's shapes were fixed when it was packed: the way out is the same ONNX load
        return (f"load the ONNX model with a smaller shape, input_shapes={{{name!r}: (...)}} (CLI: "
                f"--input-shape {name}=...), or use a machine with more memory")
    if role == "constant":
        return "the model computes it from constants, so no input shape changes it: fix the model"
    return ("its size follows from the input shapes and the node's attributes: pass smaller "
            "input_shapes=... (CLI: --input-shape NAME=...) or fix the model")


def check_tensor_size(name: str, shape: Sequence[int], dtype: Any, *, role: str = "activation",
                      node: Node | None = None, limit: SizeLimit | None = None) -> int:
    """The bytes of tensor ``name``; ModelTooLargeError (one line: the tensor, its node, shape,
    dtype, the bytes, the limit and the way out) when they exceed ``limit`` (default
    :func:`size_limit`) or when a dimension is past the 64-bit range numpy and the kernels
    index. ``role`` is "input", "activation", "constant" or "scratch" (memory a kernel needs
    beyond its output, e.g. a padded input; ``name`` then says what it is)."""
    shape = tuple(map(int, shape))
    limit = limit or size_limit()
    itemsize = np.dtype(dtype).itemsize
    nbytes = math.prod(shape) * itemsize
    if 0 < nbytes <= limit.nbytes and nbytes <= INT64_MAX and min(shape, default=1) > 0:
        return nbytes  # the common case, checked once per tensor at every load: keep it cheap
    if any(d < 0 for d in shape):
        raise UnsupportedModelError(f"{_subject(name, shape, dtype, role, node)} has a negative dimension")
    if nbytes > limit.nbytes:
        raise ModelTooLargeError(
            f"{_subject(name, shape, dtype, role, node)} would need {format_bytes(nbytes)}, more than "
            f"{limit.describe()}; {_way_out(role, name)}", tensor=name, nbytes=nbytes, limit=limit.nbytes)
    # An empty tensor needs no bytes, but numpy still computes strides from the other dimensions
    span = math.prod(max(d, 1) for d in shape) * itemsize
    if span > INT64_MAX:
        raise ModelTooLargeError(
            f"{_subject(name, shape, dtype, role, node)} has dimensions past the 64-bit range numpy and "
            f"the kernels index ({format_bytes(span)} were its empty axes 1); {_way_out(role, name)}",
            tensor=name, nbytes=nbytes, limit=INT64_MAX)
    return nbytes


def _check_attribute(node: Node, attr: str, values: Sequence[int], low: int) -> None:
    """Attribute values within ``low``..INT32_MAX: the OpenCL kernels take them as 32-bit int and
    the C++ ones multiply them in 64 bits, so larger values overflow there (no real model has a
    stride or pad of two billion)."""
    values = [int(v) for v in values]
    if all(low <= v <= INT32_MAX for v in values):
        return
    shown = values[0] if len(values) == 1 else values
    message = (f"node {node.name!r} ({node.op}) computing {node.outputs[0]!r}: {attr} {shown} out of "
               f"range {low}..{INT32_MAX}")
    if max(values) > INT32_MAX:
        raise ModelTooLargeError(f"{message} (the kernels index with 32-bit ints); fix the model's {attr}",
                                 tensor=node.outputs[0])
    raise UnsupportedModelError(f"{message}; fix the model's {attr}")


def _check_window(node: Node, shapes: list[Shape], dtype: np.dtype, limit: SizeLimit) -> None:
    a = node.attrs
    if len(shapes[0]) != 4:
        return  # not a 2-D window: the shape function says so
    n, c, h, w = shapes[0]
    if node.op == "Conv":
        pads = tuple(a["pads"])
    else:  # pooling sweeps may hang over the end with ceil_mode: that overhang is padding too
        _, pads = pool_sweep(node, h, w)
    # The numpy kernels (reference, and the cpu backend's fallbacks) materialise the padded input
    check_tensor_size(f"padded input {node.inputs[0]!r}", (n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]),
                      dtype, role="scratch", node=node, limit=limit)
    for attr, low in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("pads", 0)):
        _check_attribute(node, attr, a[attr], low)


def _check_lrn(node: Node, shapes: list[Shape], dtype: np.dtype, limit: SizeLimit) -> None:
    # Windows wider than the channels sum the same values, but size also scales alpha (alpha /
    # size), so it cannot be clipped here; the kernels clip the window, and OpenCL takes it as int.
    _check_attribute(node, "size", [node.attrs["size"]], 1)


def _check_pad(node: Node, shapes: list[Shape], dtype: np.dtype, limit: SizeLimit) -> None:
    pads, rank = node.attrs["pads"], len(shapes[0])
    _check_attribute(node, "pads (magnitude)", [abs(int(p)) for p in pads], 0)
    # Positive pads before any crop: the most any kernel holds on the way to the output
    grown = tuple(d + max(0, pads[i]) + max(0, pads[i + rank]) for i, d in enumerate(shapes[0]))
    check_tensor_size(f"padded input {node.inputs[0]!r}", grown, dtype, role="scratch", node=node, limit=limit)


_NODE_CHECKS: dict[str, Callable[[Node, list[Shape], np.dtype, SizeLimit], None]] = {
    "Conv": _check_window, "MaxPool": _check_window, "AveragePool": _check_window,
    "LRN": _check_lrn, "Pad": _check_pad,
}


def check_node(node: Node, shapes: list[Shape], dtype: Any, limit: SizeLimit | None = None) -> None:
    """Attribute ranges and scratch memory of a runtime node on inputs of ``shapes`` (its outputs
    are checked with :func:`check_tensor_size`)."""
    check = _NODE_CHECKS.get(node.op)
    if check is not None:
        check(node, shapes, np.dtype(dtype), limit or size_limit())


def check_graph_sizes(graph: Graph, limit: SizeLimit | None = None) -> SizeLimit:
    """Every tensor of ``graph`` (inputs, constants, activations, outputs) and every node's
    attributes and scratch against :func:`size_limit`, from the shapes alone; returns the limit.
    Whatever built the graph (ONNX import, a package, a pass, a hand-built Graph), this runs
    before a backend allocates anything for it."""
    limit = limit or size_limit()
    tensors = graph.tensors
    for name in graph.inputs:
        check_tensor_size(name, tensors[name].shape, tensors[name].dtype, role="input", limit=limit)
    for tensor in graph.constants():  # shapes only: an encoded weight is not decoded for this
        check_tensor_size(tensor.name, tensor.shape, tensor.dtype, role="constant", limit=limit)
    for node in graph.nodes:
        for name in node.outputs:
            if name and name in tensors and not tensors[name].is_constant:
                check_tensor_size(name, tensors[name].shape, tensors[name].dtype, node=node, limit=limit)
        if node.inputs and node.inputs[0] in tensors:
            check_node(node, [tensors[i].shape if i in tensors else () for i in node.inputs],
                       tensors[node.inputs[0]].dtype, limit)
    return limit


# -- constant folding --------------------------------------------------------------------------
def _onnx_dtype(code: Any, default: Any = np.float64) -> np.dtype:
    # Unknown codes count as 8 bytes an element: the prediction may overestimate, never under.
    return np.dtype(_ONNX_DTYPES.get(int(code), default)) if code is not None else np.dtype(default)


def _range_length(start: Any, limit: Any, delta: Any) -> int | None:
    start, limit, delta = (np.asarray(v).reshape(-1)[0].item() for v in (start, limit, delta))
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        return max(0, -(-(limit - start) // delta)) if delta else None
    if not all(math.isfinite(v) for v in (start, limit, delta)) or delta == 0:
        return None  # numpy refuses these itself, without allocating
    return max(0, math.ceil((limit - start) / delta))


def folded_outputs(node: Node, values: Sequence[np.ndarray | None]) -> list[tuple[Shape, np.dtype]] | None:
    """The (shape, dtype) of each output of ``node`` when it is evaluated on the constant
    ``values``, computed without evaluating it, for the ops whose output can be far larger than
    their inputs (ConstantOfShape, Expand, Tile, Range, Gather, broadcasting ops, Cast, every
    runtime op). None when it cannot be predicted (malformed inputs: evaluating then raises) or
    the output is no larger than an input already in memory."""
    op = node.op
    arrays = [np.asarray(v) if v is not None else None for v in values]
    try:
        if op == "ConstantOfShape":
            fill = node.attrs.get("value")
            dtype = _onnx_dtype(getattr(fill, "data_type", None)) if fill is not None else np.dtype(np.float32)
            return [(tuple(int(d) for d in arrays[0].reshape(-1)), dtype)]
        if op == "Expand":
            target = tuple(int(d) for d in arrays[1].reshape(-1))
            return [(broadcast_shapes(arrays[0].shape, target), arrays[0].dtype)]
        if op == "Tile":
            shape, reps = arrays[0].shape, tuple(int(r) for r in arrays[1].reshape(-1))
            if min(reps, default=0) < 0:
                return None  # np.tile refuses negative repeats itself
            rank = max(len(shape), len(reps))  # np.tile's rule when the lengths differ
            shape, reps = (1,) * (rank - len(shape)) + shape, (1,) * (rank - len(reps)) + reps
            return [(tuple(d * r for d, r in zip(shape, reps)), arrays[0].dtype)]
        if op == "Range":
            length = _range_length(*arrays[:3])
            return None if length is None else [((length,), arrays[0].dtype)]
        if op == "Gather":
            data, indices = arrays[0], arrays[1]
            axis = normalize_axis(int(node.attrs.get("axis", 0)), data.ndim)
            return [(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)]
        if op in ("Equal", "Less", "Greater", "Where", "Pow", "Min", "Max"):
            shape = broadcast_shapes(*(a.shape for a in arrays if a is not None))
            dtype = (np.dtype(bool) if op in ("Equal", "Less", "Greater") else
                     arrays[1].dtype if op == "Where" else arrays[0].dtype if op == "Pow" else
                     np.result_type(*[a for a in arrays if a is not None]))
            return [(shape, dtype)]
        if op == "Cast":
            return [(arrays[0].shape, _onnx_dtype(node.attrs.get("to")))]
        if op in SHAPE_FUNCTIONS:
            shapes = [a.shape if a is not None else () for a in arrays]
            return [(s, arrays[0].dtype) for s in SHAPE_FUNCTIONS[op](node, shapes)]
    except (EdgeSDKError, ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError):
        return None  # not predictable: evaluating the node reports what is wrong with it
    return None


def check_folding(node: Node, values: Sequence[np.ndarray | None], limit: SizeLimit | None = None) -> None:
    """ModelTooLargeError before a constant ``node`` is evaluated (constant folding, at import or
    in a pass) when an output it would allocate, or a runtime op's scratch, is beyond the limit."""
    predicted = folded_outputs(node, values)
    if predicted is None:
        return
    limit = limit or size_limit()
    for name, (shape, dtype) in zip(node.outputs, predicted):
        check_tensor_size(name or f"{node.name}:output", shape, dtype, role="constant", node=node, limit=limit)
    if node.op in _NODE_CHECKS:
        check_node(node, [np.shape(v) if v is not None else () for v in values],
                   np.asarray(values[0]).dtype, limit)


def check_element_counts(graph: Graph, max_elements: int, backend: str) -> None:
    """ModelTooLargeError when a tensor of ``graph`` has more elements than ``backend``'s kernels
    index (the opencl kernels use 32-bit int: INT32_MAX); for a backend to call as it builds."""
    for tensor in graph.tensors.values():
        elements = math.prod(tensor.shape)
        if elements > max_elements:
            raise ModelTooLargeError(
                f"tensor {tensor.name!r} of shape {_dims_text(tensor.shape)} {tensor.dtype} has {elements} "
                f"elements, more than the {max_elements} the {backend} backend's kernels index "
                f"({format_bytes(tensor_nbytes(tensor.shape, tensor.dtype))}); use the cpu backend or "
                f"pass smaller input_shapes=... (CLI: --input-shape NAME=...)",
                tensor=tensor.name, nbytes=tensor_nbytes(tensor.shape, tensor.dtype))
