"""CPUBackend: the native kernels of ``edgesdk._native`` behind the Backend interface."""
from __future__ import annotations

import functools
import importlib
import os
import time
from typing import Callable

import numpy as np

from ...errors import BackendUnavailableError, SessionClosedError, UnsupportedModelError, UnsupportedOperatorError
from ...graph import Graph, Node
from ...native import cpu_features
from ...profile.records import MemoryReport, ProfileReport
from ...runtime.arena import Pool, aligned_host_buffer, plan_arena
from ...runtime.plan import ExecutionPlan
from ...runtime.profiling import StepInfo, op_records, timed_runners
from ...runtime.precision import PRECISIONS, round_constant
from ..base import Backend
from ..reference import ReferenceBackend
from .lower import LOWERINGS
from .program import Binder, Builder, Runner, Slot, StepRecord, Views
from .threads import physical_cores


def _check_spin_setting() -> None:
    """EDGESDK_CPU_SPIN_US (read by the native thread pool) must be a whole number of microseconds:
    the pool would otherwise fall back to its default without a word."""
    value = os.environ.get("EDGESDK_CPU_SPIN_US", "")
    if value and not value.isdigit():
        raise BackendUnavailableError(f"EDGESDK_CPU_SPIN_US={value!r} is not a whole number of microseconds "
                                      "(how long idle worker threads spin before sleeping); set e.g. 1000, "
                                      "0 to never spin, or unset it")


