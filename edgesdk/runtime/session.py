"""Session: load a model, optimise it, plan it and run it on one backend."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..backends import get_backend
from ..errors import BackendUnavailableError, InputError
from ..graph import Graph
from ..loader import load_model
from ..onnx_import import InputShapes
from ..passes import optimize as optimize_graph
from ..profile.records import ProfileReport
from .plan import make_plan


class Session:
    """Run a model on a backend.

    >>> sess = Session("model.onnx", backend="reference")
    >>> out = sess.run({sess.input_names[0]: x})[sess.output_names[0]]
    """

    def __init__(self, model: Any, backend: str = "reference", precision: str = "fp32",
                 threads: int | None = None, *, input_shapes: InputShapes | None = None,
                 optimize: bool = True) -> None:
        backend_cls = get_backend(backend)
        if precision not in backend_cls.precisions:
            raise BackendUnavailableError(
                f"precision {precision!r} is not supported by backend {backend!r}; choose one of "
                f"{', '.join(backend_cls.precisions)}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InputError(f"threads must be a positive integer or None, got {threads!r}")
        graph = load_model(model, input_shapes)
        self.optimization_stats = optimize_graph(graph) if optimize else {}
        self.graph: Graph = graph
        self.plan = make_plan(graph)
        self.backend = backend_cls.name
        self.precision = precision
        self.threads = threads
        self._impl = backend_cls(self.plan, precision=precision, threads=threads)

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    @property
    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: self.graph.tensors[n].shape for n in self.graph.inputs}

    @property
    def output_shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: self.graph.tensors[n].shape for n in self.graph.outputs}

    def run(self, feeds: Mapping[str, np.ndarray], output_names: list[str] | None = None
            ) -> dict[str, np.ndarray]:
        """Run once. ``feeds`` maps every input name to a float32 array of its exact shape."""
        checked = self._check_feeds(feeds)
        wanted = self.output_names if output_names is None else list(output_names)
        unknown = [n for n in wanted if n not in self.graph.outputs]
        if unknown:
            raise InputError(f"unknown output names {unknown}; outputs are {self.output_names}")
        results = self._impl.run(checked)
        return {name: results[name] for name in wanted}

    def profile(self, feeds: Mapping[str, np.ndarray]) -> ProfileReport:
        """Run once with per-op timing, placement and memory; the outputs are in ``report.outputs``.
        For repeated runs, statistics, sensors and reports see :func:`edgesdk.profile.profile_session`."""
        return self._impl.profile(self._check_feeds(feeds))

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
            expected = self.graph.tensors[name]
            if value.dtype != expected.dtype:
                raise InputError(f"input {name!r}: expected dtype {expected.dtype}, got {value.dtype} "
                                 f"(use x.astype(np.{expected.dtype}))")
            if value.shape != expected.shape:
                raise InputError(f"input {name!r}: expected shape {expected.shape}, got {value.shape}")
            checked[name] = value
        return checked

    def __repr__(self) -> str:
        return (f"Session({self.graph.name!r}, backend={self.backend!r}, precision={self.precision!r}, "
                f"inputs={self.input_shapes}, outputs={self.output_shapes})")
