"""The OpenCL backend (pyopencl, OpenCL 1.2 kernels in ``cl_kernels/``).

Modules, one concern each: ``device`` (platforms, selection, properties), ``config`` (device
family tunables from ``device_configs/``), ``programs`` (kernel sources and the program binary
cache), ``memory`` (map-state-tracked buffers, the liveness-planned arena), ``kernels`` (the op
table) with ``lower/<family>.py`` (the lowerings), ``profile`` (per-op records) and
``backend`` (the Backend implementation). pyopencl is imported only when a device is opened.
"""
from .backend import OpenCLBackend
from .device import describe_devices
from .memory import MappedBufferError

__all__ = ["OpenCLBackend", "describe_devices", "MappedBufferError"]
