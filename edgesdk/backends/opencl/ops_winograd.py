"""Winograd F(2x2, 3x3) convolutions (``cl_kernels/winograd.cl``).

A 3x3 / stride-1 / undilated / ungrouped convolution with dense weights runs as an input
transform into a scratch block of the arena (``winograd_input``), the 16 transformed-domain GEMMs
(``winograd_gemm``) and the output transform with bias and activation (``winograd_output``):
2.25x fewer products than the direct kernels. The scratch holds 4 floats per input and per output
value and is planned in the arena like every activation (the profile's peak memory includes it).
The weights are transformed once, at session creation, from the values the direct kernels would
use (rounded to half first in fp16 mode); they take 16/9 of the direct kernels' bytes.

Whether a layer takes this path is :func:`winograd_applies`, from the device's ``winograd``
tunables: the reduction C*9 must reach ``min_k`` (the transforms cost the same per input value
whatever the channel count, so few channels leave little to save) and the layer must have at
least ``min_tiles`` 2x2 output tiles (each transformed weight is read once per ``rows`` tiles;
with very few tiles streaming the larger weights costs more than the products saved), and its
scratch must stay within ``max_scratch_mb`` (it grows with the feature maps: 4 floats per input
and output value, 0.5 GB for a 64-channel 512x512 layer). ``min_tiles: null`` turns the path off.
"""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .config import DeviceConfig
from .kernels import DeviceBuffer, Launch, LoweringContext, ceil_div, storage_defines

# U = G g G^T maps a 3x3 filter g to the 4x4 Winograd domain (see _g_times).
G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def tiles(n: int, oh: int, ow: int) -> tuple[int, int, int]:
    """(TY, TX, all tiles of the batch) of 2x2 output tiles."""
    ty, tx = ceil_div(oh, 2), ceil_div(ow, 2)
    return ty, tx, n * ty * tx


def oc_block(config: DeviceConfig, oc: int) -> int:
    """Output channels per work-item: ``vectors`` vectors, fewer when OC is smaller."""
    vec = config.vector_width
    return vec * min(config.tuning("winograd").vectors, ceil_div(oc, vec))


def winograd_applies(config: DeviceConfig, geom, weight_kind: str) -> bool:
    """Whether the convolution ``geom`` (an ops_linear.ConvGeometry) with weights stored as
    ``weight_kind`` ("dense", "fp16", or a compressed kind) runs as Winograd F(2x2, 3x3)."""
    t = config.tuning("winograd")
    if t.min_tiles is None or weight_kind not in ("dense", "fp16"):
        return False
    shape = (geom.kh, geom.kw, geom.sh, geom.sw, geom.dh, geom.dw, geom.groups)
    if shape != (3, 3, 1, 1, 1, 1, 1):
        return False
    block = oc_block(config, geom.oc)
    if geom.oc / (ceil_div(geom.oc, block) * block) < 0.8:  # as conv_oc: most lanes busy
        return False
    if t.max_scratch_mb is not None and scratch_bytes(config, geom) > t.max_scratch_mb * 2 ** 20:
        return False
    return geom.c * 9 >= (t.min_k or 1) and tiles(geom.n, geom.oh, geom.ow)[2] >= t.min_tiles


def _m_offset(geom) -> int:
    """Float offset of M in the scratch block: after V, rounded up to 128 bytes."""
    return ceil_div(16 * geom.c * tiles(geom.n, geom.oh, geom.ow)[2], 32) * 32


def scratch_bytes(config: DeviceConfig, geom) -> int:
    """V (16 x C x tiles) then M (16 x tiles x OC padded to whole blocks), float32."""
    block = oc_block(config, geom.oc)
    padded_oc = ceil_div(geom.oc, block) * block
    return (_m_offset(geom) + 16 * tiles(geom.n, geom.oh, geom.ow)[2] * padded_oc) * 4


def _g_times(a: np.ndarray, axis: int) -> np.ndarray:
    """G applied along ``axis`` (length 3 -> 4): g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2."""
    g0, g1, g2 = (np.take(a, i, axis=axis) for i in range(3))
    return np.stack([g0, (g0 + g1 + g2) * 0.5, (g0 - g1 + g2) * 0.5, g2], axis=axis)


def transform_weights(w: np.ndarray, block: int) -> np.ndarray:
    """(OC, C, 3, 3) -> U = G g G^T packed (16, ceil(OC / block), C, block), zero past OC, in w's
    dtype (computed in float64 from the stored values, rounded once)."""
    oc, c = w.shape[:2]
    blocks = ceil_div(oc, block)
    u = np.zeros((blocks * block, c, 4, 4))
    u[:oc] = _g_times(_g_times(w.astype(np.float64), 2), 3)
    return np.ascontiguousarray(u.reshape(blocks, block, c, 16).transpose(3, 0, 2, 1), dtype=w.dtype)


def winograd_launches(ctx: LoweringContext, node: Node, geom, x: DeviceBuffer, x_half: bool, y: DeviceBuffer,
                      y_half: bool, epilogue) -> list[Launch]:
    """The three launches (one program) of a Winograd layer; its scratch block is V then M."""
    t = ctx.config.tuning("winograd")
    block = oc_block(ctx.config, geom.oc)
    u, u_half = ctx.packed(node.inputs[1], f"winograd-f2-{block}", lambda w: transform_weights(w, block),
                           kind="winograd")
    scratch = ctx.scratch[node.name]
    ty, tx, count = tiles(geom.n, geom.oh, geom.ow)
    defines = {"WINOGRAD_INPUT": 1, "WINOGRAD_GEMM": 1, "WINOGRAD_OUTPUT": 1, "N": geom.n, "C": geom.c,
               "H": geom.h, "W": geom.w, "OC": geom.oc, "OH": geom.oh, "OW": geom.ow, "PT": geom.pt, "PL": geom.pl,
               "TY": ty, "TX": tx, "M_OFFSET": _m_offset(geom), "PIX": t.rows, "NV": block // ctx.vec,
               **storage_defines(X=x_half, W=u_half, Y=y_half), **epilogue.defines()}
    return [
        ctx.launch("winograd.cl", "winograd_input", defines, [x, scratch],
                   (ceil_div(tx, ctx.vec) * geom.n * ty, geom.c), "winograd_input"),
        ctx.launch("winograd.cl", "winograd_gemm", defines, [scratch, u],
                   (ceil_div(count, t.rows), ceil_div(geom.oc, block), 16), "winograd"),
        ctx.launch("winograd.cl", "winograd_output", defines, [scratch, epilogue.bias or ctx.dummy, y],
                   (count, ceil_div(geom.oc, ctx.vec)), "winograd_output"),
    ]
