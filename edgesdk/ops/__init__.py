"""Every op the SDK knows, one module per family; ``OPS`` maps an op type to its :class:`OpSpec`
(importer, shape rule, reference kernel, cost, torch lowering, signature). See ``registry``."""
from __future__ import annotations

from . import constant, conv, conv_transpose, elementwise, linear, lq, normalization, pool, quantize, reduce, resize, tensor  # noqa: F401 (register)
from .registry import OPS, OpSpec, evaluate

FAMILIES = ("conv", "conv_transpose", "linear", "pool", "elementwise", "normalization", "reduce", "resize", "tensor", "constant", "quantize", "lq")


def runtime_ops() -> frozenset[str]:
    """Op types that run on run-time tensors (a shape rule and a reference kernel)."""
    return frozenset(name for name, spec in OPS.items() if spec.runs)


def constant_only_ops() -> frozenset[str]:
    """Op types that are accepted only where they fold to constants at import."""
    return frozenset(name for name, spec in OPS.items() if not spec.runs and spec.reference is not None)


def onnx_operators() -> list[str]:
    """Every ONNX op type the importer accepts (some only on constant inputs)."""
    return sorted(name for name, spec in OPS.items() if spec.importer is not None)


__all__ = ["OPS", "OpSpec", "evaluate", "runtime_ops", "constant_only_ops", "onnx_operators", "FAMILIES"]
