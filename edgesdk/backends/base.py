"""The interface every backend implements; the runtime knows nothing else about backends.

Threads: a backend's :meth:`Backend.run` and :meth:`Backend.profile` may be called from any
number of threads at once (the Session does not serialise them), so a backend keeps no per-run
state in shared mutable objects: per-run memory comes from a pool or a lock guards it.
"""
from __future__ import annotations

import abc
import threading
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..errors import BackendUnavailableError, InputError, SessionClosedError
from ..runtime.fallback import FALLBACK_PLACEMENT
from ..runtime.plan import ExecutionPlan
from ..runtime.profiling import StepInfo

if TYPE_CHECKING:
    from ..profile.records import ProfileReport


class Backend(abc.ABC):
    """Executes a planned graph. One instance per Session; it may prepare weights up front."""

    name: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when this backend can run on this machine, else a one-line reason and the fix."""
        return None

    @classmethod
    @abc.abstractmethod
    def supported_ops(cls) -> frozenset[str]:
        """Op types this backend has kernels for."""

    def __init__(self, plan: ExecutionPlan, *, precision: str = "fp32", threads: int | None = None):
        self.plan = plan
        self.precision = precision
        self.threads = threads
        # What each prepared step does, in run order (set by the backend's set-up): placements,
        # fallbacks, describe() and the profile's records all come from it.
        self.steps: tuple[StepInfo, ...] = ()

    @property
    def placements(self) -> dict[str, str]:
        """Graph node name -> where it runs (native | numpy | opencl | view | reference)."""
        return {s.node: s.placement for s in self.steps if s.node}

    @property
    def fallback_reasons(self) -> dict[str, str]:
        """Graph node name -> why it runs on the reference kernel, for the nodes that do."""
        return {s.node: s.note for s in self.steps if s.placement == FALLBACK_PLACEMENT}

    def describe(self) -> list[dict[str, str]]:
        """One record per prepared step, steps the backend inserted (layout conversions) included."""
        return [{"node": s.node, "op": s.op, "placement": s.placement, "note": s.note} for s in self.steps]

    @abc.abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run with validated feeds (name -> array); return every graph output by name as arrays
        the caller owns. Safe to call from several threads at once."""

    def profile(self, feeds: dict[str, np.ndarray]) -> "ProfileReport":
        """Run once like :meth:`run`, timing every step: per-op records in execution order,
        placements, memory, and the outputs (``report.outputs``). Not abstract, so that a backend
        without a profiler still runs; this default says so."""
        raise BackendUnavailableError(f"backend {self.name!r} has no per-op profiler; the built-in "
                                      f"backends (reference, cpu, opencl) have one")

    def io_binding(self) -> "IOBinding":
        """Input and output memory of the caller's own (see :class:`IOBinding`); host arrays
        here, device memory on backends that have it."""
        return HostIOBinding(self)

    def close(self) -> None:
        """Free per-session memory (arenas, device buffers). The Session calls it once, after the
        last run has returned; the backend is not used afterwards."""


class IOBinding(abc.ABC):
    """Memory for one model's inputs and outputs that the caller fills and reads in place.

    >>> binding = sess.io_binding()
    >>> binding.input("x")[...] = frame      # write the input where the backend reads it
    >>> binding.run()
    >>> logits = binding.output("y")         # read-only, valid until the next run()

    Mapping rules (every backend):

    * ``input(name)`` returns a writable array of the input's shape and dtype. Its contents stay
      between runs: fill only what changed. It is valid until the next :meth:`run` or
      :meth:`close`; after a run, call ``input(name)`` again before writing (on zero-copy
      devices the array is the mapped device buffer, and the device owns it during a run).
    * ``output(name)`` returns a read-only array holding the result of the last :meth:`run`,
      valid until the next :meth:`run` or :meth:`close`; copy it to keep it longer.
    * A binding's memory is its own: runs of the session from other threads, and other
      bindings, never read or write it. Several threads may each use their own binding (and
      ``Session.run``) at once. The methods of one binding are serialised by a lock, but the
      arrays it hands out are not: share one binding between threads only with your own
      synchronisation.
    """

    def __init__(self, backend: Backend) -> None:
        graph = backend.plan.graph
        self._backend = backend
        self._shapes = {name: graph.tensors[name].shape for name in graph.inputs + graph.outputs}
        self._dtypes = {name: np.dtype(graph.tensors[name].dtype) for name in graph.inputs + graph.outputs}
        self.input_names: list[str] = list(graph.inputs)
        self.output_names: list[str] = list(graph.outputs)
        self._lock = threading.RLock()
        self._ran = False
        self._closed = False

    def input(self, name: str) -> np.ndarray:
        """The writable array for input ``name`` (see the mapping rules above)."""
        with self._lock:
            self._check_open()
            if name not in self.input_names:
                raise InputError(f"unknown input {name!r}; inputs are {self.input_names}")
            return self._input_array(name)

    def output(self, name: str) -> np.ndarray:
        """The read-only array of output ``name`` from the last :meth:`run`."""
        with self._lock:
            self._check_open()
            if name not in self.output_names:
                raise InputError(f"unknown output {name!r}; outputs are {self.output_names}")
            if not self._ran:
                raise InputError(f"output {name!r} has no value yet; call binding.run() first")
            array = self._output_array(name)
            array.flags.writeable = False
            return array

    def run(self) -> None:
        """Run the model on the current contents of the inputs; the outputs are then readable."""
        with self._lock:
            self._check_open()
            self._run()
            self._ran = True

    def close(self) -> None:
        """Release the binding's memory (its arrays must not be used afterwards). Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._release()

    def __enter__(self) -> "IOBinding":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("this io binding is closed; create a new one with sess.io_binding()")

    @abc.abstractmethod
    def _input_array(self, name: str) -> np.ndarray: ...

    @abc.abstractmethod
    def _output_array(self, name: str) -> np.ndarray: ...

    @abc.abstractmethod
    def _run(self) -> None: ...

    def _release(self) -> None:
        return None


class HostIOBinding(IOBinding):
    """Host-memory backends (reference, cpu): the inputs are plain arrays the binding owns and
    a run is :meth:`Backend.run` on them. Nothing is mapped, so the arrays never go stale; the
    rules of :class:`IOBinding` still hold, for code that also runs on a device backend."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self._inputs = {name: np.zeros(self._shapes[name], self._dtypes[name]) for name in self.input_names}
        self._outputs: dict[str, np.ndarray] = {}

    def _input_array(self, name: str) -> np.ndarray:
        return self._inputs[name]

    def _output_array(self, name: str) -> np.ndarray:
        return self._outputs[name]

    def _run(self) -> None:
        self._outputs = self._backend.run(dict(self._inputs))

    def _release(self) -> None:
        self._inputs.clear()
        self._outputs.clear()
