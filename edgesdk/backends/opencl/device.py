"""OpenCL platforms and devices: discovery, selection and the properties kernels are tuned by.

One :class:`Device` per process and physical device: the context and the (profiling) queue are
created once and shared by every session on that device, so a second session costs no driver
set-up. Selection order: an explicit argument, then ``EDGESDK_OPENCL_DEVICE`` (an index into
:func:`list_devices` or a case-insensitive substring of "platform / device"), then the first GPU,
then any device (logged, so the caller knows a CPU stands in for a GPU).
"""
from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

from ...errors import BackendUnavailableError

log = logging.getLogger("edgesdk.opencl")

DEVICE_ENV = "EDGESDK_OPENCL_DEVICE"
_INSTALL_HINT = ("install an OpenCL driver and its ICD loader (e.g. `apt-get install pocl-opencl-icd "
                 "ocl-icd-libopencl1`) and `pip install pyopencl`")


def _cl():
    """pyopencl, imported on first use so that importing edgesdk never needs it."""
    try:
        import pyopencl
    except ImportError as exc:
        raise BackendUnavailableError(f"pyopencl is not importable ({exc}); {_INSTALL_HINT}") from None
    return pyopencl


@functools.cache
def list_devices() -> tuple[Any, ...]:
    """Every OpenCL device of every platform, in a stable order (platform, then device)."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:  # the ICD loader found no platform at all
        raise BackendUnavailableError(f"no OpenCL platform found ({exc}); {_INSTALL_HINT}") from None
    devices = []
    for platform in platforms:
        try:
            devices.extend(platform.get_devices())
        except cl.Error:  # a platform with no device reports an error instead of an empty list
            continue
    if not devices:
        raise BackendUnavailableError(f"OpenCL platforms exist but expose no device; {_INSTALL_HINT}")
    return tuple(devices)


def device_label(device: Any) -> str:
    return f"{device.platform.name.strip()} / {device.name.strip()}"


def is_gpu(device: Any) -> bool:
    return bool(device.type & _cl().device_type.GPU)


def pick_device(spec: str | int | None = None) -> Any:
    """The pyopencl device named by ``spec`` (or the environment), else the preferred one."""
    devices = list_devices()
    spec = os.environ.get(DEVICE_ENV) if spec is None else spec
    if spec is not None and str(spec).strip() != "":
        return _match(devices, str(spec).strip())
    return _default_device(devices)


@functools.cache
def _default_device(devices: tuple[Any, ...]) -> Any:
    """The first GPU, else the first device, said once per process."""
    gpus = [d for d in devices if is_gpu(d)]
    if gpus:
        return gpus[0]
    chosen = devices[0]
    log.warning("no OpenCL GPU found; running on %r (set %s to choose another device)",
                device_label(chosen), DEVICE_ENV)
    return chosen


def _match(devices: tuple[Any, ...], spec: str) -> Any:
    labels = [device_label(d) for d in devices]
    if spec.isdigit():
        index = int(spec)
        if index < len(devices):
            return devices[index]
        raise BackendUnavailableError(
            f"OpenCL device index {index} is out of range; devices: {_numbered(labels)}")
    hits = [d for d, label in zip(devices, labels) if spec.lower() in label.lower()]
    if not hits:
        raise BackendUnavailableError(f"no OpenCL device matches {spec!r}; devices: {_numbered(labels)}")
    return hits[0]


def _numbered(labels: list[str]) -> str:
    return ", ".join(f"{i}: {label}" for i, label in enumerate(labels))


@dataclass(frozen=True)
class DeviceInfo:
    """The properties seed 003's Table 2.1 lists, plus what kernel specialisation needs."""
    platform: str
    name: str
    vendor: str
    type: str
    version: str
    driver_version: str
    global_mem_bytes: int
    global_mem_cache_bytes: int
    global_mem_cacheline_bytes: int
    local_mem_bytes: int
    constant_buffer_bytes: int
    compute_units: int
    max_clock_mhz: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    host_unified_memory: bool
    fp16: bool
    mem_base_addr_align_bits: int
    preferred_vector_width_float: int
    extensions: tuple[str, ...]

    @classmethod
    def of(cls, device: Any) -> "DeviceInfo":
        cl = _cl()
        extensions = tuple(sorted(device.extensions.split()))
        kinds = [name for name in ("GPU", "CPU", "ACCELERATOR") if device.type & getattr(cl.device_type, name)]
        try:
            unified = bool(device.host_unified_memory)
        except cl.Error:  # removed in OpenCL 2.0+ headers of some drivers
            unified = not (device.type & cl.device_type.GPU)
        return cls(
            platform=device.platform.name.strip(), name=device.name.strip(), vendor=device.vendor.strip(),
            type="/".join(kinds) or "OTHER", version=device.version.strip(),
            driver_version=device.driver_version.strip(),
            global_mem_bytes=int(device.global_mem_size),
            global_mem_cache_bytes=int(device.global_mem_cache_size),
            global_mem_cacheline_bytes=int(device.global_mem_cacheline_size),
            local_mem_bytes=int(device.local_mem_size),
            constant_buffer_bytes=int(device.max_constant_buffer_size),
            compute_units=int(device.max_compute_units), max_clock_mhz=int(device.max_clock_frequency),
            max_work_group_size=int(device.max_work_group_size),
            max_work_item_sizes=tuple(int(s) for s in device.max_work_item_sizes),
            host_unified_memory=unified, fp16="cl_khr_fp16" in extensions,
            mem_base_addr_align_bits=int(device.mem_base_addr_align),
            preferred_vector_width_float=int(device.preferred_vector_width_float),
            extensions=extensions)

    @property
    def label(self) -> str:
        return f"{self.platform} / {self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform, "device": self.name, "vendor": self.vendor, "type": self.type,
            "opencl_version": self.version, "driver_version": self.driver_version,
            "global_mem_bytes": self.global_mem_bytes, "global_mem_cache_bytes": self.global_mem_cache_bytes,
            "global_mem_cacheline_bytes": self.global_mem_cacheline_bytes,
            "local_mem_bytes": self.local_mem_bytes, "constant_buffer_bytes": self.constant_buffer_bytes,
            "compute_units": self.compute_units, "max_clock_mhz": self.max_clock_mhz,
            "max_work_group_size": self.max_work_group_size,
            "max_work_item_sizes": list(self.max_work_item_sizes),
            "host_unified_memory": self.host_unified_memory, "fp16": self.fp16,
            "mem_base_addr_align_bytes": self.mem_base_addr_align_bits // 8,
            "preferred_vector_width_float": self.preferred_vector_width_float,
            "extensions": list(self.extensions),
        }


