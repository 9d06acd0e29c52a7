"""Lowering a planned graph into a flat list of prepared calls over one activation arena.

Lowerings (``ops.py``) ask the :class:`Builder` for their inputs in the layout their kernel reads
(``read``), for output buffers (``write``), views (``alias``) and per-step scratch (``scratch``),
then ``emit`` a *binder*: a function that, once the arena exists, receives the arena views and
returns a zero-argument callable that runs the step. Everything shape-, weight- and
layout-dependent is decided here, at session creation; a run only calls the prepared callables.

Layouts: 4-D activations are stored NCHW (the graph's own order) or NHWC (what the convolution,
pooling and per-channel kernels read). Each tensor is stored in the layout its producer writes;
a consumer that needs the other one gets a conversion step, shared by every later consumer. When
C == 1 or H*W == 1 both orders are the same bytes and no conversion is ever made.

Threads: binders may be called any number of times, once per arena; everything a runner writes
(the arena, and per-call native state such as a convolution's indirection buffer) must come
from its binder, so that each arena's runners share nothing mutable with another arena's. The
backend lends one arena per in-flight run from a :class:`Pool`.

Memory: every activation buffer is a :class:`~edgesdk.runtime.arena.Block` live from its first
write to its last read in step indices (the plan's order and release points, plus the conversion
steps added here); ``runtime.arena.plan_arena`` places them (the planner every backend uses).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Callable

import numpy as np

from ...graph import Graph, Node
from ...runtime.arena import Block
from ...runtime.cost import node_macs

NCHW, NHWC = "nchw", "nhwc"
# Below this much work (multiply-adds, or elements x window for the other ops) a step runs on the
# calling thread: waking the pool costs more than the parallel part saves (LeNet at 2 threads
# was 2x slower than at 1 before this). Not much higher: a memory-bound step after a parallel one
# (MobileNetV3's squeeze-excitation scale of a 960x16x16 tensor) reads what both threads wrote;
# on one thread half of it comes from the other core's cache (at 500k it took 3x its 1-thread time).
PARALLEL_MIN_WORK = 100_000
# Ops without multiply-accumulates whose values each cost several: QLinearAdd rescales both
# operands and the sum in fixed point (three 64-bit multiply-and-shift steps a value). Counted by
# elements, a 75K-value residual add (MobileNetV2) stayed on one thread: 80 µs, 2% of the model.
WORK_PER_VALUE = {"QLinearAdd": 8, "QLinearMul": 4}

Runner = Callable[[], None]


def same_bytes_in_both_layouts(shape: tuple[int, ...]) -> bool:
    """NCHW and NHWC orders coincide (or do not apply: not 4-D)."""
    return len(shape) != 4 or shape[1] == 1 or shape[2] * shape[3] == 1


def reads_chw(b: "Builder", name: str) -> bool:
    """``name`` is stored NCHW (a sparse 1x1 layer wrote it) and the two orders differ: a step
    with a CHW kernel (depthwise, global pooling) should run in CHW rather than convert it."""
    return b.stored_layout(name) == NCHW and not same_bytes_in_both_layouts(b.shape(name))


def storage_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    if layout == NHWC:
        n, c, h, w = shape
        return (n, h, w, c)
    return tuple(shape)


@dataclass(eq=False)
class Slot:
    """A tensor stored in (part of) a buffer: its logical (graph) shape, its layout and its dtype
    (float32, or int64 for index outputs such as ArgMax's), from byte ``offset`` of the buffer on
    (a view such as a Slice of the outermost axis starts inside its source's buffer).

    ``pixel_stride`` (NHWC only; 0 = the tensor's own channel count) is set on the inputs of a
    channel Concat that their producer writes in place: the tensor is then a channel slice of the
    Concat's buffer, ``pixel_stride`` elements from one pixel to the next."""
    buffer: Block
    shape: tuple[int, ...]
    layout: str
    dtype: np.dtype = np.dtype(np.float32)
    offset: int = 0
    pixel_stride: int = 0

    @property
    def storage_shape(self) -> tuple[int, ...]:
        return storage_shape(self.shape, self.layout)

    @property
    def is_channel_slice(self) -> bool:
        return bool(self.pixel_stride) and self.pixel_stride != self.shape[1]


def slot_array(memory: np.ndarray, start: int, slot: Slot) -> np.ndarray:
    """The storage of ``slot`` whose first element is at byte ``start`` of ``memory``: a
    C-contiguous array of its dtype and storage shape, or for a channel slice the strided view
    (contiguous channels, evenly spaced pixels) that ConvPlan.run reads and writes in place."""
    shape = slot.storage_shape
    if not slot.is_channel_slice:
        count = math.prod(shape)
        return memory[start: start + slot.dtype.itemsize * count].view(slot.dtype).reshape(shape)
    n, h, w, c = shape
    item, stride = slot.dtype.itemsize, slot.pixel_stride
    span = ((n * h * w - 1) * stride + c) * item
    flat = memory[start: start + span].view(slot.dtype)
    return np.lib.stride_tricks.as_strided(flat, shape, (h * w * stride * item, w * stride * item, stride * item, item))


class Views:
    """Arena views of slots, handed to binders."""

    def __init__(self, arena: np.ndarray) -> None:
        self._arena = arena

    def __getitem__(self, slot: Slot) -> np.ndarray:
        """The slot's storage: a C-contiguous array of its dtype and storage shape (strided for a
        channel slice, see :class:`Slot`)."""
        return slot_array(self._arena, slot.buffer.offset + slot.offset, slot)

    def logical(self, slot: Slot) -> np.ndarray:
        """The slot in graph order (a transposed view for NHWC storage)."""
        view = self[slot]
        return view.transpose(0, 3, 1, 2) if slot.layout == NHWC else view


Binder = Callable[[Views], Runner]


@dataclass
class StepRecord:
    node: str  # graph node, or "" for conversions
    op: str
    placement: str  # native | numpy | view | reference
    note: str
    binder: Binder
    reads: list[Block] = field(default_factory=list)
    writes: list[Block] = field(default_factory=list)


class Builder:
    """Collects steps and buffers while lowerings run (see the module docstring)."""

    def __init__(self, graph: Graph, precision: str, threads: int) -> None:
        self.graph = graph
        self.precision = precision
        self.threads = threads
        self.steps: list[StepRecord] = []
        # tensor name -> layout -> slot holding it in that layout
        self._stored: dict[str, dict[str, Slot]] = {}
        self._pending_reads: list[Block] = []
        self._pending_writes: list[Block] = []
        self.inputs: dict[str, Slot] = {}
        # Concat output -> the NHWC buffer its inputs were written into (write_nhwc_part)
        self._concat_buffers: dict[str, Slot] = {}

    # -- graph inputs ---------------------------------------------------------------------------
    def define_input(self, name: str, layout: str = NCHW) -> Slot:
        """Graph inputs are copied (NCHW) into their own buffer at the start of a run. A stage of
        a budgeted session (``staged.py``) takes its input in the layout the stage before it
        wrote (``layout``), so that no conversion runs at the cut."""
        shape = self.graph.tensors[name].shape
        layout = layout if len(shape) == 4 else NCHW
        slot = self._new_slot(shape, layout, first=-1)
        self._stored[name] = {layout: slot}
        self.inputs[name] = slot
        return slot

    # -- queries for lowerings ------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        return self.graph.tensors[name].shape

    def stored_layout(self, name: str) -> str:
        """The layout ``name`` was written in (NCHW when both coincide)."""
        layouts = self._stored[name]
        return NHWC if NHWC in layouts and not same_bytes_in_both_layouts(self.shape(name)) else NCHW

    def threads_for(self, node: Node) -> int:
        """The session's thread count for steps with enough work to split, else 1."""
        work = node_macs(node, self.graph)
        if not work:
            window = node.attrs.get("kernel_shape", (1,))
            work = sum(math.prod(self.shape(o)) for o in node.outputs if o) * math.prod(window)
            if node.op.startswith("Global"):
                work = math.prod(self.shape(node.inputs[0]))
            work *= WORK_PER_VALUE.get(node.op, 1)
        return self.threads if work >= PARALLEL_MIN_WORK else 1

    def readers(self, name: str) -> list[Node]:
        """The nodes that read ``name`` (the graph's consumer map, built once per session)."""
        return self._readers.get(name, [])

    @cached_property
    def _readers(self) -> dict[str, list[Node]]:
        return self.graph.consumers()

    def is_activation(self, name: str | None) -> bool:
        return bool(name) and name in self._stored

    # -- slots ----------------------------------------------------------------------------------
    def read(self, name: str, layout: str) -> Slot:
        """``name`` in ``layout`` (converted once if it is stored in the other one)."""
        shape = self.shape(name)
        if len(shape) != 4:
            layout = NCHW
        layouts = self._stored[name]
        slot = layouts.get(layout)
        if slot is None:
            source = next(iter(layouts.values()))
            if same_bytes_in_both_layouts(shape):
                slot = Slot(source.buffer, shape, layout, source.dtype, source.offset)
            else:
                slot = self._convert(name, source, layout)
            layouts[layout] = slot
        self._pending_reads.append(slot.buffer)
        return slot

    def read_stored(self, name: str) -> Slot:
        """``name`` in whatever layout it is stored (for ops that work on logical views)."""
        return self.read(name, self.stored_layout(name))

    def write(self, name: str, layout: str) -> Slot:
        shape = self.shape(name)
        if len(shape) != 4:
            layout = NCHW
        slot = self._concat_buffers.pop(name, None) if layout == NHWC else None
        if slot is None:  # (else a Concat whose inputs were written into it, see write_nhwc_part)
            slot = self._new_slot(shape, layout, first=len(self.steps), dtype=self.graph.tensors[name].dtype)
        self._stored[name] = {layout: slot}
        self._pending_writes.append(slot.buffer)
        return slot

    def write_nhwc_part(self, name: str) -> Slot:
        """``name`` in NHWC for a producer that writes channel slices in place (ConvPlan.run takes
        a pixel stride): a slice of its Concat's buffer when that Concat (channels, 4-D, NHWC) is
        its only reader, so that the Concat copies nothing (SqueezeNet's fire modules, Inception
        branches); else a buffer of its own, as :meth:`write`. The Concat's buffer is made by its
        first such producer and becomes the Concat's output when the Concat writes it."""
        target = self._concat_target(name)
        if target is None:
            return self.write(name, NHWC)
        concat, channel = target
        out = concat.outputs[0]
        whole = self._concat_buffers.get(out)
        if whole is None:
            whole = self._concat_buffers[out] = self._new_slot(self.shape(out), NHWC, first=len(self.steps))
        total = self.shape(out)[1]
        slot = Slot(whole.buffer, self.shape(name), NHWC, whole.dtype, channel * whole.dtype.itemsize, total)
        self._stored[name] = {NHWC: slot}
        self._pending_writes.append(slot.buffer)
        return slot

    def _concat_target(self, name: str) -> tuple[Node, int] | None:
        """(the Concat, the first channel of ``name`` in it) when ``name`` can be written in place."""
        readers = self.readers(name)
        shape = self.shape(name)
        if (len(readers) != 1 or readers[0].op != "Concat" or name in self.graph.outputs or len(shape) != 4
                or self.graph.tensors[name].dtype != np.float32):
            return None
        concat = readers[0]
        out = concat.outputs[0]
        if (concat.attrs["axis"] != 1 or concat.inputs.count(name) != 1 or out in self._stored
                or same_bytes_in_both_layouts(self.shape(out))):
            return None
        channel = 0
        for other in concat.inputs:
            if other == name:
                return concat, channel
            channel += self.shape(other)[1]
        return None

    def alias(self, name: str, source: Slot, layout: str = NCHW, offset: int = 0) -> Slot:
        """``name`` is a view of ``source``'s bytes (Reshape, layout-preserving Transpose), or of
        the contiguous run of them that starts ``offset`` elements in (Slice, Split, Gather)."""
        slot = Slot(source.buffer, self.shape(name), layout, source.dtype,
                    source.offset + offset * source.dtype.itemsize)
        self._stored[name] = {layout: slot}
        return slot

    def scratch(self, shape: tuple[int, ...]) -> Slot:
        """A buffer that lives during the next emitted step only."""
        slot = self._new_slot(tuple(shape), NCHW, first=len(self.steps))
        self._pending_writes.append(slot.buffer)
        return slot

    def emit(self, node: Node, placement: str, binder: Binder, note: str = "") -> None:
        self._append(StepRecord(node.name, node.op, placement, note, binder, self._pending_reads,
                                self._pending_writes))
        self._pending_reads, self._pending_writes = [], []

    def keep_alive(self, name: str) -> Slot:
        """Graph outputs live to the end of the run."""
        slot = self.read_stored(name)
        self._pending_reads.pop()
        slot.buffer.last = math.inf
        return slot

    # -- internals ------------------------------------------------------------------------------
    def _new_slot(self, shape: tuple[int, ...], layout: str, first: int,
                  dtype: np.dtype = np.dtype(np.float32)) -> Slot:
        dtype = np.dtype(dtype)
        nbytes = dtype.itemsize * math.prod(shape)
        return Slot(Block(nbytes, first, first), tuple(shape), layout, dtype)

    def _convert(self, name: str, source: Slot, layout: str) -> Slot:
        target = self._new_slot(source.shape, layout, first=len(self.steps), dtype=source.dtype)

        # Memory-bound: threads only where the copy is large enough to pay for waking the pool.
        threads = self.threads if math.prod(source.shape) >= PARALLEL_MIN_WORK else 1

        def bind(v: Views) -> Runner:
            return transpose_copier(v[source], v[target], source.layout, threads)

        placement = "native" if native_transpose(source.dtype) else "numpy"
        self._append(StepRecord("", f"{source.layout}->{layout}", placement, f"layout of {name}", bind,
                                [source.buffer], [target.buffer]))
        return target

    def _append(self, record: StepRecord) -> None:
        index = len(self.steps)
        for buffer in record.reads:
            buffer.last = max(buffer.last, index)
        for buffer in record.writes:
            buffer.first = min(buffer.first, index)
            buffer.last = max(buffer.last, index)
        self.steps.append(record)

    # -- arena ----------------------------------------------------------------------------------
    def blocks(self) -> list[Block]:
        """Every arena block the steps use (each once), for ``plan_arena``."""
        seen: dict[int, Block] = {}
        for slots in self._stored.values():
            for slot in slots.values():
                seen[id(slot.buffer)] = slot.buffer
        for step in self.steps:
            for buffer in step.reads + step.writes:
                seen[id(buffer)] = buffer
        return list(seen.values())


def native_transpose(dtype: np.dtype) -> bool:
    """Whether conversions of this dtype go to ``transpose_2d`` (the native cache-blocked transpose
    with SIMD register tiles: 4-byte elements, float32 and int32). Its 1- and 8-byte kernels are
    portable blocked loops that measured no faster than numpy (uint8: 0.5-1.4x), so those stay numpy."""
    return np.dtype(dtype).itemsize == 4 and np.dtype(dtype).kind in "fiu"


def transpose_copier(src: np.ndarray, dst: np.ndarray, source_layout: str, threads: int = 1) -> Runner:
    """Copies NCHW storage into NHWC storage or back: per image a (rows, cols) -> (cols, rows)
    transpose. 4-byte elements go to the native ``transpose_2d`` (1.0-6x the numpy path below on
    MobileNetV2/ResNet activations, one thread; 11 us against numpy's 36-41 for a 3x224x224 input
    image, whose 2-4 long side has its own loops there). For the other dtypes numpy's strided copy
    of a whole transposed view is several times slower than a loop of 1-D strided copies when one
    side is short, so the short side, when there is one, becomes the loop."""
    n, rows = src.shape[0], src.shape[1] if source_layout == NCHW else src.shape[1] * src.shape[2]
    a, b = src.reshape(n, rows, -1), dst.reshape(n, -1, rows)  # b[i] = a[i].T
    if native_transpose(a.dtype) and a.flags.c_contiguous and b.flags.c_contiguous:
        from ... import _native

        return _native.kernels.steps.transpose_2d(a, b, threads)
    short = min(a.shape[1], a.shape[2])
    if short > 32 or a.size < 16384:
        return partial(np.copyto, b, a.transpose(0, 2, 1))
    if a.shape[1] <= a.shape[2]:  # few rows: each becomes a strided column of the result
        pairs = [(b[i, :, r], a[i, r]) for i in range(n) for r in range(a.shape[1])]
    else:
        pairs = [(b[i, c], a[i, :, c]) for i in range(n) for c in range(a.shape[2])]
    copies = [partial(np.copyto, d, s) for d, s in pairs]

    def run() -> None:
        for copy in copies:
            copy()
    return run