class CPUBackend(Backend):
    """Native SIMD kernels (runtime ISA dispatch), NHWC activations in one arena, weights packed
    once per session. ``threads`` defaults to the physical cores this process may use.

    Concurrent runs: each run borrows an arena (with its bound steps) from a pool that grows to
    the peak number of runs in flight; the packed weights are shared read-only."""

    name = "cpu"
    precisions = PRECISIONS

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            importlib.import_module("edgesdk._native")
        except ImportError as exc:
            return f"edgesdk._native is not built ({exc}); reinstall with `pip install .` (needs cmake, C++17)"
        return None

    @classmethod
    def supported_ops(cls) -> frozenset[str]:
        return frozenset(LOWERINGS) & ReferenceBackend.supported_ops()

    def __init__(self, plan: ExecutionPlan, *, precision: str = "fp32", threads: int | None = None):
        super().__init__(plan, precision=precision, threads=threads)
        if precision not in PRECISIONS:
            raise BackendUnavailableError(f"cpu backend: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        self.thread_count = threads if threads is not None else physical_cores()
        _check_spin_setting()
        from ... import _native
        self.isa: str = _native.kernels.active_isa()
        graph = plan.graph
        builder = Builder(graph, precision, self.thread_count)
        for name in graph.inputs:
            builder.define_input(name)
        for step in plan.steps:
            lower = LOWERINGS.get(step.node.op)
            if lower is None:
                raise UnsupportedOperatorError(step.node.op, step.node.name, sorted(self.supported_ops()))
            lower(step.node, builder)
        outputs = {name: builder.keep_alive(name) for name in graph.outputs if builder.is_activation(name)}
        constants = _constant_outputs(graph, precision, outputs)
        blocks = builder.blocks()
        self.arena_bytes = plan_arena(blocks)
        self._unplanned_bytes = sum(b.nbytes for b in blocks)
        nodes = {node.name: node for node in graph.nodes}
        self.steps = tuple(_step_info(graph, nodes.get(s.node), s) for s in builder.steps)
        binders = [s.binder for s in builder.steps if s.placement != "view"]
        inputs, arena_bytes = dict(builder.inputs), self.arena_bytes
        self._arenas: Pool[BoundArena] = Pool(lambda: BoundArena(arena_bytes, binders, inputs, outputs, constants),
                                              lambda: SessionClosedError("the cpu backend of this session is "
                                                                         "closed; create a new Session"))
        self._arenas.prime()

    @property
    def arena_count(self) -> int:
        """Arenas made so far: one per run that was in flight at the same time, at the peak."""
        return self._arenas.created

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on an arena of its own (from the pool); thread-safe."""
        arena = self._arenas.take()
        try:
            return arena.execute(feeds)
        finally:
            self._arenas.give_back(arena)

    def close(self) -> None:
        """Drop the arenas (runs in flight finish on theirs; their memory goes when they return)."""
        self._arenas.close()

    def profile(self, feeds: dict[str, np.ndarray]) -> ProfileReport:
        """Run once, timing each prepared step on the host: every node and every layout
        conversion the backend inserted (views take no time)."""
        arena = self._arenas.take()
        try:
            runners, seconds, _ = timed_runners(arena.runners)
            start = time.perf_counter()
            outputs = arena.execute(feeds, runners)
            wall_ms = (time.perf_counter() - start) * 1e3
        finally:
            self._arenas.give_back(arena)
        return ProfileReport(self.device_label, self.precision, "arena", wall_ms, op_records(self.steps, seconds),
                             self.memory_report, outputs)

    @property
    def device_label(self) -> str:
        threads = f"{self.thread_count} thread{'s' if self.thread_count != 1 else ''}"
        return f"{cpu_features().model} ({self.isa} kernels, {threads})"

    @functools.cached_property
    def memory_report(self) -> MemoryReport:
        graph = self.plan.graph
        return MemoryReport(
            arena_bytes=self.arena_bytes, unplanned_activation_bytes=self._unplanned_bytes,
            io_bytes=sum(graph.tensors[name].nbytes for name in graph.outputs),
            weight_bytes=sum(t.stored_nbytes for t in graph.constants()), zero_copy=False,
            source="arena as planned (inputs and scratch included) + output copies + weights as the "
                   "model stores them (the packed copies are not counted)")


class BoundArena:
    """One activation arena with the prepared steps bound to it: what one run in flight owns.
    Arenas share the packed weights (read-only) and nothing else.

    Most runners are native Steps (kernel calls whose operands were checked when they were bound);
    ``program`` runs the whole list in one native call, the GIL released across each stretch of
    Steps and held for the Python runners between them (numpy copies, reference fallbacks)."""

    def __init__(self, nbytes: int, binders: list[Binder], inputs: dict[str, Slot], outputs: dict[str, Slot],
                 constants: dict[str, np.ndarray]) -> None:
        self.memory = aligned_host_buffer(nbytes)
        views = Views(self.memory)
        self.runners: list[Runner] = [bind(views) for bind in binders]
        from ... import _native
        self.program = _native.kernels.Program(self.runners)
        self.inputs = [(name, views[slot]) for name, slot in inputs.items()]
        readers = {name: _output_reader(views, slot) for name, slot in outputs.items()}
        readers.update((name, value.copy) for name, value in constants.items())
        self.outputs = [(name, readers[name]) for name in [*outputs, *constants]]

    def execute(self, feeds: dict[str, np.ndarray], runners: list[Runner] | None = None) -> dict[str, np.ndarray]:
        """One run: the prepared program, or ``runners`` (timed wrappers of the steps, profile)
        one by one from Python."""
        for name, buffer in self.inputs:
            np.copyto(buffer, feeds[name])
        if runners is None:
            self.program.run()
        else:
            for runner in runners:
                runner()
        return {name: read() for name, read in self.outputs}


def _constant_outputs(graph: Graph, precision: str, computed: dict[str, Slot]) -> dict[str, np.ndarray]:
    """Graph outputs that are constants (folded at import): their stored values, as the
    reference backend returns them."""
    constants = {}
    for name in graph.outputs:
        if name in computed:
            continue
        value = graph.const(name)
        if value is None:
            raise UnsupportedModelError(f"graph output {name!r} is neither computed nor a constant; "
                                        f"the cpu backend cannot produce it (try backend='reference')")
        constants[name] = np.array(round_constant(np.asarray(value), precision))
    return constants


def _output_reader(views: Views, slot: Slot) -> Callable[[], np.ndarray]:
    """A fresh graph-order copy of an output (the arena is overwritten by the next run)."""
    logical = views.logical(slot)
    return lambda: np.array(logical, order="C", copy=True)


def _step_info(graph: Graph, node: Node | None, step: StepRecord) -> StepInfo:
    """A prepared step as the profile reports it: a node with its op label and the weights it
    reads as the model stores them, or (``node`` None) a layout conversion the backend inserted."""
    written = sum(b.nbytes for b in step.writes)  # its outputs and its scratch, in the arena
    if node is None:
        return StepInfo("", step.op, step.placement, step.note, output_bytes=written)
    return StepInfo.of_node(node, graph, step.placement, note=step.note, output_bytes=written)
