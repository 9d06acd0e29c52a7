"""The memory-budgeted per-stage batch planner (seed 004, section 2.8): which sub-batch each part
of the network runs at so that a batch of N images goes through fastest without holding more
than a memory budget.

Backend-independent parts live here: cutting a graph into *stages*, re-batching a graph, the
dynamic program over measured per-stage costs and the plan it returns. The cpu backend measures
the costs and runs the schedule (``backends/cpu/staged.py``).

Stages. The graph (topologically ordered) is cut where exactly one activation is live: between
MobileNetV2's or ResNet's blocks, never inside a residual block (its shortcut is live there too).
Each stage reads one tensor (the first: the graph inputs) and writes one (the last: the graph
outputs), so a stage's input at batch B can be assembled from B/b runs of the stages before it.

Memory model (what ``backends/cpu/staged.py`` allocates, byte for byte). A run holds:

* ``base``: the graph's constants as stored and the output arrays of the N images;
* per stage ``k`` its *fixed* bytes at its sub-batch ``b_k``: packed weights (and their Winograd
  transform where the kernels pick it at that batch) and what binding the stage allocates
  outside the arena (indirection buffers, padded copies);
* one *run buffer* laid out as a stack: the input buffers of the stages (stage ``j``'s holds
  ``b_j`` images of its input) from the last stage at the bottom up, and the *work arena* of
  stage ``k`` (its activations and scratch, inputs excluded) just above the input buffers of
  the stages ``>= k``. While stage ``k`` runs, the buffers of the stages before it are empty, so
  its arena reuses their bytes; the buffer is ``max_k(work_k + sum_{j >= k} in_j)`` bytes.

A stage followed by one of the same sub-batch writes its output straight into the next one's
input buffer (``direct``): its arena then excludes that output. Otherwise its output is copied
into the next input buffer after each of the runs that fill it.

Time: stage ``k`` runs ``N / b_k`` times at its measured ``Time(k, b_k)``; a schedule's time is
their sum, and the planner minimises it (maximum throughput). Sub-batches are divisors of N and
never decrease toward the output (each divides the next), as in the paper.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import MemoryBudgetError, UnsupportedModelError
from ..graph import Graph, Node
from .cost import node_macs
from .sizes import format_bytes

# Where the DP stops splitting: each stage costs a Python call and a copy per run, and each
# (stage, sub-batch) a measurement, so a few more than the blocks of a MobileNetV2 is plenty.
DEFAULT_MAX_STAGES = 16
# Ops that only relabel bytes (the cpu backend lowers them to views): a stage of nothing else
# would have its output alias its input, so such stages are merged into a neighbour.
_VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


# -- the budget argument -------------------------------------------------------------------------
def check_memory_budget(value: Any, what: str = "memory_budget") -> int | None:
    """``value`` as a number of bytes (None stays None); a bool, a non-integer or a value <= 0
    is a one-line :class:`MemoryBudgetError`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise MemoryBudgetError(f"{what} must be a positive whole number of bytes or None, got {value!r} "
                                f"({type(value).__name__})", budget=value)
    if value <= 0:
        raise MemoryBudgetError(f"{what} must be a positive number of bytes, got {value}", budget=value)
    return int(value)


# -- stages --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stage:
    """Nodes ``start`` (inclusive) to ``stop`` (exclusive) of the graph, reading ``inputs``
    (the graph inputs for the first stage, else the one tensor live at the cut) and writing
    ``outputs`` (the next cut's tensor, or the graph outputs for the last stage)."""
    index: int
    start: int
    stop: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    first_node: str
    last_node: str
    macs: int

    @property
    def label(self) -> str:
        """``first node .. last node`` (one name when the stage has one node)."""
        return self.first_node if self.first_node == self.last_node else f"{self.first_node} .. {self.last_node}"


def batch_size(graph: Graph) -> int | None:
    """N when every graph input and output has leading dimension N (and is at least 1-D), else
    None: the planner only splits along a batch axis every interface tensor shares."""
    dims = {graph.tensors[name].shape[0] if graph.tensors[name].shape else None
            for name in [*graph.inputs, *graph.outputs]}
    return next(iter(dims)) if len(dims) == 1 and None not in dims else None


