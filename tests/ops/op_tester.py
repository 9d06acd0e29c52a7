"""One op test, every backend (after ONNX Runtime's OpTester).

A test builds an ONNX model and its feeds once and hands them to ``target.check``; the ``target``
fixture (``tests/ops/conftest.py``) runs it on every backend and precision:

* fp32 (reference, cpu, opencl) against ONNX Runtime, rtol 1e-4 relative to the output's scale;
* fp16 (cpu, opencl) against the reference backend's fp16 mode (the numpy float16 model:
  tensors rounded to half after every op), rtol 1e-2.

``check`` also asserts that every node carrying work ran natively on cpu and opencl (no silent
reference fallback) unless the test says which ops may fall back and why. A combination a test
cannot run is excluded explicitly with ``skip={"opencl/fp16": "why"}``, never silently.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pytest

import edgesdk
from conftest import assert_close, ort_run

RTOL = {"fp32": 1e-4, "fp16": 1e-2}
_ORACLE: dict[str, list[np.ndarray]] = {}


def backend_unavailable(backend: str) -> str | None:
    from edgesdk.backends import get_backend
    from edgesdk.errors import BackendUnavailableError
    try:
        get_backend(backend)
    except BackendUnavailableError as exc:
        return str(exc)
    return None


def _model_key(model, feeds: Mapping[str, np.ndarray], precision: str) -> str:
    digest = hashlib.sha256(model.SerializeToString())
    for name in sorted(feeds):
        digest.update(name.encode() + np.ascontiguousarray(feeds[name]).tobytes())
    return digest.hexdigest() + precision


def expected_outputs(model, feeds: Mapping[str, np.ndarray], precision: str) -> list[np.ndarray]:
    """ONNX Runtime's outputs (fp32) or the reference backend's fp16 model, memoised per model."""
    key = _model_key(model, feeds, precision)
    if key not in _ORACLE:
        if precision == "fp32":
            _ORACLE[key] = [np.asarray(a) for a in ort_run(model, dict(feeds))]
        else:
            ref = edgesdk.Session(model, backend="reference", precision=precision)
            _ORACLE[key] = ref.run(None, dict(feeds))
    return _ORACLE[key]


def provide_oracle(model, feeds: Mapping[str, np.ndarray], outputs: list[np.ndarray], precision: str = "fp32") -> None:
    """The outputs ``check`` compares ``model`` with, where ONNX Runtime cannot run it (an LRN of
    even size): an independent numpy computation of the ONNX definition, given by the test."""
    _ORACLE[_model_key(model, feeds, precision)] = [np.asarray(a) for a in outputs]


@dataclass(frozen=True)
class Target:
    backend: str
    precision: str

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.precision}"

    def session(self, model, **kwargs) -> edgesdk.Session:
        return edgesdk.Session(model, backend=self.backend, precision=self.precision, **kwargs)

    def check(self, model, feeds: Mapping[str, np.ndarray], *, rtol: float | None = None,
              may_fall_back: Mapping[str, str] | None = None, skip: Mapping[str, str] | None = None,
              exact: bool = False) -> edgesdk.Session:
        """Run ``model`` on this target and compare every output with the oracle.

        ``may_fall_back``: op type -> why it may run on the reference kernel here (keys may be
        ``"Op"`` for every target or ``"cpu/fp16:Op"`` for one). ``skip``: target name ->
        why this combination is not run. ``exact``: outputs must be bit-identical (indices,
        copies). Returns the session for further checks."""
        if skip and self.name in skip:
            pytest.skip(f"{self.name}: {skip[self.name]}")
        reason = backend_unavailable(self.backend)
        if reason is not None:
            pytest.skip(reason)
        sess = self.session(model)
        if self.backend != "reference":
            allowed = {k.split(":")[-1] for k in (may_fall_back or {})
                       if ":" not in k or k.split(":")[0] == self.name}
            fallen = {node: why for node, why in sess._impl.fallback_reasons.items()
                      if _op_of(sess, node) not in allowed}
            assert not fallen, f"{self.name}: nodes ran on the reference kernel: {fallen}"
        expected = expected_outputs(model, feeds, self.precision)
        got = sess.run(None, dict(feeds))
        tol = rtol if rtol is not None else RTOL[self.precision]
        for name, g, e in zip(sess.output_names, got, expected):
            assert g.dtype == e.dtype, f"{self.name} {name}: dtype {g.dtype} != {e.dtype}"
            if exact or e.dtype.kind in "iub":
                np.testing.assert_array_equal(g, e, err_msg=f"{self.name} {name}")
            else:
                assert_close(g, e, tol, what=f"{self.name} {name}")
        return sess


def torch_export(module, sample, opset: int = 17, **names):
    """``module`` in eval mode exported by torch's legacy (TorchScript) exporter, as most users'
    models are; ``names`` go to torch.onnx.export (input_names=..., output_names=...)."""
    import io
    import warnings

    import onnx
    import torch
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notices
        torch.onnx.export(module.eval(), (sample,), buffer, dynamo=False, opset_version=opset, **names)
    return onnx.load_from_string(buffer.getvalue())


def _op_of(sess: edgesdk.Session, node_name: str) -> str:
    for node in sess.graph.nodes:
        if node.name == node_name:
            return node.op
    return ""
