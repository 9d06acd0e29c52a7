"""The ``opencl`` backend: plans device memory, lowers every node to bound kernel launches once,
then runs by enqueueing them.

Set-up (``__init__``), in order:

1. storage: every activation is float, or half in fp16 mode except graph inputs/outputs and the
   outputs of FP32_ONLY_OPS (ArgMax/ArgMin indices are int64, never half); a Reshape output is a
   view sharing its input's storage;
2. memory: graph inputs/outputs get their own mappable buffers; every other activation (and the
   scratch of NNM, Winograd and multi-pass reduction layers) gets an offset in one arena, planned
   from the execution plan's liveness so that tensors that are never alive together share bytes
   (or, where the device config says ``activation_storage: objects``, a whole buffer shared by
   tensors never alive together: no sub-buffers);
3. lowering: each node goes through the ``KERNELS`` table; a node without a kernel (or a variant
   a kernel refuses) is placed on the reference backend, which the profile shows with the reason.

Backend options come from arguments or the environment: ``device`` / EDGESDK_OPENCL_DEVICE,
``config`` / EDGESDK_OPENCL_CONFIG, ``memory`` ("zero_copy" | "copy") / EDGESDK_OPENCL_MEMORY.

Threads: a session owns one arena and one set of kernels whose arguments point into it, and the
device runs one in-order queue, so the runs of one session take turns: a lock covers writing the
feeds, enqueueing, waiting and reading the outputs (the buffer maps of concurrent runs crashed the
driver without it). Sessions do not share buffers, so different sessions never wait for each
other's lock (only for the device). An :class:`OpenCLIOBinding` has input/output buffers of its
own; under the lock, the kernels that touch graph inputs/outputs are pointed at the set of
io buffers of the run in progress.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...errors import BackendUnavailableError, ModelTooLargeError, SessionClosedError, UnsupportedModelError
from ...graph import Node
from ...runtime.arena import Block, activation_lifetimes, plan_arena, plan_shared_objects
from ...runtime.fallback import FALLBACK_PLACEMENT, ReferenceStep, warn_fallbacks
from ...runtime.plan import ExecutionPlan
from ...runtime.profiling import StepInfo, op_records, timed_runners
from ...runtime.precision import FP32_ONLY_OPS, PRECISIONS
from ...runtime.shapes import INT32_MAX, check_element_counts, format_bytes
from ..base import Backend, IOBinding
from . import lower  # noqa: F401 (register the lowerings)
from .config import DeviceConfig, load_device_config
from .device import Device, open_device, unavailable_reason
from .kernels import KERNELS, VIEW_OPS, Launch, LoweringContext, NotLowerable, TensorRef, WeightRecord
from .memory import DeviceBuffer, MappedBufferError
from .lower.conv import scratch_bytes
from .lower.lq import fused_quantizers
from .lower.quantize import INTEGER_KERNELS
from .lower.reduce import REDUCE_OPS, reduce_scratch_bytes
from ...profile.records import MemoryReport, ProfileReport
from .programs import program_cache

log = logging.getLogger("edgesdk.opencl")
MEMORY_ENV = "EDGESDK_OPENCL_MEMORY"


@dataclass
class _Step:
    node: Node
    placement: str  # opencl | reference | view
    launches: list[Launch]
    note: str = ""
    fallback: ReferenceStep | None = None  # placement "reference": the node on its reference kernel


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
        self._lock = threading.RLock()  # one run of this session at a time (see the module docstring)
        self._closed = False
        self._check_graph()
        self._half = self._storage()
        self._root = self._view_roots()
        self._tensors, self._io, self._scratch, self._arena, self.memory_report = self._allocate()
        self._steps = self._lower()
        self.steps = tuple(self._step_info(step) for step in self._steps)
        self._runners = self._runners_on(self.device.queue)
        self._settles = [step.placement == FALLBACK_PLACEMENT for step in self._steps if step.placement != "view"]
        self._io_args = self._io_arguments()
        self._bound_io = self._io
        log.info("opencl backend on %s (%s, %s): %s", self.device.label, self.config.family, memory,
                 {p: sum(s.placement == p for s in self.steps) for p in ("opencl", FALLBACK_PLACEMENT, "view")})

    # -- set-up -------------------------------------------------------------------------------
    def _check_graph(self) -> None:
        graph = self.plan.graph
        for name in graph.inputs + graph.outputs:
            tensor = graph.tensors[name]
            if tensor.is_constant:
                raise UnsupportedModelError(f"graph input/output {name!r} is a constant; the opencl "
                                            f"backend needs it computed")
            # float32 tensors, and the int64 indices of ArgMax/ArgMin as outputs
            if tensor.dtype != np.float32 and not (name in graph.outputs and tensor.dtype == np.int64):
                raise UnsupportedModelError(f"tensor {name!r} has dtype {tensor.dtype}; the opencl backend "
                                            f"runs float32 graphs")
        check_element_counts(graph, INT32_MAX, "opencl")  # the kernels index elements with int

    def _check_allocation(self, label: str, nbytes: int) -> None:
        """Drivers refuse (or crash on) buffers past CL_DEVICE_MAX_MEM_ALLOC_SIZE: say so first."""
        limit = int(self.device.cl_device.max_mem_alloc_size)
        if nbytes > limit:
            raise ModelTooLargeError(
                f"opencl buffer {label} would need {format_bytes(nbytes)}, more than the {format_bytes(limit)} "
                f"one buffer may take on {self.device.label} (CL_DEVICE_MAX_MEM_ALLOC_SIZE); pass smaller "
                f"input_shapes=... (CLI: --input-shape NAME=...) or use the cpu backend", tensor=label,
                nbytes=nbytes, limit=limit)

    def _storage(self) -> dict[str, bool]:
        """Activation name -> stored as half."""
        graph, fp16 = self.plan.graph, self.precision == "fp16"
        io = set(graph.inputs) | set(graph.outputs)
        half = {name: False for name in graph.inputs}
        for step in self.plan.steps:
            node = step.node
            for out in node.outputs:
                if out:
                    half[out] = (fp16 and node.op not in FP32_ONLY_OPS and out not in io
                                 and graph.tensors[out].dtype == np.float32)  # never an int64 as half
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
        fused = fused_quantizers(graph)
        for step in self.plan.steps:
            node = step.node
            if node.op in VIEW_OPS and not graph.tensors[node.inputs[0]].is_constant:
                root[node.outputs[0]] = root[node.inputs[0]]
            elif node.op == "LQQuantize" and node.outputs[0] in fused:
                # A quantizer fused into its LQ layer (lower/lq.py) writes nothing: its output
                # shares the input's storage, which so stays alive until the layer reads it.
                root[node.outputs[0]] = root[node.inputs[0]]
        return root

    def _allocate(self):
        graph, info = self.plan.graph, self.device.info
        steps = self.plan.steps
        lifetimes = activation_lifetimes(self.plan)
        io_roots = {self._root[n] for n in graph.inputs + graph.outputs}
        spans: dict[str, list[int]] = {}
        for name, root in self._root.items():
            if root in io_roots:
                continue
            first, last = lifetimes[name]
            span = spans.setdefault(root, [first, last])
            span[0], span[1] = min(span[0], first), max(span[1], last)
        blocks = [Block(self._nbytes(root), first, last, root) for root, (first, last) in spans.items()]
        scratch_sizes = {}
        alignment = max(info.mem_base_addr_align_bits // 8, 64)
        for index, step in enumerate(steps):
            op = step.node.op
            need = (scratch_bytes(step.node, graph, self.config) if op in ("Conv", "Gemm") else
                    reduce_scratch_bytes(step.node, graph, alignment) if op in REDUCE_OPS else 0)
            if need:
                scratch_sizes[step.node.name] = need
                blocks.append(Block(need, index, index, f"scratch:{step.node.name}"))
        for root in io_roots:
            self._check_allocation(repr(root), self._nbytes(root))
        if self.config.activation_storage == "objects":
            arena, arena_bytes, buffers = None, *self._shared_objects(blocks)
        else:
            arena_bytes = plan_arena(blocks, alignment)
            self._check_allocation("arena (activations)", arena_bytes)
            arena = DeviceBuffer(self.device, arena_bytes, label="arena", zero_copy=self.zero_copy) if blocks else None
            buffers = {block.name: DeviceBuffer(self.device, block.nbytes, label=block.name, zero_copy=self.zero_copy,
                                                parent=arena, origin=block.offset) for block in blocks}
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
        return tensors, io, scratch, arena, report

    def _shared_objects(self, blocks: list[Block]) -> tuple[int, dict[str, DeviceBuffer]]:
        """``activation_storage: objects``: one buffer per shared object (runtime/arena.py), each
        block's tensor using its object's buffer from offset 0. Returns the bytes and the buffers."""
        sizes = plan_shared_objects(blocks)
        for size in sizes:
            self._check_allocation("an activation buffer", size)
        objects = [DeviceBuffer(self.device, size, label=f"activations:{i}", zero_copy=self.zero_copy)
                   for i, size in enumerate(sizes)]
        return sum(sizes), {block.name: objects[block.slot] for block in blocks}

    def _nbytes(self, name: str) -> int:
        tensor = self.plan.graph.tensors[name]
        return tensor.size * (2 if self._half[name] else tensor.dtype.itemsize)

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
            lowering = KERNELS.get(node.op)
            try:
                if lowering is None:
                    raise NotLowerable(f"no OpenCL kernel for {node.op}")
                if any(name and self.plan.graph.tensors[name].dtype in (np.uint8, np.int8)
                       for name in node.inputs + node.outputs):
                    lowering = INTEGER_KERNELS.get(node.op)  # lower/quantize.py: the int8 kernels
                    if lowering is None:
                        raise NotLowerable("8-bit tensors: no OpenCL int8 kernel yet")
                ctx.notes.clear()
                launches = lowering(ctx, node)
                steps.append(_Step(node, "opencl", launches, "; ".join(ctx.notes)))
            except NotLowerable as exc:
                steps.append(_Step(node, FALLBACK_PLACEMENT, [], str(exc),
                                   ReferenceStep.prepare(node, self.plan.graph, self.precision, str(exc))))
        warn_fallbacks(self.name, [(s.node.name, s.node.op, s.note) for s in steps if s.fallback is not None])
        self.memory_report = MemoryReport(**{**self.memory_report.__dict__,
                                             "weight_bytes": sum(w.nbytes for w in self.weights)})
        return steps

    def _step_info(self, step: _Step) -> StepInfo:
        node = step.node
        return StepInfo.of_node(
            node, self.plan.graph, step.placement, note=step.note,
            kernels=tuple(launch.name for launch in step.launches),
            output_bytes=0 if step.placement == "view" else sum(self._nbytes(o) for o in node.outputs if o),
            weight_bytes=sum(self._weight_bytes_by_tensor.get(i, 0) for i in node.inputs if i),
            scratch_bytes=self._scratch[node.name].nbytes if node.name in self._scratch else 0)

    def _runners_on(self, queue: Any) -> list[Callable[[], list[Any]]]:
        """The runners of every step but views, their kernels enqueued on ``queue``."""
        return [self._runner(step, queue) for step in self._steps if step.placement != "view"]

    def _runner(self, step: _Step, queue: Any) -> Callable[[], list[Any]]:
        """What one step does in a run: enqueue its kernels on ``queue`` (returning their events)
        or run its reference fallback between reads and writes of its buffers, which go through
        the run queue. Kernels on another queue (the profiling one) wait for those: the fallback
        then finishes the run queue."""
        run_queue = self.device.queue
        if step.fallback is not None:
            fallback = step.fallback

            def run_fallback() -> list[Any]:
                self._run_on_reference(fallback)
                if queue is not run_queue:
                    run_queue.finish()
                return []
            return run_fallback
        launches = step.launches
        return lambda: [launch.enqueue(queue) for launch in launches]

    def _io_arguments(self) -> list[tuple[Any, int, str]]:
        """(kernel, argument index, io root) for every kernel argument that is a graph input or
        output buffer: what :meth:`_bind_io` re-points for an io binding's buffers."""
        roots = {id(buffer): root for root, buffer in self._io.items()}
        return [(launch.kernel, index, roots[id(buffer)])
                for step in self._steps for launch in step.launches
                for index, buffer in enumerate(launch.buffers) if id(buffer) in roots]

    # -- running ------------------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Write the feeds, run every step, read the outputs: one run of this session at a time
        (the lock), each through the session's own input/output buffers."""
        with self._lock:
            self._check_open()
            self._write_feeds(self._io, feeds)
            self._execute(self._io)
            return self._read_outputs(self._io)

    def io_binding(self) -> "OpenCLIOBinding":
        """Input/output device buffers of the caller's own, mapped for the host in zero-copy
        mode (see :class:`OpenCLIOBinding`)."""
        with self._lock:
            self._check_open()
            return OpenCLIOBinding(self)

    def close(self) -> None:
        """Drop the kernels and every device buffer (the driver frees them with the last
        reference); later runs raise SessionClosedError."""
        with self._lock:
            self._closed = True
            self._steps, self._runners, self._io_args = [], [], []
            if self._arena is not None:
                self._arena.release_sub_buffers()  # newest first: see memory.py
            self._io, self._bound_io, self._tensors, self._scratch = {}, {}, {}, {}
            self._arena = None

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("this opencl session is closed; create a new Session")

    def _write_feeds(self, io: dict[str, DeviceBuffer], feeds: dict[str, np.ndarray]) -> None:
        for name, value in feeds.items():
            io[self._root[name]].write(np.asarray(value, np.float32))

    def _read_outputs(self, io: dict[str, DeviceBuffer]) -> dict[str, np.ndarray]:
        graph = self.plan.graph
        return {name: io[self._root[name]].read(graph.tensors[name].dtype, graph.tensors[name].shape)
                for name in graph.outputs}

    def _bind_io(self, io: dict[str, DeviceBuffer]) -> None:
        """Point the kernels' graph input/output arguments at ``io`` (the session's own buffers
        or an io binding's). Caller holds the lock."""
        for buffer in io.values():
            buffer.check_device_owned("(run start)")
        if io is self._bound_io:
            return
        for kernel, index, root in self._io_args:
            kernel.set_arg(index, io[root].cl_buffer)
        self._bound_io = io

    def _buffer_of(self, name: str) -> DeviceBuffer:
        """The buffer tensor ``name`` lives in for the run in progress."""
        return self._bound_io.get(self._root[name]) or self._tensors[name].buffer

    def _execute(self, io: dict[str, DeviceBuffer]) -> None:
        """Run every step on the current contents of ``io``'s input buffers (caller holds the
        lock). Raises MappedBufferError if a buffer a kernel uses is mapped for the host."""
        self._check_open()
        self._bind_io(io)
        for runner in self._runners:
            runner()
        self.device.queue.finish()

    def _run_on_reference(self, step: ReferenceStep) -> None:
        """Read the step's run-time inputs back from the device, run its reference kernel, write
        its outputs (caller holds the lock; the queue is in order, so earlier kernels are done
        when the blocking reads return)."""
        graph, node = self.plan.graph, step.node
        inputs = []
        for name in step.runtime_inputs:
            ref, buffer = self._tensors[name], self._buffer_of(name)
            buffer.check_device_owned(f"reference:{node.name}")
            stored = np.float16 if ref.half else graph.tensors[name].dtype  # uint8/int8 between integer ops
            inputs.append(buffer.read(stored, ref.shape).astype(np.float32 if ref.half else stored, copy=False))
        for name, value in zip(node.outputs, step(inputs)):
            if name:
                ref, buffer = self._tensors[name], self._buffer_of(name)
                buffer.check_device_owned(f"reference:{node.name}")
                buffer.write(np.asarray(value, np.float16 if ref.half else graph.tensors[name].dtype))

    def profile(self, feeds: dict[str, np.ndarray]) -> ProfileReport:
        """Run once with per-op timing: device time from the kernels' profiling events, host time
        spent per node, placement, and memory. ``report.outputs`` holds the outputs."""
        with self._lock:
            self._check_open()
            start = time.perf_counter()
            self._write_feeds(self._io, feeds)
            self._bind_io(self._io)
            timings = self._timed_steps()
            outputs = self._read_outputs(self._io)
            wall = time.perf_counter() - start
        return self._profile_report(timings, outputs, wall)

    def _timed_steps(self) -> tuple[list[float], list[float]]:
        """Run every step with the profiling loop (caller holds the lock): each step's host
        time, and its kernels' device time from their profiling events."""
        queue = self.device.profiling_queue
        self.device.queue.finish()  # the feeds (an unmap may still be queued there)
        # the wait for earlier kernels before a fallback step is not the fallback's cost
        settle = (lambda i: queue.finish() if self._settles[i] else None)
        runners, seconds, events = timed_runners(self._runners_on(queue), settle)
        for runner in runners:
            runner()
        queue.finish()
        device_ms = [sum(e.profile.end - e.profile.start for e in step_events) / 1e6 for step_events in events]
        return seconds, device_ms

    def _profile_report(self, timings: tuple[list[float], list[float]], outputs: dict[str, np.ndarray],
                        wall: float) -> ProfileReport:
        return ProfileReport(self.device.label, self.precision, "zero_copy" if self.zero_copy else "copy",
                             wall * 1e3, op_records(self.steps, *timings), self.memory_report, outputs)

    def __repr__(self) -> str:
        return (f"OpenCLBackend({self.device.label!r}, {self.precision}, "
                f"{'zero_copy' if self.zero_copy else 'copy'}, config={self.config.family!r})")


