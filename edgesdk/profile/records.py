"""Per-op profile records: what every backend's ``profile(feeds)`` returns and reports draw."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class OpRecord:
    node: str
    op: str  # with its fused activation, e.g. "Conv+Relu6"
    placement: str  # "opencl", "reference" (CPU fallback) or "view" (no kernel, no memory)
    kernels: tuple[str, ...]  # kernel names enqueued for the node
    device_ms: float  # sum of the kernels' profiling-event times (0 for reference / view)
    host_ms: float  # host time spent on the node: enqueueing, or the whole fallback computation
    output_bytes: int  # bytes the node writes (its outputs as stored on the device)
    weight_bytes: int  # device bytes of the node's constants (compressed size when compressed)
    scratch_bytes: int  # temporary device memory only this node uses (NNM centroid planes)
    note: str = ""  # why a node runs on the reference backend

    @property
    def timed_on(self) -> str:
        """Where the node's time was measured: "device" (events of the kernels it launched) or "host"."""
        return "device" if self.kernels else "host"

    @property
    def time_ms(self) -> float:
        """The node's cost: its kernels' device time, or the host time when it ran no kernel."""
        return self.device_ms if self.kernels else self.host_ms

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kernels"] = list(self.kernels)
        return d


@dataclass(frozen=True)
class MemoryReport:
    arena_bytes: int  # activations and scratch, liveness-planned, one buffer
    unplanned_activation_bytes: int  # what one buffer per activation would take
    io_bytes: int  # graph inputs and outputs (mappable buffers)
    weight_bytes: int
    zero_copy: bool
    # How the numbers were obtained: the backend's own allocations, or an estimate (and of what).
    source: str = "allocated by the backend"

    @property
    def peak_bytes(self) -> int:
        return self.arena_bytes + self.io_bytes + self.weight_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "peak_bytes": self.peak_bytes}


@dataclass(frozen=True)
class ProfileReport:
    device: str
    precision: str
    memory_mode: str
    wall_ms: float  # host wall time of the whole run, outputs read back included
    ops: tuple[OpRecord, ...]
    memory: MemoryReport
    outputs: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def device_ms(self) -> float:
        return sum(r.device_ms for r in self.ops)

    @property
    def host_ms(self) -> float:
        return sum(r.host_ms for r in self.ops)

    @property
    def placements(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.ops:
            counts[r.placement] = counts.get(r.placement, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "precision": self.precision, "memory_mode": self.memory_mode,
                "wall_ms": self.wall_ms, "device_ms": self.device_ms, "host_ms": self.host_ms,
                "placements": self.placements, "peak_device_memory_bytes": self.memory.peak_bytes,
                "memory": self.memory.to_dict(), "ops": [r.to_dict() for r in self.ops]}
