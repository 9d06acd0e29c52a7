"""Device memory: buffers that know their map state (the arena is planned by ``runtime.arena``).

Zero-copy mode (the default on unified-memory devices, seed 003 §2.2) creates buffers with
``CL_MEM_ALLOC_HOST_PTR`` and lets the host reach them only by mapping; copy mode keeps device
buffers private and moves data with explicit reads and writes (the private-memory baseline).
A mapped buffer belongs to the host: :meth:`DeviceBuffer.check_device_owned` is called for every
buffer a kernel touches, so a kernel can never run on memory the host may be writing (the RW/WW
hazard the seed warns about).

A DeviceBuffer is not thread-safe (its map state is one attribute): the backend maps and writes
its buffers only under its run lock, and an io binding's buffers belong to that binding.

The arena's sub-buffers overlap by design (tensors whose lives do not overlap share memory), and
the order they are freed in matters on NVIDIA's driver: 580.159 (H100) crashes inside
clReleaseMemObject when a sub-buffer is released while a later sub-buffer overlapping it, both
used by kernels, is still alive (measured with bare pyopencl: nested, partial and suffix overlaps
all crash freed oldest-first and pass freed newest-first). So a parent owns its sub-buffers'
OpenCL objects and frees them itself, newest first, whoever drops the last reference and in
whatever order the garbage collector finalizes the Python objects.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import EdgeSDKError
from .device import Device, _cl


class MappedBufferError(EdgeSDKError, RuntimeError):
    """A kernel would run on a buffer that is mapped for host access."""


def release_cl_object(cl_object: Any) -> None:
    """clReleaseMemObject now (pyopencl then skips it when the object is collected)."""
    cl_object.release()


class DeviceBuffer:
    """One OpenCL buffer (or a sub-buffer of the arena) and whether the host holds it mapped."""

    def __init__(self, device: Device, nbytes: int, *, label: str, zero_copy: bool,
                 read_only: bool = False, parent: "DeviceBuffer | None" = None, origin: int = 0) -> None:
        cl = _cl()
        self.device = device
        self.label = label
        self.nbytes = max(int(nbytes), 1)
        self.zero_copy = zero_copy
        self.parent = parent
        self.origin = origin
        self._mapping: Any = None  # pyopencl's MemoryMap while mapped
        self._sub_buffers: list[Any] = []  # the OpenCL objects of this buffer's sub-buffers, oldest first
        mf = cl.mem_flags
        if parent is not None:
            self.cl_buffer = parent.cl_buffer.get_sub_region(origin, self.nbytes)
            parent._sub_buffers.append(self.cl_buffer)
        else:
            flags = mf.READ_ONLY if read_only else mf.READ_WRITE
            if zero_copy:
                flags |= mf.ALLOC_HOST_PTR
            self.cl_buffer = cl.Buffer(device.context, flags, self.nbytes)

    def release_sub_buffers(self) -> None:
        """Free this buffer's sub-buffers now, newest first (see the module docstring); they must
        not be used afterwards. The buffer itself is freed with its last reference."""
        while self._sub_buffers:
            release_cl_object(self._sub_buffers.pop())

    def __del__(self) -> None:
        # The sub-buffers' DeviceBuffers hold their parent, so on the reference-counting path this
        # runs after theirs; when the collector frees a cycle it runs in any order, and the
        # sub-buffers' OpenCL objects are still alive here either way (this list holds them).
        try:
            self.release_sub_buffers()
        except Exception:  # noqa: BLE001 (interpreter shutdown: pyopencl may be half torn down)
            pass

    @property
    def mapped(self) -> bool:
        return self._mapping is not None or (self.parent is not None and self.parent.mapped)

    def map(self, dtype: Any, shape: tuple[int, ...], *, write: bool, read: bool = True) -> np.ndarray:
        """A numpy view of the buffer's memory (zero-copy mode only); the buffer stays host-owned
        until :meth:`unmap`."""
        if not self.zero_copy:
            raise MappedBufferError(f"buffer {self.label!r} is a private device buffer (copy mode); "
                                    f"it cannot be mapped")
        if self._mapping is not None:
            self.unmap()
        cl = _cl()
        flags = 0
        if read:
            flags |= cl.map_flags.READ
        if write:
            flags |= cl.map_flags.WRITE if read else cl.map_flags.WRITE_INVALIDATE_REGION
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        array, _ = cl.enqueue_map_buffer(self.device.queue, self.cl_buffer, flags, 0, (nbytes,),
                                         np.uint8, is_blocking=True)
        self._mapping = array.base
        return array.view(dtype).reshape(shape)

    def unmap(self) -> None:
        if self._mapping is not None:
            self._mapping.release(self.device.queue)
            self._mapping = None

    def write(self, array: np.ndarray) -> None:
        """Copy a host array into the buffer (map + copy in zero-copy mode, a write otherwise)."""
        array = np.ascontiguousarray(array)
        if self.zero_copy:
            np.copyto(self.map(array.dtype, array.shape, write=True, read=False), array)
            self.unmap()
        else:
            _cl().enqueue_copy(self.device.queue, self.cl_buffer, array, is_blocking=True)

    def read(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A fresh host copy of the buffer's contents."""
        if self.zero_copy:
            out = np.array(self.map(dtype, shape, write=False))
            self.unmap()
            return out
        out = np.empty(shape, dtype)
        _cl().enqueue_copy(self.device.queue, out, self.cl_buffer, is_blocking=True)
        return out

    def check_device_owned(self, kernel: str) -> None:
        if self.mapped:
            raise MappedBufferError(f"kernel {kernel!r} would use buffer {self.label!r} while it is mapped "
                                    f"for the host; unmap it first (an io binding unmaps its buffers in binding.run())")

    def __repr__(self) -> str:
        return f"DeviceBuffer({self.label!r}, {self.nbytes} B{', mapped' if self.mapped else ''})"