class OpenCLIOBinding(IOBinding):
    """Input and output device buffers of its own (see :class:`~edgesdk.backends.base.IOBinding`
    for the rules every backend keeps).

    Zero-copy mode: ``input(name)`` maps the input buffer for the host (read and write) and
    returns the mapped memory itself; ``run()`` unmaps every mapped buffer first, since a kernel
    never runs on memory the host holds mapped, then runs the session's kernels on this
    binding's buffers; ``output(name)`` maps the output buffer for reading. Nothing is copied on
    the host. Copy mode: ``input(name)`` is a host staging array written to the device by each
    ``run()`` and ``output(name)`` a host copy read after it."""

    def __init__(self, backend: OpenCLBackend) -> None:
        super().__init__(backend)
        self._backend: OpenCLBackend = backend
        self._roots = dict(backend._root)
        self._buffers = {root: DeviceBuffer(backend.device, buffer.nbytes, label=f"binding:{root}",
                                            zero_copy=backend.zero_copy)
                         for root, buffer in backend._io.items()}
        self._arrays: dict[str, np.ndarray] = {}  # mapped views (zero-copy) or host arrays (copy)
        self._staged: dict[str, np.ndarray] = {}  # copy mode: the inputs, kept between runs

    def _input_array(self, name: str) -> np.ndarray:
        if not self._backend.zero_copy:
            return self._staged.setdefault(name, np.zeros(self._shapes[name], np.float32))
        return self._mapped(name, write=True)

    def _output_array(self, name: str) -> np.ndarray:
        if not self._backend.zero_copy:
            array = self._arrays.get(name)
            if array is None:
                array = self._arrays[name] = self._buffers[self._roots[name]].read(self._dtypes[name],
                                                                                   self._shapes[name])
            return array
        return self._mapped(name, write=False)

    def _mapped(self, name: str, write: bool) -> np.ndarray:
        array = self._arrays.get(name)
        if array is None:
            array = self._buffers[self._roots[name]].map(self._dtypes[name], self._shapes[name], write=write,
                                                         read=True)
            self._arrays[name] = array
        return array

    def _run(self) -> None:
        self._unmap()
        if not self._backend.zero_copy:
            for name, staged in self._staged.items():
                self._buffers[self._roots[name]].write(staged)
        with self._backend._lock:
            self._backend._execute(self._buffers)

    def _unmap(self) -> None:
        for buffer in self._buffers.values():
            buffer.unmap()
        self._arrays.clear()

    def _release(self) -> None:
        self._unmap()
        self._staged.clear()
        self._buffers.clear()


__all__ = ["OpenCLBackend", "OpenCLIOBinding", "MappedBufferError"]
