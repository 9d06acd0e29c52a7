"""Layout ops: Reshape (a view), Transpose, Concat, Pad."""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .kernels import kernel


@kernel("Reshape")
def reshape(node: Node, x: np.ndarray) -> np.ndarray:
    return x.reshape(node.attrs["shape"])


@kernel("Transpose")
def transpose(node: Node, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(node.attrs["perm"]))


@kernel("Concat")
def concat(node: Node, *xs: np.ndarray) -> np.ndarray:
    return np.concatenate(xs, axis=node.attrs["axis"])


_NUMPY_PAD_MODE = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad_constant(x: np.ndarray, begins, ends, value) -> np.ndarray:
    """Output element o along an axis is input element o - begin where that exists, else
    ``value``: a crop on one side may eat into the padding of the same axis (+10/-10 on a
    dimension of 4 gives 4 values, all padding), which crop-then-pad would get wrong."""
    out_shape = tuple(s + b + e for s, b, e in zip(x.shape, begins, ends))
    out = np.full(out_shape, value, dtype=x.dtype)
    src, dst = [], []
    for size, begin, out_size in zip(x.shape, begins, out_shape):
        lo, hi = max(0, -begin), min(size, out_size - begin)
        if hi <= lo:
            return out  # nothing of the input survives
        src.append(slice(lo, hi))
        dst.append(slice(lo + begin, hi + begin))
    out[tuple(dst)] = x[tuple(src)]
    return out


@kernel("Pad")
def pad(node: Node, x: np.ndarray) -> np.ndarray:
    pads, mode, rank = node.attrs["pads"], node.attrs["mode"], x.ndim
    begins, ends = pads[:rank], pads[rank:]
    if mode == "constant":
        return _pad_constant(x, begins, ends, x.dtype.type(node.attrs["value"]))
    # Negative pads crop; apply them first, then pad by the positive parts.
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    return np.pad(x, widths, mode=_NUMPY_PAD_MODE[mode])
