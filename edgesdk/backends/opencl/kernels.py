"""The op table of the OpenCL backend and what a lowering function gets to work with.

``KERNELS`` maps an op type to a lowering function ``fn(ctx, node) -> list[Launch]`` that builds
(specialised, cached) programs and binds their arguments once; running a session then only
enqueues the launches. A lowering function raises :class:`NotLowerable` for a variant it does not
cover (e.g. Pad in reflect mode); the backend then places that node on the reference backend and
says so in the profile.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...graph import Graph, Node
from ...runtime.activations import Activation
from ...runtime.fallback import NotLowerable  # noqa: F401 (the lowerings raise it from here)
from .config import DeviceConfig
from .device import Device, _cl
from .memory import DeviceBuffer
from .programs import ProgramCache


@dataclass
class Launch:
    """One enqueued kernel with its arguments already bound."""
    name: str
    kernel: Any
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    buffers: tuple[DeviceBuffer, ...]

    def enqueue(self, queue: Any) -> Any:
        for buffer in self.buffers:
            buffer.check_device_owned(self.name)
        return _cl().enqueue_nd_range_kernel(queue, self.kernel, self.global_size, self.local_size)


@dataclass
class TensorRef:
    """An activation as a kernel sees it: its buffer, shape and storage (half or float)."""
    name: str
    buffer: DeviceBuffer
    shape: tuple[int, ...]
    half: bool

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass
class WeightRecord:
    """A constant the backend put on the device, and in what form (for reports and tests)."""
    tensor: str
    kind: str  # dense-fp32, dense-fp16, codebook, indices, centroids, assignment, csr-*
    nbytes: int


# common.cl's ACT_* ids. Gelu and Swish are looked up by their variant (activation_id).
ACTIVATION_IDS = {None: 0, "Relu": 1, "Clip": 2, "LeakyRelu": 3, "Sigmoid": 4, "Tanh": 5,
                  "HardSigmoid": 6, "HardSwish": 7, "Gelu": 8, "GeluTanh": 9, "Erf": 10, "Exp": 11, "Log": 12,
                  "Abs": 13, "Sqrt": 14, "Reciprocal": 15, "Neg": 16, "Square": 17, "Silu": 18, "Mish": 19,
                  "Softplus": 20}


def activation_id(act: Activation) -> int:
    """The ACT id of ``act``; NotLowerable for a Swish with a slope other than 1 (no kernel has one)."""
    if act.kind == "Gelu":
        return ACTIVATION_IDS["Gelu" if act.gelu_approximation == "none" else "GeluTanh"]
    if act.kind == "Swish":
        if not act.fusable:
            raise NotLowerable(f"{act} (alpha other than 1) has no OpenCL activation")
        return ACTIVATION_IDS["Silu"]
    return ACTIVATION_IDS[act.kind]


def activation_defines(act: Activation | None) -> dict[str, Any]:
    if act is None:
        return {"ACT": 0}
    params = list(act.params) + [0.0, 0.0]
    return {"ACT": activation_id(act), "ACT_P0": float(params[0]), "ACT_P1": float(params[1])}


@dataclass
class LoweringContext:
    """What a lowering function may use: tensors, weights, scratch, programs and tunables."""
    graph: Graph
    device: Device
    config: DeviceConfig
    programs: ProgramCache
    precision: str
    half_products: int  # HALF_PRODUCTS: 0 off, 1 native cl_khr_fp16, 2 emulated
    tensors: dict[str, TensorRef]
    scratch: dict[str, DeviceBuffer]  # node name -> its scratch block
    upload: Callable[[str, str, np.ndarray], DeviceBuffer]  # (tensor, kind, array) -> buffer
    dummy: DeviceBuffer  # bound where a kernel's optional argument (bias) is absent
    weight_cache: dict[tuple[str, str], tuple[DeviceBuffer, bool]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the current node's step notes (the backend resets it)

    def note(self, text: str) -> None:
        """Say something about how the current node runs (its step note in profiles)."""
        if text not in self.notes:
            self.notes.append(text)

    # -- tensors and weights ------------------------------------------------------------------
    def act(self, name: str) -> TensorRef:
        return self.tensors[name]

    def is_const(self, name: str | None) -> bool:
        return bool(name) and self.graph.tensors[name].is_constant

    def encoding(self, name: str):
        return self.graph.tensors[name].encoding

    def dense(self, name: str, *, transpose: bool = False, axes: tuple[int, ...] | None = None
              ) -> tuple[DeviceBuffer, bool]:
        """A float constant on the device as (buffer, stored-as-half). fp16-encoded constants
        go up as their half bits in either precision; fp32 ones are rounded to half in fp16 mode
        (exactly what the reference's fp16 model computes with). ``transpose`` / ``axes`` store
        the array transposed (a layout some kernels vectorise better)."""
        axes = axes if axes is not None else ((1, 0) if transpose else None)
        if axes is None:
            return self.packed(name, "", lambda values: values)
        return self.packed(name, str(axes), lambda values: np.ascontiguousarray(values.transpose(axes)))

    def packed(self, name: str, layout: str, pack: Callable[[np.ndarray], np.ndarray], kind: str = "dense"
               ) -> tuple[DeviceBuffer, bool]:
        """:meth:`dense` with the values rearranged (or transformed) by ``pack`` first; ``pack``
        gets and returns arrays of the storage dtype (float16 or float32), and the result is
        cached per (name, layout). ``kind`` prefixes the weight record (``dense-fp16``...)."""
        key = (name, layout)
        enc = self.encoding(name)
        if enc is not None and enc.kind == "huffman":
            self.note(f"{name}: {enc.describe()} decoded at load")
            kind = "decoded" if kind == "dense" else kind
        hit = self.weight_cache.get(key)
        if hit is not None:
            return hit
        values = self._dense_values(name)
        values = np.ascontiguousarray(pack(values))
        half = values.dtype == np.float16
        buffer = self.upload(name, f"{kind}-fp16" if half else f"{kind}-fp32", values)
        self.weight_cache[key] = (buffer, half)
        return buffer, half

    def _dense_values(self, name: str) -> np.ndarray:
        tensor = self.graph.tensors[name]
        enc = tensor.encoding
        if enc is not None and enc.kind == "fp16":
            values = np.asarray(enc.values).reshape(enc.shape)
        elif enc is not None and enc.kind == "huffman":
            # Huffman-coded weights whose kernel does not apply: decoded once, run as dense ones
            # (rounded to half in fp16 mode, as the reference's fp16 model rounds decoded weights).
            values = enc.decode()
            if self.precision == "fp16" and values.size > 1:
                values = values.astype(np.float16)
        elif enc is not None:
            raise NotLowerable(f"constant {name!r} is stored {enc.describe()}, which this op cannot read")
        else:
            values = np.asarray(tensor.data)
            if values.dtype != np.float32:
                raise NotLowerable(f"constant {name!r} has dtype {values.dtype}")
            if self.precision == "fp16" and values.size > 1:  # scalars stay fp32 (runtime.precision)
                values = values.astype(np.float16)
        return values

    def small_float(self, name: str, kind: str, values: np.ndarray) -> DeviceBuffer:
        """A small float32 table derived from constants (codebooks, BatchNorm scale/shift)."""
        key = (name, kind)
        hit = self.weight_cache.get(key)
        if hit is None:
            hit = self.weight_cache[key] = (self.upload(name, kind, np.ascontiguousarray(values, np.float32)), False)
        return hit[0]

    def raw(self, name: str, kind: str, values: np.ndarray) -> DeviceBuffer:
        key = (name, kind)
        hit = self.weight_cache.get(key)
        if hit is None:
            hit = self.weight_cache[key] = (self.upload(name, kind, np.ascontiguousarray(values)), False)
        return hit[0]

    # -- programs ----------------------------------------------------------------------------
    @property
    def vec(self) -> int:
        return self.config.vector_width

    def launch(self, file: str, kernel: str, defines: dict[str, Any], args: list[DeviceBuffer],
               global_size: tuple[int, ...], tuning_name: str | None = None,
               local_size: tuple[int, ...] | None = None) -> Launch:
        """Build (or fetch) the program, bind ``args`` and size the NDRange: the global size is
        rounded up to a multiple of the tuned work-group size; kernels guard the excess."""
        defines = {"VEC": self.vec, "HALF_PRODUCTS": self.half_products,
                   "HALF_VECTOR_SCALAR": int(self.config.half_vectors == "scalar"), **defines}
        program = self.programs.get(file, defines)
        cl_kernel = _cl().Kernel(program, kernel)
        cl_kernel.set_args(*[a.cl_buffer for a in args])
        if local_size is None and tuning_name is not None:
            local_size = self.config.tuning(tuning_name).local
        if local_size is not None:
            local_size = self._fit_local(local_size, len(global_size))
            global_size = tuple(-(-g // l) * l for g, l in zip(global_size, local_size))
        return Launch(kernel, cl_kernel, tuple(int(g) for g in global_size), local_size, tuple(args))

    def _fit_local(self, local: tuple[int, ...], rank: int) -> tuple[int, ...]:
        """The tuned size padded/cut to the NDRange rank and shrunk to the device's limits."""
        sizes = list(local[:rank]) + [1] * (rank - len(local))
        limits = self.device.info.max_work_item_sizes
        sizes = [min(s, limits[i] if i < len(limits) else 1) for i, s in enumerate(sizes)]
        while math.prod(sizes) > self.device.info.max_work_group_size:
            biggest = max(range(rank), key=lambda i: sizes[i])
            sizes[biggest] = max(1, sizes[biggest] // 2)
        return tuple(sizes)


LowerFn = Callable[[LoweringContext, Node], list[Launch]]
KERNELS: dict[str, LowerFn] = {}
# Ops that are views of their input: no kernel, no memory of their own.
VIEW_OPS = frozenset({"Reshape"})


def kernel(*ops: str) -> Callable[[LowerFn], LowerFn]:
    def register(fn: LowerFn) -> LowerFn:
        for op in ops:
            if op in KERNELS:
                raise AssertionError(f"two OpenCL lowerings for {op}")
            KERNELS[op] = fn
        return fn
    return register


def storage_defines(**roles: bool) -> dict[str, int]:
    """{"X": True} -> {"X_HALF": 1}: which kernel arguments are stored as half."""
    return {f"{role}_HALF": int(bool(half)) for role, half in roles.items()}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