def find_stages(graph: Graph, max_stages: int = DEFAULT_MAX_STAGES) -> list[Stage]:
    """The graph cut into at most ``max_stages`` stages at tensors where exactly one activation
    is live (float32, batch-leading, not a graph output). One stage when there is no such cut;
    adjacent stages are merged, the cheapest pair first (by multiply-adds), down to
    ``max_stages``, and view-only stages always."""
    nodes = graph.nodes
    batch = batch_size(graph)
    if not nodes:
        return []
    cuts = _cut_points(graph, batch) if batch is not None else []
    bounds = [0, *cuts, len(nodes)]
    segments = [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
    work = [sum(max(node_macs(nodes[i], graph), _elements(nodes[i], graph)) for i in seg) for seg in segments]
    views = [all(nodes[i].op in _VIEW_OPS for i in seg) for seg in segments]

    def merge(i: int) -> None:  # segment i absorbs segment i + 1
        segments[i] += segments.pop(i + 1)
        work[i] += work.pop(i + 1)
        merged_view = views.pop(i + 1)  # (popped first: `and` would skip the pop)
        views[i] = views[i] and merged_view

    while len(segments) > 1 and any(views):
        i = views.index(True)
        merge(i - 1 if i > 0 else i)
    while len(segments) > max(1, max_stages):
        i = min(range(len(segments) - 1), key=lambda j: work[j] + work[j + 1])
        merge(i)
    stages = []
    for index, seg in enumerate(segments):
        start, stop = seg[0], seg[-1] + 1
        inputs = tuple(graph.inputs) if index == 0 else (_single_live(graph, start),)
        outputs = tuple(graph.outputs) if index == len(segments) - 1 else (_single_live(graph, stop),)
        macs = sum(node_macs(nodes[i], graph) for i in seg)
        stages.append(Stage(index, start, stop, inputs, outputs, nodes[start].name, nodes[stop - 1].name, macs))
    return stages


def _elements(node: Node, graph: Graph) -> int:
    """Work of an op without multiply-adds (pooling, adds): its output elements; views none."""
    if node.op in _VIEW_OPS:
        return 0
    return sum(math.prod(graph.tensors[o].shape) for o in node.outputs if o)


def _live_sets(graph: Graph) -> list[set[str]]:
    """For each position p (before node p, p = 1..len-1): the activations written before p
    that node p or a later one reads, or that are graph outputs (live to the end of a run)."""
    nodes = graph.nodes
    last_read: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.inputs:
            if name and not graph.tensors[name].is_constant:
                last_read[name] = index
    for name in graph.outputs:
        last_read[name] = len(nodes)
    live = {name for name in graph.inputs if name in last_read}
    sets = []
    for index, node in enumerate(nodes[:-1]):
        live.update(o for o in node.outputs if o and o in last_read)
        live = {name for name in live if last_read[name] > index}
        sets.append(set(live))
    return [set()] + sets  # position 0 is never a cut


def _cut_points(graph: Graph, batch: int) -> list[int]:
    outputs = set(graph.outputs)
    cuts = []
    for position, live in enumerate(_live_sets(graph)):
        if position == 0 or len(live) != 1:
            continue
        (name,) = live
        tensor = graph.tensors[name]
        if name in outputs or tensor.dtype != np.float32 or not tensor.shape or tensor.shape[0] != batch:
            continue
        cuts.append(position)
    return cuts


def _single_live(graph: Graph, position: int) -> str:
    (name,) = _live_sets(graph)[position]
    return name


def stage_graph(graph: Graph, stage: Stage, batch: int) -> Graph:
    """Stage ``stage`` of ``graph`` as a graph of its own at batch ``batch`` (constants shared,
    shapes inferred again). Raises :class:`UnsupportedModelError` when the stage does not scale
    along the batch axis (a reshape or a broadcast that hard-codes it in a way not undone here)."""
    from .shapes import infer_shapes
    full = batch_size(graph)
    sub = Graph(f"{graph.name}[stage {stage.index}]")
    for name in stage.inputs:
        t = graph.tensors[name]
        sub.add_input(name, (batch, *t.shape[1:]) if full is not None else t.shape, t.dtype)
    nodes = graph.nodes[stage.start:stage.stop]
    for node in nodes:
        for name in node.inputs:
            if name and name not in sub.tensors and graph.tensors[name].is_constant:
                sub.tensors[name] = graph.tensors[name].copy()
        attrs = dict(node.attrs)
        shape = attrs.get("shape")
        # Static-shape imports fold a Flatten's `x.shape[0]` into the Reshape's target: follow it.
        if node.op == "Reshape" and isinstance(shape, (tuple, list)) and shape and shape[0] == full \
                and graph.tensors[node.inputs[0]].shape[:1] == (full,):
            attrs["shape"] = (batch, *shape[1:])
        sub.nodes.append(Node(node.op, node.name, list(node.inputs), list(node.outputs), attrs))
    sub.outputs = list(stage.outputs)
    try:
        infer_shapes(sub)
    except UnsupportedModelError as exc:
        raise UnsupportedModelError(f"stage {stage.index} ({stage.label}) does not run at batch {batch}: {exc}") from None
    for node in nodes:
        for name in node.outputs:
            if not name:
                continue
            old, new = graph.tensors[name].shape, sub.tensors[name].shape
            expected = (batch, *old[1:]) if old[:1] == (full,) else old
            if new != expected:
                raise UnsupportedModelError(
                    f"stage {stage.index} ({stage.label}) does not scale with the batch: {name!r} is {new} at "
                    f"batch {batch}, expected {expected}")
    return sub


def rebatch(graph: Graph, batch: int) -> Graph:
    """A copy of ``graph`` whose batch (the leading dimension of every input and output) is
    ``batch``; :class:`UnsupportedModelError` when the graph has no such axis or does not scale."""
    full = batch_size(graph)
    if full is None:
        raise UnsupportedModelError(f"graph {graph.name!r} has no batch axis (its inputs and outputs do not share a "
                                    f"leading dimension); pass an input shape with the batch instead")
    if full == batch:
        return graph.copy()
    whole = Stage(0, 0, len(graph.nodes), tuple(graph.inputs), tuple(graph.outputs), "", "", 0)
    sub = stage_graph(graph, whole, batch)
    sub.name, sub.metadata = graph.name, dict(graph.metadata)
    return sub


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (the sub-batches the planner considers)."""
    return [d for d in range(1, n + 1) if n % d == 0]


# -- costs and the dynamic program -----------------------------------------------------------------
@dataclass(frozen=True)
class StageCost:
    """What stage ``k`` costs at sub-batch ``batch``: ``ms`` per call (measured), ``work`` bytes
    of its arena with its output inside it, ``work_direct`` without it (None: the output cannot
    be written into the next stage's buffer), ``input`` bytes of its input buffer (0 for the
    first stage, whose input sits in its arena) and ``fixed`` bytes it keeps (packed weights,
    per-run native state); ``shared`` bytes of scratch the kernels keep per thread for the life
    of the process, which the stages share (the largest one counts)."""
    ms: float
    work: int
    work_direct: int | None
    input: int
    fixed: int
    shared: int = 0


CostTable = Sequence[dict[int, StageCost]]  # stage -> sub-batch -> cost (absent: not measured / too big)


@dataclass(frozen=True)
class Schedule:
    """Sub-batches per stage with the predicted time for all N images and the predicted peak."""
    batches: tuple[int, ...]
    ms: float
    peak: int
    direct: tuple[bool, ...]


def schedule_cost(costs: CostTable, batch: int, batches: Sequence[int], base: int = 0) -> Schedule:
    """Time and peak memory of running the stages at ``batches`` (the model of the module
    docstring); used by the DP's tests as the brute-force oracle."""
    count = len(costs)
    direct = tuple(k < count - 1 and batches[k] == batches[k + 1] and costs[k][batches[k]].work_direct is not None
                   for k in range(count))
    ms = sum(batch // b * costs[k][b].ms for k, b in enumerate(batches))
    fixed = sum(costs[k][b].fixed for k, b in enumerate(batches))
    buffers = [costs[k][b].input if k > 0 else 0 for k, b in enumerate(batches)]
    stack = max(_work(costs[k][b], direct[k]) + sum(buffers[k:]) for k, b in enumerate(batches))
    shared = max(costs[k][b].shared for k, b in enumerate(batches))
    return Schedule(tuple(batches), ms, base + fixed + stack + shared, direct)


def _work(cost: StageCost, direct: bool) -> int:
    return cost.work_direct if direct and cost.work_direct is not None else cost.work


@dataclass
class _Partial:
    """A schedule of stages k..S-1 (the DP goes from the output toward the input)."""
    first: int  # sub-batch of stage k
    buffers: int  # input buffers of stages >= max(k, 1)
    fixed: int
    stack: int  # max over stages >= k of arena + the buffers live with it
    shared: int  # max over stages >= k of their per-thread scratch
    ms: float
    batches: tuple[int, ...]
    direct: tuple[bool, ...]

    def dominates(self, other: "_Partial") -> bool:
        return (self.buffers <= other.buffers and self.fixed <= other.fixed and self.stack <= other.stack
                and self.shared <= other.shared and self.ms <= other.ms)


def solve(costs: CostTable, batch: int, budget: int | None, base: int = 0) -> tuple[Schedule | None, Schedule | None]:
    """(the fastest schedule within ``budget`` bytes or None, the schedule of least memory among
    those within it; with ``budget`` None, of all: :func:`minimum_schedule`).

    The DP of seed 004 section 2.8 run from the output toward the input: a state is a schedule
    of stages k..S-1 with stage k's sub-batch, and its memory is summarised by the input buffers
    reserved for the later stages (the paper's A), their fixed bytes and the largest stack seen
    so far. Instead of the paper's memory grid (rounded up), each (stage, sub-batch) keeps the
    Pareto front of those and the time, so the result is exact; a state over budget is dropped
    as soon as its bytes plus the least the earlier stages can add exceed it."""
    count = len(costs)
    if count == 0:
        return None, None
    least_fixed = [min((c.fixed for c in costs[k].values()), default=0) for k in range(count)]
    prefix_fixed = [sum(least_fixed[:k]) for k in range(count + 1)]
    limit = math.inf if budget is None else budget - base
    fronts: dict[int, list[_Partial]] = {}
    last = count - 1
    for b, c in costs[last].items():
        if batch % b:
            continue
        buffers = c.input if last > 0 else 0
        state = _Partial(b, buffers, c.fixed, c.work + buffers, c.shared, batch // b * c.ms, (b,), (False,))
        _add(fronts, state, limit, prefix_fixed[last])
    for k in range(last - 1, -1, -1):
        new: dict[int, list[_Partial]] = {}
        for later, states in fronts.items():
            for b, c in costs[k].items():
                if later % b:
                    continue
                direct = b == later and c.work_direct is not None
                buffers_k = c.input if k > 0 else 0
                for s in states:
                    buffers = s.buffers + buffers_k
                    stack = max(s.stack, _work(c, direct) + buffers)
                    state = _Partial(b, buffers, s.fixed + c.fixed, stack, max(s.shared, c.shared),
                                     s.ms + batch // b * c.ms,
                                     (b, *s.batches), (direct, *s.direct))
                    _add(new, state, limit, prefix_fixed[k])
        fronts = new
    finals = [s for states in fronts.values() for s in states]
    if not finals:
        return None, None
    schedules = [Schedule(s.batches, s.ms, base + s.fixed + s.stack + s.shared, s.direct) for s in finals]
    smallest = min(schedules, key=lambda s: (s.peak, s.ms))
    fitting = [s for s in schedules if budget is None or s.peak <= budget]
    fastest = min(fitting, key=lambda s: (s.ms, s.peak)) if fitting else None
    return fastest, smallest


def _add(fronts: dict[int, list[_Partial]], state: _Partial, limit: float, earlier_fixed: int) -> None:
    """Keep ``state`` in the front of its sub-batch unless it cannot fit or is dominated."""
    if limit != math.inf and state.fixed + state.stack + state.shared + earlier_fixed > limit:
        return
    front = fronts.setdefault(state.first, [])
    if any(s.dominates(state) for s in front):
        return
    front[:] = [s for s in front if not state.dominates(s)]
    front.append(state)


def minimum_schedule(costs: CostTable, batch: int, base: int = 0) -> Schedule | None:
    """The schedule that needs the least memory (whatever its time)."""
    return solve(costs, batch, None, base)[1]


def best_fixed(costs: CostTable, batch: int, budget: int, base: int = 0) -> Schedule | None:
    """Seed 004's baseline: one sub-batch for every stage, the fastest that fits ``budget``."""
    best = None
    for b in divisors(batch):
        if all(b in c for c in costs):
            s = schedule_cost(costs, batch, [b] * len(costs), base)
            if s.peak <= budget and (best is None or s.ms < best.ms):
                best = s
    return best


# -- the plan ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StagePlan:
    """One stage of a plan: its nodes, sub-batch, memory while it runs and measured time."""
    index: int
    first_node: str
    last_node: str
    nodes: int
    sub_batch: int
    work_bytes: int  # its arena (activations and scratch)
    input_bytes: int  # its input buffer (0 for the first stage)
    fixed_bytes: int  # packed weights and per-run native state
    ms: float  # one call at its sub-batch
    calls: int  # calls per batch of N
    direct: bool  # writes its output straight into the next stage's input buffer

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class BatchPlan:
    """What a budgeted session runs (``Session(..., memory_budget=...).batch_plan``).

    ``mode`` is ``"ordinary"`` (the budget holds the whole batch: one stage at batch N, the
    backend's usual path) or ``"staged"`` (the stages at their sub-batches). Bytes follow the
    module's memory model; ``peak_bytes`` is the prediction, ``unconstrained_bytes`` what the
    ordinary path needs. Times are measured milliseconds (``ms``: all N images)."""
    batch: int
    budget: int
    mode: str
    peak_bytes: int
    unconstrained_bytes: int
    base_bytes: int
    run_buffer_bytes: int
    ms: float | None
    unconstrained_ms: float | None = None
    fixed_batch: int | None = None  # the baseline's sub-batch (best single one that fits)
    fixed_batch_ms: float | None = None
    stages: tuple[StagePlan, ...] = field(default_factory=tuple)

    @property
    def images_per_second(self) -> float | None:
        """Predicted throughput (measured stage times summed over the schedule)."""
        return None if not self.ms else 1e3 * self.batch / self.ms

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, the stages as dicts, and the predicted throughput."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "stages"}
        out["images_per_second"] = self.images_per_second
        out["stages"] = [s.to_dict() for s in self.stages]
        return out

    def describe(self) -> list[str]:
        """The plan as printable lines (a table of the stages, then the totals)."""
        lines = [f"batch {self.batch}, memory budget {format_bytes(self.budget)}: {self.mode} "
                 f"(predicted peak {format_bytes(self.peak_bytes)}, unconstrained {format_bytes(self.unconstrained_bytes)})"]
        if self.stages:
            header = ["stage", "nodes", "first .. last", "sub-batch", "calls", "arena", "input buf", "fixed", "ms/call"]
            rows = [[str(s.index), str(s.nodes), s.first_node if s.first_node == s.last_node
                     else f"{s.first_node} .. {s.last_node}", str(s.sub_batch), str(s.calls),
                     format_bytes(s.work_bytes), format_bytes(s.input_bytes) if s.index else "-",
                     format_bytes(s.fixed_bytes), f"{s.ms:.2f}"] for s in self.stages]
            widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
            for r in [header, ["-" * w for w in widths], *rows]:
                lines.append("  ".join(c.rjust(w) if i not in (2,) else c.ljust(w)
                                       for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        lines.append(f"memory: {format_bytes(self.base_bytes)} constants, outputs and runtime reserve + "
                     f"{format_bytes(sum(s.fixed_bytes for s in self.stages))} packed weights and per-run state + "
                     f"{format_bytes(self.run_buffer_bytes)} run buffer = {format_bytes(self.peak_bytes)}"
                     if self.stages else f"memory: {format_bytes(self.peak_bytes)} (the whole batch in one arena)")
        if self.ms:
            text = f"predicted: {self.ms:.1f} ms per batch of {self.batch}, {self.images_per_second:.1f} images/s"
            if self.unconstrained_ms:
                text += (f"; unconstrained batch {self.batch}: {self.unconstrained_ms:.1f} ms "
                         f"({100 * (self.unconstrained_ms / self.ms):.0f}% of its throughput kept)")
            if self.fixed_batch_ms:
                text += f"; best fixed sub-batch {self.fixed_batch}: {self.fixed_batch_ms:.1f} ms"
            lines.append(text)
        return lines


def budget_error(budget: int, batch: int, smallest: Schedule | None, base: int, what: str) -> MemoryBudgetError:
    """The one-line error of a budget below the smallest schedule."""
    if smallest is None:
        return MemoryBudgetError(f"memory budget {format_bytes(budget)} cannot be planned for batch {batch}: no stage "
                                 f"configuration could be measured; raise {what}", budget=budget)
    how = ("every stage at sub-batch 1" if set(smallest.batches) == {1} else
           f"sub-batches {'/'.join(map(str, smallest.batches))}")
    return MemoryBudgetError(
        f"memory budget {format_bytes(budget)} is below the minimum {format_bytes(smallest.peak)} for batch {batch} "
        f"({how}); raise {what} or lower the batch", budget=budget, minimum=smallest.peak)
