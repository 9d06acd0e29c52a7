"""Geometry shared by shape rules, kernels and backends: window sweeps, SAME padding,
broadcasting and axis normalisation, all on Python ints (they cannot wrap)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedModelError

if TYPE_CHECKING:
    from ..graph import Node

Shape = tuple[int, ...]

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


def pool_sweep(node: "Node", h: int, w: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
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
