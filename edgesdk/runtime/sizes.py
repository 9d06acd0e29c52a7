"""Size limits. Every tensor's bytes follow from its static shape, so an absurd model (a declared
1x3x100000x100000 input, Conv pads of 2**62, a ConstantOfShape of 10**12 elements) is refused
here, in one typed line, before numpy or the native code allocates it or overflows on it. All
arithmetic is on Python ints, which cannot wrap.
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import EdgeSDKError, ModelTooLargeError, UnsupportedModelError

if TYPE_CHECKING:
    from ..graph import Graph, Node

INT32_MAX = 2**31 - 1  # the OpenCL kernels index elements and take attributes as 32-bit int
INT64_MAX = 2**63 - 1  # numpy's intp; the C++ kernels' size_t / ptrdiff_t index arithmetic
MAX_BYTES_ENV = "EDGESDK_MAX_TENSOR_BYTES"
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_MULTIPLIERS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50, "e": 2**60}


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


def parse_size(text: str) -> int | None:
    """``64G``, ``1.5M``, ``65536``, ``512KiB`` -> bytes (binary units, K to E); None for anything
    else or a size that is not positive (callers word the error for their setting)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtpe]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if match is None or float(match[1]) <= 0:
        return None
    number, multiplier = match[1], _MULTIPLIERS[match[2].lower()]
    value = int(number) * multiplier if number.isdigit() else int(float(number) * multiplier)
    return value if value > 0 else None


def _parse_bytes(text: str) -> int:
    value = parse_size(text)
    if value is None:
        raise EdgeSDKError(f"{MAX_BYTES_ENV}={text!r} is not a positive size in bytes; use e.g. "
                           f"{MAX_BYTES_ENV}=68719476736 or {MAX_BYTES_ENV}=64G")
    return value


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


def _subject(name: str, shape: Sequence[int], dtype: Any, role: str, node: "Node | None") -> str:
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
                      node: "Node | None" = None, limit: SizeLimit | None = None) -> int:
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


def check_attribute(node: "Node", attr: str, values: Sequence[int], low: int) -> None:
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


def check_element_counts(graph: "Graph", max_elements: int, backend: str) -> None:
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
