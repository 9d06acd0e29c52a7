"""The ``opencl`` backend: plans device memory, lowers every node to bound kernel launches once,
then runs by enqueueing them.

Set-up (``__init__``), in order:

1. storage: every activation is float, or half in fp16 mode except graph inputs/outputs and the
   outputs of FP32_ONLY_OPS; a Reshape output is a view sharing its input's storage;
2. memory: graph inputs/outputs get their own mappable buffers; every other activation (and the
   scratch of NNM layers) gets an offset in one arena, planned from the execution plan's
   liveness so that tensors that are never alive together share bytes;
3. lowering: each node goes through the ``KERNELS`` table; a node without a kernel (or a variant
   a kernel refuses) is placed on the reference backend, which the profile shows with the reason.

Backend options come from arguments or the environment: ``device`` / EDGESDK_OPENCL_DEVICE,
``config`` / EDGESDK_OPENCL_CONFIG, ``memory`` ("zero_copy" | "copy") / EDGESDK_OPENCL_MEMORY.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, InputError, UnsupportedModelError
from ...graph import Node
from ...runtime.cost import op_label
from ...runtime.plan import ExecutionPlan
from ...runtime.precision import FP32_ONLY_OPS, PRECISIONS, round_to_storage
from ..base import Backend
from . import ops_basic, ops_linear  # noqa: F401 (register the lowerings)
from .config import DeviceConfig, load_device_config
from .device import Device, open_device, unavailable_reason
from .kernels import KERNELS, VIEW_OPS, Launch, LoweringContext, NotLowerable, TensorRef, WeightRecord
from .memory import Block, DeviceBuffer, MappedBufferError, plan_arena
from .ops_linear import scratch_bytes
from ...profile.records import MemoryReport, OpRecord, ProfileReport
from .programs import program_cache

log = logging.getLogger("edgesdk.opencl")
MEMORY_ENV = "EDGESDK_OPENCL_MEMORY"


@dataclass
class _Step:
    node: Node
    placement: str  # opencl | reference | view
    launches: list[Launch]
    note: str = ""


class OpenCLBackend(Backend):
    name = "opencl"
    precisions = PRECISIONS

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return unavailable_reason()

    @classmethod
    def supported_ops(cls) -> frozenset[str]:
        return frozenset(KERNELS) | VIEW_OPS

    def __init__(self, plan: ExecutionPlan, *, precision: str = "fp32", threads: int | None = None,
                 device: str | int | None = None, config: str | os.PathLike | None = None,
                 memory: str | None = None) -> None:
        super().__init__(plan, precision=precision, threads=threads)
        if precision not in PRECISIONS:
            raise BackendUnavailableError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        self.device: Device = open_device(device)
        self.config: DeviceConfig = load_device_config(self.device.info, config)
        memory = memory or os.environ.get(MEMORY_ENV) or self.config.memory
        if memory not in ("zero_copy", "copy"):
            raise BackendUnavailableError(f"memory mode {memory!r} is not 'zero_copy' or 'copy'")
        self.zero_copy = memory == "zero_copy"
        self.programs = program_cache(self.device)
        self.weights: list[WeightRecord] = []
        self._weight_bytes_by_tensor: dict[str, int] = {}
        self._views: dict[str, tuple[DeviceBuffer, np.ndarray]] = {}
        self._staged: dict[str, np.ndarray] = {}
        self._check_graph()
        self._half = self._storage()
        self._root = self._view_roots()
        self._tensors, self._io, self._scratch, self.memory_report = self._allocate()
        self._steps = self._lower()
        log.info("opencl backend on %s (%s, %s): %s", self.device.label, self.config.family, memory,
                 {p: sum(s.placement == p for s in self._steps) for p in ("opencl", "reference", "view")})

    # -- set-up -------------------------------------------------------------------------------
    def _check_graph(self) -> None:
        graph = self.plan.graph
        for name in graph.inputs + graph.outputs:
            tensor = graph.tensors[name]
            if tensor.is_constant:
                raise UnsupportedModelError(f"graph input/output {name!r} is a constant; the opencl "
                                            f"backend needs it computed")
            if tensor.dtype != np.float32:
                raise UnsupportedModelError(f"tensor {name!r} has dtype {tensor.dtype}; the opencl backend "
                                            f"runs float32 graphs")

    def _storage(self) -> dict[str, bool]:
        """Activation name -> stored as half."""
        graph, fp16 = self.plan.graph, self.precision == "fp16"
        io = set(graph.inputs) | set(graph.outputs)
        half = {name: False for name in graph.inputs}
        for step in self.plan.steps:
            node = step.node
            for out in node.outputs:
                if out:
                    half[out] = fp16 and node.op not in FP32_ONLY_OPS and out not in io
        return self._propagate_views(half)

    def _propagate_views(self, half: dict[str, bool]) -> dict[str, bool]:
        # A view shares its source's storage; when either must be float (a graph output, say)
        # both are. Chains of views: repeat until every alias agrees with its source.
        changed = True
        while changed:
            changed = False
            for step in self.plan.steps:
                node = step.node
                if node.op in VIEW_OPS and node.inputs[0] in half:
                    shared = half[node.inputs[0]] and half[node.outputs[0]]
                    if half[node.inputs[0]] != shared or half[node.outputs[0]] != shared:
                        half[node.inputs[0]] = half[node.outputs[0]] = shared
                        changed = True
        return half

    def _view_roots(self) -> dict[str, str]:
        graph = self.plan.graph
        root = {name: name for name in self._half}
        for step in self.plan.steps:
            node = step.node
            if node.op in VIEW_OPS and not graph.tensors[node.inputs[0]].is_constant:
                root[node.outputs[0]] = root[node.inputs[0]]
        return root

    def _allocate(self):
        graph, info = self.plan.graph, self.device.info
        steps = self.plan.steps
        produced = {name: -1 for name in graph.inputs}
        last_use: dict[str, int] = {}
        for index, step in enumerate(steps):
            for out in step.node.outputs:
                if out:
                    produced[out] = index
            for name in step.release:
                last_use[name] = index
        io_roots = {self._root[n] for n in graph.inputs + graph.outputs}
        spans: dict[str, list[int]] = {}
        for name, root in self._root.items():
            if root in io_roots:
                continue
            first, last = produced[name], last_use.get(name, produced[name])
            span = spans.setdefault(root, [first, last])
            span[0], span[1] = min(span[0], first), max(span[1], last)
        blocks = [Block(root, self._nbytes(root), first, last) for root, (first, last) in spans.items()]
        scratch_sizes = {}
        for index, step in enumerate(steps):
            need = scratch_bytes(step.node, graph, self.config) if step.node.op in ("Conv", "Gemm") else 0
            if need:
                scratch_sizes[step.node.name] = need
                blocks.append(Block(f"scratch:{step.node.name}", need, index, index))
        alignment = max(info.mem_base_addr_align_bits // 8, 64)
        arena_bytes = plan_arena(blocks, alignment)
        arena = DeviceBuffer(self.device, arena_bytes, label="arena", zero_copy=self.zero_copy) if blocks else None
        buffers: dict[str, DeviceBuffer] = {}
        for block in blocks:
            buffers[block.name] = DeviceBuffer(self.device, block.nbytes, label=block.name, zero_copy=self.zero_copy,
                                               parent=arena, origin=block.offset)
        io: dict[str, DeviceBuffer] = {}
        for root in sorted(io_roots):
            io[root] = buffers[root] = DeviceBuffer(self.device, self._nbytes(root), label=root,
                                                    zero_copy=self.zero_copy)
        tensors = {name: TensorRef(name, buffers[root], graph.tensors[name].shape, self._half[name])
                   for name, root in self._root.items()}
        scratch = {node: buffers[f"scratch:{node}"] for node in scratch_sizes}
        report = MemoryReport(arena_bytes=arena_bytes,
                              unplanned_activation_bytes=sum(b.nbytes for b in blocks),
                              io_bytes=sum(b.nbytes for b in io.values()), weight_bytes=0,
                              zero_copy=self.zero_copy)
        return tensors, io, scratch, report

    def _nbytes(self, name: str) -> int:
        tensor = self.plan.graph.tensors[name]
        return tensor.size * (2 if self._half[name] else 4)

    def _upload(self, tensor: str, kind: str, array: np.ndarray) -> DeviceBuffer:
        buffer = DeviceBuffer(self.device, array.nbytes, label=f"{tensor}:{kind}", zero_copy=self.zero_copy,
                              read_only=True)
        buffer.write(array)
        self.weights.append(WeightRecord(tensor, kind, int(array.nbytes)))
        self._weight_bytes_by_tensor[tensor] = self._weight_bytes_by_tensor.get(tensor, 0) + int(array.nbytes)
        return buffer

    def _half_products(self) -> int:
        if self.precision != "fp16":
            return 0
        mode = self.config.fp16_arithmetic
        if mode == "emulate":
            return 2
        return 1 if mode == "auto" and self.device.info.fp16 else 0

    def _lower(self) -> list[_Step]:
        dummy = DeviceBuffer(self.device, 64, label="dummy", zero_copy=self.zero_copy, read_only=True)
        ctx = LoweringContext(self.plan.graph, self.device, self.config, self.programs, self.precision,
                              self._half_products(), self._tensors, self._scratch, self._upload, dummy)
        steps = []
        for step in self.plan.steps:
            node = step.node
            if node.op in VIEW_OPS and not self.plan.graph.tensors[node.inputs[0]].is_constant:
                steps.append(_Step(node, "view", []))
                continue
            lower = KERNELS.get(node.op)
            if lower is None:
                steps.append(_Step(node, "reference", [], f"no OpenCL kernel for {node.op}"))
                continue
            try:
                steps.append(_Step(node, "opencl", lower(ctx, node)))
            except NotLowerable as exc:
                steps.append(_Step(node, "reference", [], str(exc)))
        for s in steps:
            if s.placement == "reference":
                log.warning("node %r (%s) runs on the reference backend: %s", s.node.name, s.node.op, s.note)
        self.memory_report = MemoryReport(**{**self.memory_report.__dict__,
                                             "weight_bytes": sum(w.nbytes for w in self.weights)})
        return steps

    # -- placement info ------------------------------------------------------------------------
    @property
    def placements(self) -> dict[str, str]:
        """Node name -> "opencl", "reference" or "view"."""
        return {s.node.name: s.placement for s in self._steps}

    @property
    def fallback_reasons(self) -> dict[str, str]:
        return {s.node.name: s.note for s in self._steps if s.placement == "reference"}

    # -- zero-copy host access -------------------------------------------------------------------
    def input_view(self, name: str) -> np.ndarray:
        """A writable float32 view of input ``name``'s device buffer (mapped in zero-copy mode, a
        host staging array in copy mode). Fill it, call :meth:`unmap_views`, then :meth:`execute`."""
        if name not in self.plan.graph.inputs:
            raise InputError(f"unknown input {name!r}; inputs are {self.plan.graph.inputs}")
        return self._view(name, write=True)

    def output_view(self, name: str) -> np.ndarray:
        """A read-only float32 view of output ``name`` after :meth:`execute` (valid until the next
        run; mapped in zero-copy mode, so the buffer is host-owned until :meth:`unmap_views`)."""
        if name not in self.plan.graph.outputs:
            raise InputError(f"unknown output {name!r}; outputs are {self.plan.graph.outputs}")
        view = self._view(name, write=False)
        view.flags.writeable = False
        return view

    def _view(self, name: str, write: bool) -> np.ndarray:
        shape = self.plan.graph.tensors[name].shape
        buffer = self._io[self._root[name]]
        if not self.zero_copy:
            if write:
                return self._staged.setdefault(name, np.zeros(shape, np.float32))
            return buffer.read(np.float32, shape)
        held = self._views.get(name)
        if held is not None and buffer.mapped:
            return held[1]
        array = buffer.map(np.float32, shape, write=write, read=True)
        self._views[name] = (buffer, array)
        return array

    def unmap_views(self) -> None:
        """Hand every mapped input/output buffer back to the device."""
        for buffer, _ in self._views.values():
            buffer.unmap()
        self._views.clear()

    # -- running ------------------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._write_feeds(feeds)
        self.execute()
        return self._read_outputs()

    def _write_feeds(self, feeds: dict[str, np.ndarray]) -> None:
        for name, value in feeds.items():
            held = self._views.get(name)
            if held is not None and np.shares_memory(held[1], value):
                continue  # the caller filled the mapped buffer itself: nothing to copy
            buffer = self._io[self._root[name]]
            if self.zero_copy:
                np.copyto(self._view(name, write=True), value)
            else:
                buffer.write(np.asarray(value, np.float32))
                self._staged.pop(name, None)
        self.unmap_views()

    def _read_outputs(self) -> dict[str, np.ndarray]:
        graph = self.plan.graph
        out = {}
        for name in graph.outputs:
            out[name] = self._io[self._root[name]].read(np.float32, graph.tensors[name].shape)
        return out

    def execute(self) -> None:
        """Run every step on the current contents of the input buffers. Raises MappedBufferError
        if an input or output buffer is still mapped for the host."""
        for name, staged in list(self._staged.items()):  # copy mode: views were host arrays
            self._io[self._root[name]].write(staged)
        queue = self.device.queue
        for step in self._steps:
            if step.placement == "opencl":
                for launch in step.launches:
                    launch.enqueue(queue)
            elif step.placement == "reference":
                self._run_on_reference(step.node)
        queue.finish()

    def _run_on_reference(self, node: Node) -> None:
        from ..reference.kernels import evaluate  # also registers the reference kernels
        from .. import reference  # noqa: F401
        graph = self.plan.graph
        inputs = []
        for name in node.inputs:
            if not name:
                inputs.append(None)
            elif graph.tensors[name].is_constant:
                inputs.append(round_to_storage(graph.tensors[name].data, self.precision))
            else:
                ref = self._tensors[name]
                ref.buffer.check_device_owned(f"reference:{node.name}")
                inputs.append(ref.buffer.read(np.float16 if ref.half else np.float32, ref.shape).astype(np.float32))
        for name, value in zip(node.outputs, evaluate(node, inputs)):
            if name:
                ref = self._tensors[name]
                ref.buffer.check_device_owned(f"reference:{node.name}")
                ref.buffer.write(np.asarray(value, np.float16 if ref.half else np.float32))

    def profile(self, feeds: dict[str, np.ndarray]) -> ProfileReport:
        """Run once with per-op timing: device time from the kernels' profiling events, host time
        spent per node, placement, and memory. ``report.outputs`` holds the outputs."""
        start = time.perf_counter()
        self._write_feeds(feeds)
        for name, staged in list(self._staged.items()):
            self._io[self._root[name]].write(staged)
        queue = self.device.queue
        queue.finish()
        timings = []
        for step in self._steps:
            t0 = time.perf_counter()
            events = []
            if step.placement == "opencl":
                events = [launch.enqueue(queue) for launch in step.launches]
            elif step.placement == "reference":
                queue.finish()  # the wait for earlier kernels is not the fallback's cost
                t0 = time.perf_counter()
                self._run_on_reference(step.node)
            timings.append((events, time.perf_counter() - t0))
        queue.finish()
        outputs = self._read_outputs()
        wall = time.perf_counter() - start
        records = []
        for step, (events, host) in zip(self._steps, timings):
            device_ns = sum(e.profile.end - e.profile.start for e in events)
            node = step.node
            records.append(OpRecord(
                node=node.name, op=op_label(node), placement=step.placement,
                kernels=tuple(launch.name for launch in step.launches), device_ms=device_ns / 1e6,
                host_ms=host * 1e3,
                output_bytes=0 if step.placement == "view" else sum(self._nbytes(o) for o in node.outputs if o),
                weight_bytes=sum(self._weight_bytes_by_tensor.get(i, 0) for i in node.inputs if i),
                scratch_bytes=self._scratch[node.name].nbytes if node.name in self._scratch else 0,
                note=step.note))
        return ProfileReport(self.device.label, self.precision, "zero_copy" if self.zero_copy else "copy",
                             wall * 1e3, tuple(records), self.memory_report, outputs)

    def __repr__(self) -> str:
        return (f"OpenCLBackend({self.device.label!r}, {self.precision}, "
                f"{'zero_copy' if self.zero_copy else 'copy'}, config={self.config.family!r})")


__all__ = ["OpenCLBackend", "MappedBufferError"]
