"""Conv2d: im2col + matmul per group; depthwise as a sum of shifted slices (no im2col)."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...graph import Node
from ...runtime.shapes import conv_output_size
from .kernels import kernel


def pad_spatial(x: np.ndarray, pads: tuple[int, int, int, int], value: float = 0.0) -> np.ndarray:
    top, left, bottom, right = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def sliding_windows(xp: np.ndarray, kernel_hw: tuple[int, int], strides: tuple[int, int],
                    dilations: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """A (N, C, KH, KW, OH, OW) strided view of the padded input; no copy."""
    n, c = xp.shape[:2]
    s0, s1, s2, s3 = xp.strides
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel_hw, strides, dilations, out_hw
    return as_strided(xp, (n, c, kh, kw, oh, ow), (s0, s1, s2 * dh, s3 * dw, s2 * sh, s3 * sw),
                      writeable=False)


@kernel("Conv")
def conv(node: Node, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    a = node.attrs
    (kh, kw), strides, dilations, pads = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    group = a["group"]
    n, c, h, wd = x.shape
    m, cg = w.shape[:2]
    oh = conv_output_size(h, kh, strides[0], dilations[0], pads[0], pads[2])
    ow = conv_output_size(wd, kw, strides[1], dilations[1], pads[1], pads[3])
    xp = pad_spatial(x, pads)
    if cg == 1 and group == c:
        out = _depthwise(xp, w, strides, dilations, (oh, ow))
    else:
        cols = sliding_windows(xp, (kh, kw), strides, dilations, (oh, ow))
        cols = cols.reshape(n, group, cg * kh * kw, oh * ow)
        out = np.matmul(w.reshape(group, m // group, cg * kh * kw), cols).reshape(n, m, oh, ow)
    if b is not None:
        out += b.reshape(1, m, 1, 1)
    return out


def _depthwise(xp: np.ndarray, w: np.ndarray, strides: tuple[int, int],
               dilations: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    # Looping over the KHxKW taps keeps every step a whole-tensor multiply-add.
    m, _, kh, kw = w.shape
    multiplier = m // xp.shape[1]
    src = np.repeat(xp, multiplier, axis=1) if multiplier > 1 else xp
    (sh, sw), (dh, dw), (oh, ow) = strides, dilations, out_hw
    out = np.zeros((xp.shape[0], m, oh, ow), dtype=np.result_type(xp, w))
    for i in range(kh):
        for j in range(kw):
            tap = src[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            out += tap * w[:, 0, i, j].reshape(1, m, 1, 1)
    return out
