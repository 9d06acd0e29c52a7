"""The cpu backend under a memory budget: stages at their own sub-batches (seed 004, section 2.8).

:func:`plan_budgeted` measures each stage of ``runtime.batch_plan.find_stages`` at each divisor
of the batch, runs the planner's DP and returns the backend that executes the chosen schedule:
the ordinary :class:`CPUBackend` when the budget holds the whole batch, else a
:class:`StagedBackend`. The memory model is the one ``runtime/batch_plan.py`` describes; this
module allocates exactly what it counts (one run buffer per run in flight, the stage arenas
stacked over the stage input buffers).

What is measured and what is estimated:

* times: each (stage, sub-batch) runs a few times on its own (after one warm-up call), the
  copy of its output into the next stage's buffer included; the median is kept;
* arenas and input buffers: exact (the backend's own arena planner and the tensor shapes);
* numpy memory a stage allocates when it is bound (padded copies of the clustered convolutions):
  measured with tracemalloc while binding and the first run;
* native memory that Python cannot see, estimated from what the kernels allocate: packed
  weights (the dense constants, output rows rounded up to 16), the Winograd transform of the
  3x3 convolutions the kernels run that way at that batch (36/9 of the weights), each indirect
  convolution's indirection buffer (8 bytes per pixel and tap) and the Winograd per-thread
  scratch (its tile block, per thread).

Measurements are cached per (model, stage, sub-batch, precision, threads, CPU and kernel level) in
``$EDGESDK_CACHE_DIR/batch_planner`` (default ``~/.cache/edgesdk/batch_planner``), so that
``edgesdk inspect --memory-budget`` and a later Session do not measure again.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ... import __version__
from ...errors import BackendUnavailableError, SessionClosedError, UnsupportedModelError, UnsupportedOperatorError
from ...graph import Graph
from ...native import cpu_features
from ...profile.latency import time_calls
from ...progress import ProgressFn
from ...runtime.arena import HOST_ALIGNMENT, Block, Pool, aligned_host_buffer, plan_arena
from ...runtime.batch_plan import (BatchPlan, Stage, StageCost, StagePlan, batch_size, best_fixed, budget_error,
                                   divisors, find_stages, schedule_cost, solve, stage_graph)
from ...runtime.plan import ExecutionPlan, make_plan
from ..base import Backend
from .backend import CPUBackend, _step_info
from .lower import LOWERINGS
from .program import NCHW, Binder, Builder, Runner, Slot, Views, slot_array
from .threads import physical_cores

CACHE_ENV = "EDGESDK_CACHE_DIR"
WHAT = "the memory budget (memory_budget=..., CLI --memory-budget)"
# Timing: at least this many calls and this long per (stage, sub-batch), at most MAX_CALLS.
MIN_CALLS, MIN_SECONDS, MAX_CALLS = 3, 0.02, 50
_WINOGRAD_E = 36  # F(4x4, 3x3): 6x6 transform positions
# What the memory model cannot see, calibrated against peak RSS (tools/bench_batch_planner.py,
# MobileNetV2 and ResNet-18 at 224x224): the allocator's and the Python objects' overhead, and
# the two Winograd scratch paths a process can hold at once. Added to every plan, the ordinary
# one included, so that budgets compare alike.
RESERVE_BYTES = 4 << 20
RESERVE_FRACTION = 0.05  # of the estimated native bytes
_CACHE_VERSION = 2  # bump when what an entry holds, or the estimates in it, change
_ENTRY_KEYS = frozenset({"work", "work_direct", "input", "native", "shared", "ms", "extra", "in_layout", "out_layout",
                         "need"})
_ROWS = 32  # packed panels: output rows rounded up to this (the widest NR of any kernel level)
_MR = 16  # GEMM tiles: pixels rounded up to this (the widest MR)


def _aligned(n: int) -> int:
    return -(-n // HOST_ALIGNMENT) * HOST_ALIGNMENT


# -- one stage, lowered --------------------------------------------------------------------------
class _StageViews(Views):
    """Arena views where some blocks live outside the stage's arena: its input in its input
    buffer, its output (``direct``) in the next stage's."""

    def __init__(self, arena: np.ndarray, external: dict[int, np.ndarray]) -> None:
        super().__init__(arena)
        self._external = external

    def __getitem__(self, slot: Slot) -> np.ndarray:
        memory = self._external.get(id(slot.buffer))
        if memory is None:
            return super().__getitem__(slot)
        return slot_array(memory, slot.offset, slot)


