"""The native CPU backend: pybind11 SIMD kernels (``edgesdk._native.kernels``) with runtime ISA
dispatch. Modules: ``program`` (buffers, layouts, the arena, the step list), ``ops`` (the op
table: lowerings to native kernels, numpy moves or explicit reference fallbacks), ``weights``
(packing, compressed formats), ``threads`` (the default thread count), ``backend``."""
from .backend import CPUBackend, StepInfo
from .threads import physical_cores

__all__ = ["CPUBackend", "StepInfo", "physical_cores"]
