"""The cpu backend's lowerings, one module per op family (the families of ``edgesdk.ops``)."""
from __future__ import annotations

from . import conv, conv_transpose, elementwise, linear, lq, normalization, pool, quantize, reduce, resize, tensor  # noqa: F401 (register)
from .base import LOWERINGS, Lowering, fallback, lowering

__all__ = ["LOWERINGS", "Lowering", "fallback", "lowering"]