@dataclass
class StageProgram:
    """A stage lowered for the cpu kernels at one sub-batch (weights packed, nothing bound)."""
    stage: Stage
    batch: int
    graph: Graph
    binders: list[Binder]
    steps: tuple
    inputs: dict[str, Slot]
    outputs: dict[str, Slot]
    blocks: list[Block]
    native_fixed: int  # estimated native bytes it keeps: packed weights, Winograd transforms, indirection
    shared: int  # estimated per-thread Winograd scratch (process-wide, the largest counts)

    @property
    def input_block(self) -> Block | None:
        """The block of its input when it reads a cut tensor (not the first stage)."""
        return next(iter(self.inputs.values())).buffer if self.stage.index > 0 else None

    @property
    def output_slot(self) -> Slot:
        return next(iter(self.outputs.values()))

    @property
    def output_layout(self) -> str:
        return self.output_slot.layout

    @property
    def can_write_direct(self) -> bool:
        """Its one output can live in the next stage's input buffer: a whole block of its own."""
        slot = self.output_slot
        return (len(self.outputs) == 1 and slot.offset == 0 and slot.buffer is not self.input_block
                and slot.buffer.nbytes == slot.dtype.itemsize * math.prod(slot.shape))

    def input_bytes(self) -> int:
        """Bytes of its input buffer (aligned); 0 for the first stage."""
        block = self.input_block
        return 0 if block is None else _aligned(block.nbytes)

    def arena_blocks(self, direct: bool) -> list[Block]:
        external = {id(self.input_block)} if self.input_block is not None else set()
        if direct:
            external.add(id(self.output_slot.buffer))
        return [b for b in self.blocks if id(b) not in external]

    def arena_bytes(self, direct: bool) -> int:
        """Its arena without its input (and without its output when ``direct``); places the
        blocks (their offsets are then the ones :meth:`bind` uses)."""
        blocks = self.arena_blocks(direct)
        return plan_arena(blocks) if blocks else 0

    def bind(self, arena: np.ndarray, input_buffer: np.ndarray | None, output_buffer: np.ndarray | None
             ) -> tuple[list[Runner], Views]:
        """Its runners over ``arena`` (placed by the last :meth:`arena_bytes`), reading its input
        from ``input_buffer`` and writing its output into ``output_buffer`` when given."""
        external = {}
        if input_buffer is not None:
            external[id(self.input_block)] = input_buffer
        if output_buffer is not None:
            external[id(self.output_slot.buffer)] = output_buffer
        views = _StageViews(arena, external)
        return [bind(views) for bind in self.binders], views


def build_stage(graph: Graph, stage: Stage, batch: int, precision: str, threads: int, input_layout: str = NCHW
                ) -> StageProgram:
    """Stage ``stage`` of ``graph`` lowered at sub-batch ``batch``, its input in ``input_layout``."""
    sub = stage_graph(graph, stage, batch)
    plan = make_plan(sub)
    builder = Builder(sub, precision, threads)
    for name in sub.inputs:
        builder.define_input(name, input_layout if stage.index > 0 else NCHW)
    for step in plan.steps:
        lower = LOWERINGS.get(step.node.op)
        if lower is None:
            raise UnsupportedOperatorError(step.node.op, step.node.name, sorted(CPUBackend.supported_ops()))
        lower(step.node, builder)
    missing = [name for name in sub.outputs if not builder.is_activation(name)]
    if missing:
        raise UnsupportedModelError(f"graph outputs {missing} are constants; a budgeted session computes every output "
                                    f"(run it without memory_budget)")
    outputs = {name: builder.keep_alive(name) for name in sub.outputs}
    nodes = {node.name: node for node in sub.nodes}
    steps = tuple(_step_info(sub, nodes.get(s.node), s) for s in builder.steps)
    native, shared = _native_estimate(sub, builder, threads)
    binders = [s.binder for s in builder.steps if s.placement != "view"]
    return StageProgram(stage, batch, sub, binders, steps, dict(builder.inputs), outputs, builder.blocks(), native,
                        shared)


