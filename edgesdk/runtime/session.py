"""Session: load a model, optimise it, plan it and run it on one backend.

Threads: :meth:`Session.run`, :meth:`Session.profile` and :meth:`Session.io_binding` may be
called from any number of threads at once, on every backend and precision; each call returns
what a call alone would have returned. :meth:`Session.close` waits for the calls in flight, then
frees the session's memory; later calls raise :class:`~edgesdk.errors.SessionClosedError`.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ..backends import backend_candidates, create_backend
from ..backends.base import IOBinding
from ..errors import BackendUnavailableError, InputError, SessionClosedError
from ..graph import Graph
from ..passes import optimize as optimize_graph
from .batch_plan import check_memory_budget
from .plan import make_plan

if TYPE_CHECKING:
    from ..onnx_import import InputShapes
    from ..progress import ProgressFn
    from .batch_plan import BatchPlan
    from ..profile.records import ProfileReport

# numpy dtype -> ONNX Runtime's NodeArg.type spelling
_ORT_TYPES = {"float32": "float", "float16": "float16", "float64": "double", "int8": "int8", "uint8": "uint8",
              "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32", "int64": "int64",
              "uint64": "uint64", "bool": "bool"}


@dataclass(frozen=True)
class TensorInfo:
    """A graph input or output as ONNX Runtime's ``NodeArg`` describes it."""
    name: str
    shape: list[int]
    type: str  # "tensor(float)", ONNX Runtime's spelling
    dtype: np.dtype

    @classmethod
    def of(cls, name: str, shape: tuple[int, ...], dtype: Any) -> "TensorInfo":
        """The description of tensor ``name`` of ``shape`` and numpy ``dtype``."""
        dtype = np.dtype(dtype)
        return cls(name, list(shape), f"tensor({_ORT_TYPES.get(dtype.name, dtype.name)})", dtype)


