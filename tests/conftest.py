"""Shared fixtures. ``tests/`` is on sys.path (rootdir conftest), so ``zoo`` and helpers import."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

# Two xdist workers share two cores: keep each worker's BLAS single-threaded.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# PoCL (the suite's OpenCL device) compiles each kernel twice by default: a generic work-group
# function and one specialised for the launch's local size and grid. The specialised builds are
# most of a cold kernel cache's cost (two zoo parity tests: 21.5 s cold with them, 4.3 s without,
# 3.8 s warm either way) and only make PoCL's CPU kernels faster, which no test measures. Only
# PoCL reads this; the benchmarks and users keep PoCL's default.
os.environ.setdefault("POCL_WORK_GROUP_SPECIALIZATION", "0")


# The digits split and the optimized default model, for the compression, fine-tuning and budget
# tests (one of each per test module, as the modules may change what they are given).
@pytest.fixture(scope="module")
def digits():
    """(train, test) of sklearn's digits (edgesdk.datasets.digits_split)."""
    from edgesdk.datasets import digits_split
    return digits_split()


@pytest.fixture(scope="module")
def default_graph():
    """The embedded default model, loaded and optimized."""
    from edgesdk.loader import load_model
    from edgesdk.models import default_model_path
    from edgesdk.passes import optimize
    graph = load_model(default_model_path())
    optimize(graph)
    return graph


# Every op test of tests/ops runs on each of these (backend, precision) pairs.
OP_TEST_TARGETS = (("reference", "fp32"), ("cpu", "fp32"), ("opencl", "fp32"), ("cpu", "fp16"), ("opencl", "fp16"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def ort_run(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX Runtime, the numerical oracle, on one thread with default optimisations."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 (onnxruntime raises its own Fail type)
        # an older onnxruntime refuses opsets newer than its release (1.30 on opset 28): the
        # oracle is missing, which is not the backend's failure
        if "is under development" in str(exc) and "Opset" in str(exc):
            pytest.skip(f"onnxruntime {ort.__version__} does not run this model's opset (the oracle needs a newer one)")
        raise
    return session.run(None, feeds)


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-4, what: str = "") -> None:
    """rtol relative to each element, with an absolute floor scaled by the output's magnitude
    (float32 sums of many terms cancel, so near-zero elements need an absolute bound)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = float(np.max(np.abs(expected))) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-6), err_msg=what)


@pytest.fixture(params=OP_TEST_TARGETS, ids=lambda p: "/".join(p))
def target(request):
    """One backend and precision for the op tests of ``tests/ops`` (see ``ops/op_tester.py``)."""
    from ops.op_tester import Target
    return Target(*request.param)
