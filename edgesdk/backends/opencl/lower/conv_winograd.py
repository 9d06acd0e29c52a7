"""Winograd F(2x2, 3x3) convolutions (``cl_kernels/conv_winograd.cl``).

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

from ....graph import Node
from ..config import DeviceConfig
from ..kernels import DeviceBuffer, Launch, LoweringContext, ceil_div, storage_defines

# U = G g G^T maps a 3x3 filter g to the 4x4 Winograd domain (see transform_weights).
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
    """Whether the convolution ``geom`` (an conv.ConvGeometry) with weights stored as
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


def transform_weights(w: np.ndarray, block: int) -> np.ndarray:
    """(OC, C, 3, 3) -> U = G g G^T packed (16, ceil(OC / block), C, block), zero past OC, in w's
    dtype. G g G^T is computed in float32 (each entry is a sum of at most nine weights scaled by
    1, 1/2 or 1/4), within float32 rounding of the exact value, then stored in w's dtype."""
    oc, c = w.shape[:2]
    blocks = ceil_div(oc, block)
    f = w.astype(np.float32, copy=False)
    r0, r1, r2 = f[:, :, 0, :], f[:, :, 1, :], f[:, :, 2, :]
    out = np.zeros((16, blocks * block, c), w.dtype)
    for a, t in enumerate((r0, (r0 + r1 + r2) * 0.5, (r0 - r1 + r2) * 0.5, r2)):  # G g, row a
        c0, c1, c2 = t[:, :, 0], t[:, :, 1], t[:, :, 2]
        for b, plane in enumerate((c0, (c0 + c1 + c2) * 0.5, (c0 - c1 + c2) * 0.5, c2)):  # (G g) G^T, column b
            out[a * 4 + b, :oc] = plane
    return np.ascontiguousarray(out.reshape(16, blocks, block, c).transpose(0, 1, 3, 2))


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
        ctx.launch("conv_winograd.cl", "winograd_input", defines, [x, scratch],
                   (ceil_div(tx, ctx.vec) * geom.n * ty, geom.c), "winograd_input"),
        ctx.launch("conv_winograd.cl", "winograd_gemm", defines, [scratch, u],
                   (ceil_div(count, t.rows), ceil_div(geom.oc, block), 16), "winograd"),
        # x and U too: a NaN output (an infinite input, inf - inf in the transforms) is recomputed directly
        ctx.launch("conv_winograd.cl", "winograd_output", defines, [scratch, epilogue.bias or ctx.dummy, x, u, y],
                   (count, ceil_div(geom.oc, ctx.vec)), "winograd_output"),
    ]