class Session:
    """Run a model on a backend.

    >>> sess = Session("model.onnx")                 # backend="auto": the fastest one here
    >>> out = sess.run({sess.input_names[0]: x})     # -> {output name: array}
    >>> logits, = sess.run(None, {"input": x})       # ONNX Runtime's order -> [array, ...]

    ``backend`` is ``"auto"`` (cpu where its native module loads and it builds this model, else
    reference), or a name from :func:`edgesdk.backends.backend_names`; the name in use is
    ``sess.backend``. ``precision`` is ``"fp32"`` or ``"fp16"``; ``threads`` the kernel threads
    (None: the backend's default). ``outputs`` cuts the graph at these tensors (a detector up to
    its heads, without its data-dependent post-processing). A float16 model takes and returns
    float16 arrays, as in ONNX Runtime (it computes in float32, or in half storage with
    ``precision="fp16"``). Thread-safe; usable as a context manager (closes on exit).

    ``memory_budget`` (bytes, cpu backend) bounds what a run of a batch holds: weights, kernel
    workspaces and activations. When the whole batch does not fit, each stage of the network
    runs at its own sub-batch, chosen by measuring them (``progress(done, total, detail)`` is
    told how far that is) and a dynamic program that maximises throughput within the budget;
    ``sess.batch_plan`` says what was chosen. Runs, outputs and errors are those of a session
    without a budget; a budget below the smallest schedule raises MemoryBudgetError naming it.
    """

    def __init__(self, model: Any, backend: str = "auto", precision: str = "fp32",
                 threads: int | None = None, *, input_shapes: "InputShapes | None" = None,
                 outputs: Sequence[str] | None = None, optimize: bool = True,
                 memory_budget: int | None = None, progress: "ProgressFn | None" = None) -> None:
        from ..loader import load_model  # imports the ONNX reader only when a Session is made
        candidates = backend_candidates(backend, precision)  # a bad name or precision fails before loading
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise InputError(f"threads must be a positive integer or None, got {threads!r}")
        budget = check_memory_budget(memory_budget)
        if budget is not None and not any(c.name == "cpu" for c in candidates):
            raise BackendUnavailableError(f"memory_budget plans sub-batches for the cpu backend; backend {backend!r} "
                                          f"has no budgeted mode (use backend='cpu' or 'auto', or drop memory_budget)")
        graph = load_model(model, input_shapes, outputs)
        self._interface_dtypes = _interface_dtypes(graph)
        self.optimization_stats = optimize_graph(graph) if optimize else {}
        self.graph: Graph = graph
        self.plan = make_plan(graph)
        self.precision = precision
        self.threads = threads
        # The plan a memory budget chose (None without one): see edgesdk.runtime.batch_plan.
        self.batch_plan: "BatchPlan | None" = None
        if budget is None:
            self._impl = create_backend(candidates, self.plan, precision=precision, threads=threads)
        else:
            from ..backends.cpu.staged import plan_budgeted
            self._impl, self.batch_plan = plan_budgeted(self.plan, precision=precision, threads=threads,
                                                        budget=budget, progress=progress)
        self.backend: str = self._impl.name
        self._lock = threading.Lock()
        self._state = threading.Condition(self._lock)
        # run()'s fast path: (name, shape, dtype) of each input as fed, and the outputs in order
        self._feed_spec = [(n, self.graph.tensors[n].shape, self._dtype(n)) for n in self.graph.inputs]
        self._all_outputs = list(self.graph.outputs)
        self._in_flight = 0
        self._closed = False
        self._bindings: weakref.WeakSet[IOBinding] = weakref.WeakSet()

    # -- model description --------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        """Graph input names, in order."""
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        """Graph output names, in order."""
        return list(self.graph.outputs)

    @property
    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """Input name -> shape (fixed at load time)."""
        return {n: self.graph.tensors[n].shape for n in self.graph.inputs}

    @property
    def output_shapes(self) -> dict[str, tuple[int, ...]]:
        """Output name -> shape."""
        return {n: self.graph.tensors[n].shape for n in self.graph.outputs}

    def get_inputs(self) -> list[TensorInfo]:
        """The inputs as ONNX Runtime lists them: objects with ``.name``, ``.shape``, ``.type``."""
        return [TensorInfo.of(n, self.graph.tensors[n].shape, self._dtype(n)) for n in self.graph.inputs]

    def get_outputs(self) -> list[TensorInfo]:
        """The outputs as ONNX Runtime lists them: objects with ``.name``, ``.shape``, ``.type``."""
        return [TensorInfo.of(n, self.graph.tensors[n].shape, self._dtype(n)) for n in self.graph.outputs]

    # -- running ------------------------------------------------------------------------------
    @overload
    def run(self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
            ) -> dict[str, np.ndarray]: ...

    @overload
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, np.ndarray],
            run_options: None = None) -> list[np.ndarray]: ...

    def run(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray] | list[np.ndarray]:
        """Run once. Two call styles:

        * ``run(feeds)`` / ``run(feeds, output_names=[...])`` -> ``{name: array}``;
        * ONNX Runtime's ``run(output_names, input_feed)`` with ``output_names`` None or ``[]``
          (every output) or a list of names -> ``[array, ...]`` in that order.

        ``feeds`` maps every input name to an array of its exact shape and dtype. The arrays
        returned belong to the caller. Safe to call from several threads at once."""
        if len(args) == 1 and not kwargs and type(args[0]) is dict:  # run(feeds): no parsing to do
            feeds, wanted, as_list = args[0], self._all_outputs, False
        else:
            feeds, wanted, as_list = self._parse_run_call(args, kwargs)
            wanted = self._check_output_names(wanted)
        checked = self._feeds_as_given(feeds)
        if checked is None:
            checked = self._check_feeds(feeds)
        self._enter()
        try:
            results = self._impl.run(checked)
        finally:
            self._leave()
        if self._interface_dtypes:
            for name in wanted:
                if name in self._interface_dtypes:
                    results[name] = results[name].astype(self._interface_dtypes[name])
        if as_list:
            return [results[name] for name in wanted]
        return {name: results[name] for name in wanted}  # in the order asked (backends may differ)

    def profile(self, feeds: Mapping[str, np.ndarray]) -> "ProfileReport":
        """Run once with per-op timing, placement and memory; the outputs are in ``report.outputs``.
        For repeated runs, statistics, sensors and reports see :func:`edgesdk.profile.profile_session`.
        Safe to call from several threads at once, alongside :meth:`run`."""
        checked = self._check_feeds(feeds)
        self._enter()
        try:
            return self._impl.profile(checked)
        finally:
            self._leave()

    def io_binding(self) -> IOBinding:
        """Input and output memory of the caller's own, filled and read in place: on the opencl
        backend the device buffers themselves (mapped, zero-copy mode), host arrays elsewhere.

        >>> binding = sess.io_binding()
        >>> binding.input("x")[...] = frame
        >>> binding.run()
        >>> y = binding.output("y")      # read-only; valid until the next binding.run()

        See :class:`edgesdk.backends.base.IOBinding` for the mapping rules. Use one binding
        per thread; close it (or use ``with``) to free its buffers early."""
        self._enter()
        try:
            binding = self._impl.io_binding()
            self._bindings.add(binding)
        finally:
            self._leave()
        return binding

    def close(self) -> None:
        """Wait for the runs in flight, close the io bindings and free the session's memory
        (arenas, device buffers). Later calls raise SessionClosedError. Idempotent."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            self._state.wait_for(lambda: self._in_flight == 0)
        for binding in list(self._bindings):
            binding.close()
        self._impl.close()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------
    def _enter(self) -> None:
        """Counts a call in flight (so that close() frees nothing under it); pair with _leave.
        (The Condition's own lock, taken directly: a run of LeNet costs about 20 us, and
        Condition.__enter__ / __exit__ added 0.3 us to it.)"""
        with self._lock:
            if self._closed:
                raise SessionClosedError(f"session of {self.graph.name!r} is closed; create a new Session to run it")
            self._in_flight += 1

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0 and self._closed:
                self._state.notify_all()

    @staticmethod
    def _parse_run_call(args: tuple[Any, ...], kwargs: dict[str, Any]
                        ) -> tuple[Any, Sequence[str] | None, bool]:
        """(feeds, output names or None, whether to return a list) from either call style."""
        unknown = set(kwargs) - {"feeds", "output_names", "input_feed", "run_options"}
        if unknown or len(args) > 3:
            raise InputError(f"Session.run takes (feeds, output_names=None) or ONNX Runtime's (output_names, "
                             f"input_feed); got {len(args)} positional arguments and {sorted(kwargs)}")
        if kwargs.get("run_options") is not None or (len(args) == 3 and args[2] is not None):
            raise InputError("run_options is not supported; pass None or leave it out")
        first = args[0] if args else kwargs.get("feeds")
        if isinstance(first, Mapping) and "input_feed" not in kwargs:  # run(feeds[, output_names])
            if len(args) > 1 and "output_names" in kwargs:
                raise InputError("output_names given twice (positionally and by keyword)")
            names = args[1] if len(args) > 1 else kwargs.get("output_names")
            return first, names, False
        # ONNX Runtime's order: run(output_names, input_feed)
        names = args[0] if args else kwargs.get("output_names")
        feeds = args[1] if len(args) > 1 else kwargs.get("input_feed")
        if feeds is None:
            raise InputError("Session.run needs the feeds: run({name: array}) or run(None, {name: array})")
        return feeds, names, True

    def _check_output_names(self, names: Sequence[str] | None) -> list[str]:
        if names is None or (isinstance(names, (list, tuple)) and not names):  # [] = all, as in ONNX Runtime
            return self.output_names
        if isinstance(names, str) or not isinstance(names, Sequence) or not all(isinstance(n, str) for n in names):
            raise InputError(f"output_names must be None or a list of output names, got {names!r}; "
                             f"outputs are {self.output_names}")
        unknown = [n for n in names if n not in self.graph.outputs]
        if unknown:
            raise InputError(f"unknown output names {unknown}; outputs are {self.output_names}")
        return list(names)

    def _feeds_as_given(self, feeds: Any) -> dict[str, np.ndarray] | None:
        """``feeds`` itself when it is a dict of exactly the inputs, each a numpy array of the
        right shape and dtype that the backend takes as it is (no float16 interface cast); else
        None, and _check_feeds says what is wrong or converts. The common case, checked in a
        third of _check_feeds' time."""
        if type(feeds) is not dict or len(feeds) != len(self._feed_spec):
            return None
        for name, shape, dtype in self._feed_spec:
            value = feeds.get(name)
            if type(value) is not np.ndarray or value.shape != shape or value.dtype != dtype:
                return None
        return feeds if not self._interface_dtypes else None

    def _check_feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise InputError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        missing = [n for n in self.input_names if n not in feeds]
        extra = [n for n in feeds if n not in self.graph.inputs]
        if missing or extra:
            raise InputError(f"expected inputs {self.input_names}, got {list(feeds)}"
                             + (f" (missing {missing})" if missing else "")
                             + (f" (unknown {extra})" if extra else ""))
        checked = {}
        for name in self.input_names:
            value = feeds[name]
            if not isinstance(value, np.ndarray):
                raise InputError(f"input {name!r}: expected a numpy array, got {type(value).__name__}")
            expected, dtype = self.graph.tensors[name], self._dtype(name)
            if value.dtype != dtype:
                raise InputError(f"input {name!r}: expected dtype {dtype}, got {value.dtype} "
                                 f"(use x.astype(np.{dtype}))")
            if value.shape != expected.shape:
                raise InputError(f"input {name!r}: expected shape {expected.shape}, got {value.shape}")
            checked[name] = value if dtype == expected.dtype else value.astype(expected.dtype)
        return checked

    def _dtype(self, name: str) -> np.dtype:
        """The dtype of graph input or output ``name`` at the interface (float16 models: float16)."""
        return self._interface_dtypes.get(name, self.graph.tensors[name].dtype)

    def __repr__(self) -> str:
        closed = ", closed" if self._closed else ""
        return (f"Session({self.graph.name!r}, backend={self.backend!r}, precision={self.precision!r}, "
                f"inputs={self.input_shapes}, outputs={self.output_shapes}{closed})")


def _interface_dtypes(graph: Graph) -> dict[str, np.dtype]:
    """Graph inputs and outputs held as float32 inside but float16 at the interface (from the
    importer, or a package's metadata, which is checked: a package may lie)."""
    from ..errors import ModelLoadError
    declared = graph.metadata.get("interface_dtypes") or {}
    io = set(graph.inputs) | set(graph.outputs)
    if not isinstance(declared, dict) or any(
            name not in io or dtype != "float16" or graph.tensors[name].dtype != np.float32
            for name, dtype in declared.items()):
        raise ModelLoadError(f"graph metadata interface_dtypes {declared!r} does not describe float16 "
                                f"inputs/outputs of this graph; re-export or re-pack the model")
    return {name: np.dtype(dtype) for name, dtype in declared.items() if name in io}