class Device:
    """A device with its context and two in-order queues, shared per process: ``queue`` for
    runs, ``profiling_queue`` (events carry timestamps) for profiles."""

    def __init__(self, cl_device: Any) -> None:
        cl = _cl()
        self.cl_device = cl_device
        self.info = DeviceInfo.of(cl_device)
        self.context = cl.Context([cl_device])
        # Runs go through a queue without profiling: on NVIDIA's driver (580.159, H100) a kernel
        # enqueued on a profiling queue cost ~12 us more host time (MobileNetV2's 64 enqueues:
        # 2.90 vs 2.09 ms). Profiles use the second queue, and so need no second session.
        self.queue = cl.CommandQueue(self.context, cl_device)
        self.profiling_queue = cl.CommandQueue(self.context, cl_device,
                                               properties=cl.command_queue_properties.PROFILING_ENABLE)

    @property
    def label(self) -> str:
        return self.info.label

    def __repr__(self) -> str:
        return f"Device({self.label!r})"


@functools.cache
def _device_for(cl_device: Any) -> Device:
    return Device(cl_device)


def open_device(spec: str | int | None = None) -> Device:
    """The shared :class:`Device` for ``spec`` (see the module docstring for the rules)."""
    return _device_for(pick_device(spec))


def describe_devices() -> list[dict[str, Any]]:
    """One dict per OpenCL device with seed 003's Table 2.1 fields (what `edgesdk devices` prints).

    Raises BackendUnavailableError when pyopencl or every OpenCL platform is missing."""
    return [{"index": i, **DeviceInfo.of(d).to_dict()} for i, d in enumerate(list_devices())]


def unavailable_reason() -> str | None:
    try:
        list_devices()
    except BackendUnavailableError as exc:
        return str(exc)
    return None