def _native_estimate(graph: Graph, builder: Builder, threads: int) -> tuple[int, int]:
    """(native bytes the stage keeps, per-thread Winograd scratch) estimated from its steps:
    see the module docstring. Constants not read by a native kernel are the graph's own."""
    nodes = {node.name: node for node in graph.nodes}
    packed, seen, shared = 0, set(), 0
    for record in builder.steps:
        node = nodes.get(record.node)
        if node is None or record.placement != "native":
            continue
        for i, name in enumerate(node.inputs):
            tensor = graph.tensors.get(name) if name else None
            if tensor is None or not tensor.is_constant or name in seen:
                continue
            seen.add(name)
            if i == 1 and node.op in ("Conv", "Gemm", "MatMul") and len(tensor.shape) >= 2:
                rows = tensor.shape[0] if node.op != "MatMul" else tensor.shape[-1]
                packed += tensor.stored_nbytes * -(-rows // _ROWS) * _ROWS // max(rows, 1)
            else:
                packed += tensor.stored_nbytes
        if node.op != "Conv":
            continue
        n, c = graph.tensors[node.inputs[0]].shape[:2]
        _, k, oh, ow = graph.tensors[node.outputs[0]].shape
        kh, kw = graph.tensors[node.inputs[1]].shape[2:]
        if record.note.startswith("indirect conv"):
            packed += -(-n * oh * ow // _MR) * _MR * kh * kw * 8 + c * 4
        elif record.note.startswith("winograd"):
            packed += _WINOGRAD_E * c * -(-k // _ROWS) * _ROWS * 4
            # operators_winograd.cc: a tile block of scratch (V and M); convolutions whose U
            # outgrows L2 keep it on the calling thread only, the others on every thread
            tiles = n * -(-oh // 4) * -(-ow // 4)
            per_tile = _WINOGRAD_E * (-(-c // 16) * 16 + -(-k // 16) * 16) * 4
            in_l2 = _WINOGRAD_E * c * k * 4 <= 1024 * 1024
            cap = 256 * 1024 if in_l2 else 16 * 1024 * 1024
            block = min(-(-tiles // _MR) * _MR, max(_MR, cap // per_tile // _MR * _MR))
            shared = max(shared, block * per_tile * (threads if in_l2 else 1))
    return packed, shared


# -- measuring -------------------------------------------------------------------------------------
def model_fingerprint(graph: Graph) -> str:
    """A digest of the graph's structure, shapes and constants (the measurement cache's key)."""
    import xxhash
    h = xxhash.xxh3_128()
    for node in graph.nodes:
        h.update(repr((node.op, node.name, node.inputs, node.outputs, sorted(node.attrs.items(), key=str))).encode())
    for name in sorted(graph.tensors):
        t = graph.tensors[name]
        h.update(repr((name, t.shape, str(t.dtype), t.is_constant)).encode())
        if t.encoding is not None:
            for key, value in sorted(vars(t.encoding).items()):
                h.update(key.encode())
                h.update(np.ascontiguousarray(value).tobytes() if isinstance(value, np.ndarray) else repr(value).encode())
        elif t.is_constant:
            h.update(np.ascontiguousarray(t.data).tobytes())
    h.update(repr((graph.inputs, graph.outputs)).encode())
    return h.hexdigest()


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    base = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgesdk"
    return base / "batch_planner"


class MeasurementCache:
    """Measured stage costs of one model on this machine (in memory, and on disk when writable)."""
    _memory: dict[str, dict[str, dict]] = {}

    def __init__(self, graph: Graph, precision: str, threads: int, isa: str) -> None:
        key = json.dumps([_CACHE_VERSION, __version__, model_fingerprint(graph), precision, threads, isa, cpu_features().model,
                          os.environ.get("EDGESDK_CPU_WINOGRAD", "")])
        self.key = hashlib.sha256(key.encode()).hexdigest()[:32]
        self.path = cache_dir() / f"{self.key}.json"
        entries = self._memory.get(self.key)
        if entries is None:
            try:
                entries = json.loads(self.path.read_text())
                if not isinstance(entries, dict):
                    entries = {}
            except (OSError, ValueError):
                entries = {}
            self._memory[self.key] = entries
        self.entries = entries

    @staticmethod
    def entry_key(stage: Stage, batch: int) -> str:
        return f"{stage.start}:{stage.stop}:{batch}"

    def get(self, stage: Stage, batch: int) -> dict | None:
        return self.entries.get(self.entry_key(stage, batch))

    def put(self, stage: Stage, batch: int, value: dict) -> None:
        self.entries[self.entry_key(stage, batch)] = value

    def save(self) -> None:
        """Write the entries through a temporary file (a reader never sees half of it); a cache
        that cannot be written is only slower next time."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.entries, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass


def _traced_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(fn(), the bytes of numpy/Python allocations it made that are still alive)."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = fn()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        if started:
            tracemalloc.stop()
    return result, max(0, after - before)


def measure_stage(program: StageProgram, calls: int | None = None) -> tuple[float, int]:
    """(median ms of one call, numpy bytes binding and a first call kept) of ``program`` run on
    its own: its arena, its input buffer filled with normal noise and its output copied into a
    buffer as the schedule copies it."""
    work = program.arena_bytes(direct=False)
    arena = aligned_host_buffer(max(work, 1))
    input_buffer = aligned_host_buffer(program.input_bytes()) if program.input_block is not None else None
    rng = np.random.default_rng(0)

    def bind() -> tuple[list[Runner], Views]:
        runners, views = program.bind(arena, input_buffer, None)
        for slot in program.inputs.values():
            target = views[slot]
            target[...] = rng.standard_normal(target.shape).astype(target.dtype)
        out = program.output_slot
        sink = np.empty(out.storage_shape, out.dtype)
        source = views[out]
        call = _call(runners, lambda: np.copyto(sink, source))
        call()
        return call, sink

    (call, _sink), extra = _traced_bytes(bind)
    # bind() made the first call: no further warm-up
    times = time_calls(call, warmup=0, min_runs=calls or MIN_CALLS, min_time_s=MIN_SECONDS, max_runs=MAX_CALLS)
    extra = max(0, extra - _sink.nbytes)  # the sink stands for the next stage's buffer, counted there
    return 1e3 * statistics.median(times), extra


def _call(runners: list[Runner], after: Callable[[], None]) -> Runner:
    def run() -> None:
        for runner in runners:
            runner()
        after()
    return run


# -- the schedule ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layout:
    """Where each stage's input buffer and arena sit in the run buffer (see batch_plan)."""
    inputs: tuple[int, ...]  # offset of stage k's input buffer (stage 0: unused)
    input_bytes: tuple[int, ...]
    arenas: tuple[int, ...]
    arena_bytes: tuple[int, ...]
    total: int


def _stack_layout(input_bytes: list[int], arena_bytes: list[int]) -> _Layout:
    count = len(input_bytes)
    offsets = [0] * count
    below = 0
    for k in range(count - 1, 0, -1):  # the last stage's buffer at the bottom
        offsets[k] = below
        below += input_bytes[k]
    arenas = [sum(input_bytes[max(k, 1):]) for k in range(count)]
    total = max(a + w for a, w in zip(arenas, arena_bytes))
    return _Layout(tuple(offsets), tuple(input_bytes), tuple(arenas), tuple(arena_bytes), total)


class _RunContext:
    """What one run in flight owns: the run buffer with every stage bound to its part of it."""

    def __init__(self, programs: list[StageProgram], direct: list[bool], layout: _Layout,
                 outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
        self.memory = aligned_host_buffer(max(layout.total, 1))
        self.count = len(programs)
        self.batches = [p.batch for p in programs]
        self.outputs = outputs
        from ... import _native
        self.programs: list = []  # per stage, its runners as one native Program (see cpu/backend.py)
        self.input_views: list[np.ndarray | None] = []
        self.out_views: list[np.ndarray] = []
        self.feed_views: list[tuple[str, np.ndarray]] = []
        self.result_views: list[tuple[str, np.ndarray]] = []
        m = self.memory
        for k, program in enumerate(programs):
            arena = m[layout.arenas[k]: layout.arenas[k] + layout.arena_bytes[k]]
            inp = m[layout.inputs[k]: layout.inputs[k] + layout.input_bytes[k]] if k > 0 else None
            out = None
            if direct[k]:
                nxt = k + 1
                out = m[layout.inputs[nxt]: layout.inputs[nxt] + layout.input_bytes[nxt]]
            runners, views = program.bind(arena, inp, out)
            self.programs.append(_native.kernels.Program(runners))
            if k > 0:
                self.input_views.append(views[next(iter(program.inputs.values()))])
            else:
                self.input_views.append(None)
                self.feed_views = [(name, views[slot]) for name, slot in program.inputs.items()]
            if k == self.count - 1:
                self.result_views = [(name, views.logical(slot)) for name, slot in program.outputs.items()]
                self.out_views.append(None)
            else:
                self.out_views.append(None if direct[k] else views[program.output_slot])

    def run(self, feeds: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
        results = {name: np.empty(shape, dtype) for name, (shape, dtype) in self.outputs.items()}
        last = self.count - 1
        for start in range(0, batch, self.batches[last]):
            self._stage(last, start, feeds, results)
        return results

    def _stage(self, k: int, start: int, feeds: dict[str, np.ndarray], results: dict[str, np.ndarray]) -> None:
        """Run stage ``k`` on images [start, start + b_k): first the stages before it, as many
        times as it takes to fill its input buffer (seed 004's recursive schedule)."""
        b = self.batches[k]
        if k == 0:
            for name, view in self.feed_views:
                np.copyto(view, feeds[name][start:start + b])
        else:
            step = self.batches[k - 1]
            for sub in range(start, start + b, step):
                self._stage(k - 1, sub, feeds, results)
        self.programs[k].run()
        if k == self.count - 1:
            for name, view in self.result_views:
                np.copyto(results[name][start:start + b], view)
        elif self.out_views[k] is not None:  # copy mode: into the next stage's buffer, at its place
            position = start % self.batches[k + 1]
            np.copyto(self.input_views[k + 1][position:position + b], self.out_views[k])


class StagedBackend(Backend):
    """The cpu backend running a :class:`~edgesdk.runtime.batch_plan.BatchPlan`: each stage at
    its sub-batch over one run buffer per run in flight (a pool, as the cpu backend's arenas).
    The packed weights are shared by the runs; outputs are the caller's arrays."""

    name = "cpu"
    precisions = CPUBackend.precisions

    @classmethod
    def supported_ops(cls) -> frozenset[str]:
        return CPUBackend.supported_ops()

    def __init__(self, plan: ExecutionPlan, programs: list[StageProgram], direct: list[bool], *,
                 precision: str, threads: int, isa: str) -> None:
        super().__init__(plan, precision=precision, threads=threads)
        self.thread_count = threads
        self.isa = isa
        self.programs = programs
        self.batch = batch_size(plan.graph)
        arena_bytes = [p.arena_bytes(d) for p, d in zip(programs, direct)]  # places each stage's blocks
        self.layout = _stack_layout([p.input_bytes() for p in programs], arena_bytes)
        self.steps = tuple(step for p in programs for step in p.steps)
        graph = plan.graph
        outputs = {name: (graph.tensors[name].shape, graph.tensors[name].dtype) for name in graph.outputs}
        layout = self.layout
        self._contexts: Pool[_RunContext] = Pool(
            lambda: _RunContext(programs, direct, layout, outputs),
            lambda: SessionClosedError("the cpu backend of this session is closed; create a new Session"))
        self._contexts.prime()

    @property
    def run_buffer_bytes(self) -> int:
        """Bytes of one run buffer (stage arenas and input buffers)."""
        return self.layout.total

    @property
    def arena_count(self) -> int:
        """Run buffers made so far: one per run that was in flight at the same time, at the peak."""
        return self._contexts.created

    @property
    def device_label(self) -> str:
        threads = f"{self.thread_count} thread{'s' if self.thread_count != 1 else ''}"
        return f"{cpu_features().model} ({self.isa} kernels, {threads}, {len(self.programs)} budgeted stages)"

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the schedule on a run buffer of its own (from the pool); thread-safe."""
        context = self._contexts.take()
        try:
            return context.run(feeds, self.batch)
        finally:
            self._contexts.give_back(context)

    def profile(self, feeds: dict[str, np.ndarray]):
        raise BackendUnavailableError("a session with memory_budget runs its stages at their own sub-batches and has "
                                      "no per-op profiler; profile the model without memory_budget")

    def close(self) -> None:
        self._contexts.close()


# -- planning ---------------------------------------------------------------------------------------
def plan_budgeted(plan: ExecutionPlan, *, precision: str, threads: int | None, budget: int,
                  progress: ProgressFn | None = None, compare: bool = False,
                  max_stages: int | None = None) -> tuple[Backend, BatchPlan]:
    """The backend that runs ``plan``'s graph within ``budget`` bytes, and the plan it follows.

    ``compare`` also measures the unconstrained run (the whole batch at once) and the best
    fixed sub-batch, for ``edgesdk inspect`` and the benchmark. Raises
    :class:`~edgesdk.errors.MemoryBudgetError` (naming the minimum) when no schedule fits."""
    reason = CPUBackend.unavailable_reason()
    if reason:
        raise BackendUnavailableError(f"memory_budget needs the cpu backend: {reason}")
    from ... import _native
    threads = threads if threads is not None else physical_cores()
    isa = _native.kernels.active_isa()
    graph = plan.graph
    batch = batch_size(graph) or 0
    base = (sum(t.stored_nbytes for t in graph.constants()) + sum(graph.tensors[o].nbytes for o in graph.outputs)
            + RESERVE_BYTES)
    cache = MeasurementCache(graph, precision, threads, isa)
    from ...runtime.batch_plan import DEFAULT_MAX_STAGES
    stages = find_stages(graph, max_stages or DEFAULT_MAX_STAGES) if batch > 1 else []
    whole = Stage(0, 0, len(graph.nodes), tuple(graph.inputs), tuple(graph.outputs), graph.nodes[0].name,
                  graph.nodes[-1].name, 0)

    # The unconstrained run: the whole graph at batch N, as the ordinary backend allocates it.
    whole_costs = _measure_all(graph, [whole], [batch or graph.tensors[graph.inputs[0]].shape[0]], precision, threads,
                               cache, budget=None, base=base, progress=None, time_it=compare)
    n_full = batch or graph.tensors[graph.inputs[0]].shape[0]
    full = whole_costs[0].get(n_full)
    unconstrained = base + full.fixed + full.work + full.shared
    if budget >= unconstrained or batch <= 1 or not stages:
        if budget < unconstrained:  # one stage and nothing to split: the whole batch is the minimum
            raise budget_error(budget, n_full, schedule_cost([{n_full: full}], n_full, [n_full], base), base, WHAT)
        cache.save()
        backend = CPUBackend(plan, precision=precision, threads=threads)
        result = BatchPlan(n_full, budget, "ordinary", unconstrained, unconstrained, base, full.work,
                           full.ms if compare else None, full.ms if compare else None)
        return backend, result

    candidates = divisors(batch)
    costs = _measure_all(graph, stages, candidates, precision, threads, cache, budget=budget, base=base,
                         progress=progress, time_it=True)
    cache.save()
    fastest, smallest = solve(costs, batch, budget, base)
    if fastest is None:  # the minimum: every stage at sub-batch 1 (the memory of each is known, run or not)
        ones = _measure_all(graph, stages, [1], precision, threads, cache, budget=None, base=base, progress=None,
                            time_it=True)  # run too: what binding allocates counts in the minimum
        cache.save()
        raise budget_error(budget, batch, schedule_cost(ones, batch, [1] * len(stages), base), base, WHAT)
    fixed = best_fixed(costs, batch, budget, base) if compare else None
    programs = _build_chain(graph, stages, fastest.batches, precision, threads)
    backend = StagedBackend(plan, programs, list(fastest.direct), precision=precision, threads=threads, isa=isa)
    rows = []
    for k, (stage, b) in enumerate(zip(stages, fastest.batches)):
        c = costs[k][b]
        rows.append(StagePlan(k, stage.first_node, stage.last_node, stage.stop - stage.start, b,
                              backend.layout.arena_bytes[k], c.input if k else 0, c.fixed, c.ms, batch // b,
                              fastest.direct[k]))
    result = BatchPlan(batch, budget, "staged", fastest.peak, unconstrained, base, backend.run_buffer_bytes,
                       fastest.ms, full.ms if compare else None, fixed.batches[0] if fixed else None,
                       fixed.ms if fixed else None, tuple(rows))
    return backend, result


def _build_chain(graph: Graph, stages: list[Stage], batches: tuple[int, ...], precision: str, threads: int
                 ) -> list[StageProgram]:
    programs: list[StageProgram] = []
    layout = NCHW
    for stage, b in zip(stages, batches):
        program = build_stage(graph, stage, b, precision, threads, layout)
        layout = program.output_layout
        programs.append(program)
    return programs


def _measure_all(graph: Graph, stages: list[Stage], candidates: list[int], precision: str, threads: int,
                 cache: MeasurementCache, *, budget: int | None, base: int, progress: ProgressFn | None,
                 time_it: bool) -> list[dict[int, StageCost]]:
    """Stage -> sub-batch -> cost, from the cache or measured (a (stage, sub-batch) whose own
    bytes exceed ``budget`` is built to learn them but neither bound nor run, so planning never
    holds much more than the budget)."""
    costs: list[dict[int, StageCost]] = [{} for _ in stages]
    total = len(stages) * len(candidates)
    done = 0
    started = time.perf_counter()
    layout = NCHW
    for k, stage in enumerate(stages):
        next_layout = None
        for b in candidates:
            entry = cache.get(stage, b)
            if entry is not None and not _ENTRY_KEYS <= entry.keys():
                entry = None  # written by another version: measure again
            if entry is not None:  # whether it fits is this budget's question, not the one it was measured under
                entry["fits"] = budget is None or entry["need"] <= budget
            if entry is None or (time_it and entry.get("ms") is None and entry["fits"]):
                program = build_stage(graph, stage, b, precision, threads, entry["in_layout"] if entry else layout)
                work = program.arena_bytes(direct=False)
                work_direct = program.arena_bytes(direct=True) if program.can_write_direct and k < len(stages) - 1 \
                    else None
                need = base + int(program.native_fixed * (1 + RESERVE_FRACTION)) + work + program.input_bytes() + program.shared
                entry = {"work": work, "work_direct": work_direct, "input": program.input_bytes(),
                         "native": program.native_fixed, "shared": program.shared, "ms": None, "extra": 0,
                         "in_layout": layout, "out_layout": program.output_layout, "need": need,
                         "fits": budget is None or need <= budget}
                if time_it and entry["fits"]:
                    entry["ms"], entry["extra"] = measure_stage(program)
                cache.put(stage, b, entry)
                del program
            next_layout = entry["out_layout"]
            if entry.get("ms") is not None or not time_it:
                native = entry["native"] + int(entry["native"] * RESERVE_FRACTION)
                costs[k][b] = StageCost(entry["ms"] if entry.get("ms") is not None else math.nan, entry["work"],
                                        entry["work_direct"], entry["input"], native + entry["extra"],
                                        entry["shared"])
            done += 1
            if progress is not None:
                elapsed = time.perf_counter() - started
                progress(done, total, f"stage {k + 1}/{len(stages)} at {b}, {elapsed:.0f}s")
        layout = next_layout or layout
    return costs
