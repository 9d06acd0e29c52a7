"""The one activation-arena planner every backend uses, and the pool that lends arenas to runs.

A backend turns the execution plan into *blocks*: byte regions each live from one step to
another (an activation from the step that writes it to its last reader, a kernel's scratch for
its own step). :func:`plan_arena` gives every block an offset in a single arena so that blocks
alive at the same step never overlap; tensors never alive together share bytes. The cpu backend
places its blocks in host memory (:func:`aligned_host_buffer`), the opencl backend in sub-buffers
of one device buffer; the planning is the same. Where sub-buffers are slow (NVIDIA's OpenCL
driver: an enqueue costs 5x more when kernels take many sub-buffers of one buffer),
:func:`plan_shared_objects` plans whole buffers instead, each shared by blocks never alive
together (the "shared objects" of TFLite's GPU delegate).
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, TypeVar

import numpy as np

from .plan import ExecutionPlan

# Host arenas start on a cache line and every block is a whole number of them: the kernels load
# aligned panels, and two blocks never share a line that two threads could write.
HOST_ALIGNMENT = 64
T = TypeVar("T")


@dataclass(eq=False)
class Block:
    """``nbytes`` of the arena, live from step ``first`` to step ``last`` inclusive (-1: before
    the first step, as graph inputs are; ``math.inf``: to the end of the run, as outputs are).
    Identity matters (a block is shared by the views of it), so blocks compare by identity."""
    nbytes: int
    first: float
    last: float
    name: str = ""
    offset: int = -1
    slot: int = -1  # plan_shared_objects: the object (buffer) the block lives in

    def overlaps_in_time(self, other: "Block") -> bool:
        return self.first <= other.last and other.first <= self.last


def plan_arena(blocks: Iterable[Block], alignment: int = HOST_ALIGNMENT) -> int:
    """Give every block an ``offset`` (a multiple of ``alignment``) so that blocks alive at the
    same step never share a byte; returns the arena size.

    Greedy best fit, largest block first: each goes into the smallest gap between the blocks
    already placed that are alive with it, or above them all. For the interval lifetimes of CNN
    and transformer plans this lands within a few percent of the peak of live bytes (the lower
    bound); the ``report`` of every profile prints both."""
    placed: list[Block] = []
    size = 0
    for block in sorted(blocks, key=lambda b: (-b.nbytes, b.first, b.name)):
        need = _aligned(block.nbytes, alignment)
        busy = sorted((b.offset, b.offset + _aligned(b.nbytes, alignment)) for b in placed
                      if b.overlaps_in_time(block))
        offset, best = 0, None
        for start, end in busy:
            gap = start - offset
            if gap >= need and (best is None or gap < best[1]):
                best = (offset, gap)
            offset = max(offset, end)
        block.offset = best[0] if best is not None else offset
        placed.append(block)
        size = max(size, block.offset + need)
    return size


def plan_shared_objects(blocks: Iterable[Block]) -> list[int]:
    """Give every block a ``slot``: an object (a buffer of its own) that blocks alive at the same
    step never share; returns the objects' sizes in bytes.

    Greedy by size, largest block first: each goes into the smallest object none of whose blocks
    is alive with it (every object is at least as large, being sized by its first, largest
    block), or into a new one. More bytes than :func:`plan_arena` (an object is as large as its
    largest block, and blocks never split one) but no offsets: each block is a whole buffer."""
    sizes: list[int] = []
    tenants: list[list[Block]] = []
    for block in sorted(blocks, key=lambda b: (-b.nbytes, b.first, b.name)):
        free = [i for i, held in enumerate(tenants) if not any(b.overlaps_in_time(block) for b in held)]
        if free:
            block.slot = min(free, key=lambda i: (sizes[i], i))
        else:
            block.slot = len(sizes)
            sizes.append(block.nbytes)
            tenants.append([])
        tenants[block.slot].append(block)
    return sizes


def activation_lifetimes(plan: ExecutionPlan) -> dict[str, tuple[int, int]]:
    """Activation name -> (step that writes it, last step that reads it), from the plan's order
    and release points. Graph inputs are written at step -1; a tensor nobody reads after its
    producer (a graph output, an unused output) lives for its producer's step only: callers that
    keep outputs to the end extend them."""
    graph = plan.graph
    written = {name: -1 for name in graph.inputs}
    released: dict[str, int] = {}
    for index, step in enumerate(plan.steps):
        for out in step.node.outputs:
            if out:
                written[out] = index
        for name in step.release:
            released[name] = index
    return {name: (first, released.get(name, first)) for name, first in written.items()}


def aligned_host_buffer(nbytes: int, alignment: int = HOST_ALIGNMENT) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose first byte is ``alignment``-aligned (a host arena)."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start: start + nbytes]


def _aligned(n: int, alignment: int) -> int:
    """Bytes a block of ``n`` takes: whole alignment units, at least one (an empty tensor still
    gets an address of its own, which drivers and views both want)."""
    return max(alignment, math.ceil(n / alignment) * alignment)


class Pool(Generic[T]):
    """Objects made by ``factory`` on demand and lent to one caller at a time (arenas with their
    bound steps, one per run in flight).

    A caller that finds no idle object gets a new one, so the pool grows to the peak number of
    concurrent callers and no further (runs never wait for each other). ``close`` drops the idle
    objects and makes later checkouts fail; objects still lent are dropped when they return."""

    def __init__(self, factory: Callable[[], T], on_closed: Callable[[], Exception]) -> None:
        self._factory = factory
        self._on_closed = on_closed
        self._idle: list[T] = []
        self._lock = threading.Lock()
        self._closed = False
        self.created = 0

    def prime(self) -> None:
        """Make one object now (so that set-up errors surface at session creation)."""
        item = self._factory()
        with self._lock:
            self.created += 1
            self._idle.append(item)

    def take(self) -> T:
        """An idle object, or a new one; hand it back with :meth:`give_back` (try/finally)."""
        with self._lock:
            if self._closed:
                raise self._on_closed()
            if self._idle:
                return self._idle.pop()
            self.created += 1
        try:
            return self._factory()  # outside the lock: binding an arena takes a while
        except BaseException:
            with self._lock:
                self.created -= 1
            raise

    def give_back(self, item: T) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(item)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._idle.clear()
