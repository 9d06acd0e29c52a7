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


@kernel("Pad")
def pad(node: Node, x: np.ndarray) -> np.ndarray:
    pads, mode, rank = node.attrs["pads"], node.attrs["mode"], x.ndim
    begins, ends = pads[:rank], pads[rank:]
    # Negative pads crop; apply them first, then pad by the positive parts.
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    if mode == "constant":
        return np.pad(x, widths, constant_values=x.dtype.type(node.attrs["value"]))
    return np.pad(x, widths, mode=_NUMPY_PAD_MODE[mode])
