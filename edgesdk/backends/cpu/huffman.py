"""The native side of Huffman-coded weight blocks (:class:`edgesdk.compress.encodings.HuffmanBlocks`,
format in :mod:`edgesdk.compress.huffman`; kernels in ``cpu_native/src/kernels/huffman.h``).

:func:`decode_entries` is the C++ decoder (a 4096-entry lookup per code) that
``HuffmanBlocks.entry_arrays`` (and so the package validator, on every load) uses through
:func:`edgesdk.compress.huffman.native_decoder`: it checks every code, column and block end and
raises ValueError on a stream that breaks the format.
:func:`prepare_conv1x1` builds the streaming sparse 1x1 convolution (``HuffmanConv1x1``) that
decodes one block row at a time into a per-thread workspace just before use.

Importing this module raises ImportError where ``edgesdk._native`` is not built (or predates the
Huffman kernels).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import _native  # ImportError where not built: HuffmanBlocks falls back on the reference
from ...compress.huffman import native_decoder

if not hasattr(_native, "huffman_decode"):
    raise ImportError("edgesdk._native predates the Huffman decoder; reinstall with `pip install .`")

if TYPE_CHECKING:
    from ...compress.encodings import HuffmanBlocks

HuffmanConv1x1 = _native.HuffmanConv1x1


# (rows, cols, codebook indices or -1 for raw values) of every stored entry of a HuffmanBlocks,
# int64, in stored order; ValueError (naming the block) on a stream that breaks the format.
decode_entries = native_decoder()


def prepare_conv1x1(enc: HuffmanBlocks, bias: np.ndarray | None = None, isa: str | None = None) -> HuffmanConv1x1:
    """The streaming 1x1 convolution of ``enc`` (a (K, C) or (K, C, 1, 1) weight): codebook
    values (tables as fp32) or raw fp32 / fp16 values; bias float32 (K,) or None; ``isa`` a level
    this CPU runs (default: the active one). ``run(x, y, act_name, act_alpha, act_beta, threads)``
    then takes x float32 (N, C, H, W)."""
    values = codebook = None
    if enc.codebook is not None:
        codebook = np.ascontiguousarray(enc.codebook, dtype=np.float32)
    else:
        values = np.ascontiguousarray(enc.values)
    return HuffmanConv1x1(
        enc.rows, enc.cols, enc.block_rows, enc.block_cols, enc.layout,
        np.ascontiguousarray(enc.stream), np.ascontiguousarray(enc.block_offsets),
        np.ascontiguousarray(enc.block_entries),
        None if enc.gap_lengths is None else np.ascontiguousarray(enc.gap_lengths),
        None if enc.index_lengths is None else np.ascontiguousarray(enc.index_lengths),
        codebook=codebook, values=values,
        bias=None if bias is None else np.ascontiguousarray(bias, dtype=np.float32), isa=isa)


__all__ = ["HuffmanConv1x1", "decode_entries", "prepare_conv1x1"]
