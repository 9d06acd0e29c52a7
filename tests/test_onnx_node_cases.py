"""The ONNX backend node tests for every supported op.

Each case must either match onnx's reference outputs, or be refused with a typed edgesdk error
for one of the documented reasons below — never a crash and never a wrong answer.
"""
from __future__ import annotations

import numpy as np
import pytest

import edgesdk
from onnx_node_cases import case_names, load_case

# Features edgesdk refuses on purpose, by the words of the error message.
DOCUMENTED_REFUSALS = (
    "edgesdk runs float32",            # integer, bool, float16/64 graph inputs
    "only 1-D and 2-D",                # 3-D pooling/conv
    "training mode",                   # BatchNormalization training_mode=1
    "training_mode=True",              # Dropout in training mode (random)
    "Indices output",                  # MaxPool's argmax output
    "Mean and InvStdDev outputs",      # LayerNormalization's statistics (every case returns them)
    "is not a tensor",                 # sequence / optional inputs
    "could not be upgraded",           # opset-1 models with no graph inputs left
    "cannot reshape (1, 3, 4) to (3, 4, 0)",  # zero-sized tensors (a dynamic 0 dim becomes 1)
    "dynamic dimensions (2, 0, 4)",    # zero-sized inputs (reductions over an empty set): a 0 dim reads as dynamic
    "split [0, 0, 0] does not cut 1",  # the same: a Split of a (0,) input into empty parts
    "does not run zero-sized tensors",  # a Slice that selects nothing
    "mode 'cubic' is not supported",   # Resize: nearest and linear only
    "'tf_crop_and_resize' is not supported",  # Resize: no region-of-interest crop
    "antialias=1 is not supported",    # Resize: no antialiasing filter
    "blocked quantization",            # QuantizeLinear/DequantizeLinear block_size (opset 21)
    "edgesdk runs uint8 and int8",     # 16-bit QuantizeLinear outputs
)
MIN_PASSING = 441  # measured with onnx 1.23.2 (of 565 cases); a drop means a regression

_NAMES = case_names()


def test_enough_cases_pass() -> None:
    passed = sum(_outcome(name) == "pass" for name in _NAMES)
    assert passed >= MIN_PASSING, f"only {passed} node cases pass"


@pytest.mark.parametrize("name", _NAMES)
def test_node_case(name: str) -> None:
    outcome = _outcome(name)
    assert outcome == "pass" or outcome.startswith("refused"), outcome


def _outcome(name: str, _cache: dict[str, str] = {}) -> str:  # noqa: B006 (memo across both tests)
    if name in _cache:
        return _cache[name]
    case = load_case(name)
    try:
        sess = edgesdk.Session(case.model, backend="reference")
    except edgesdk.EdgeSDKError as exc:
        reason = next((r for r in DOCUMENTED_REFUSALS if r in str(exc)), None)
        result = f"refused: {reason}" if reason else f"undocumented refusal: {exc}"
    else:
        outputs = sess.run(case.feeds)
        result = "pass"
        for out_name, expected in zip(sess.output_names, case.expected):
            actual = outputs[out_name]
            # onnx's own runner tolerances; its expected values are sometimes rounded to 4 digits
            if actual.shape != expected.shape or not np.allclose(actual, expected, rtol=1e-3, atol=1e-7):
                result = f"mismatch on {out_name}: max abs diff {np.max(np.abs(actual - expected)) if actual.shape == expected.shape else actual.shape}"
    _cache[name] = result
    return result
