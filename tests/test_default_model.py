"""The embedded default model: held-out accuracy through the Session API, fp32 and fp16."""
from __future__ import annotations

import pytest

import edgesdk
from edgesdk.datasets import digits_split, load_dataset
from edgesdk.errors import DatasetError
from edgesdk.evaluation import evaluate
from edgesdk.models import default_model_info, default_model_path


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_accuracy_on_held_out_digits(precision):
    sess = edgesdk.Session(default_model_path(), precision=precision)
    result = evaluate(sess, digits_split()[1])
    assert result.samples == 360
    assert result.accuracy >= 0.97
    if precision == "fp32":  # same numbers as ONNX Runtime at training time
        assert result.accuracy == pytest.approx(default_model_info()["test_accuracy"], abs=1e-6)


def test_batched_session_pads_the_last_batch():
    sess = edgesdk.Session(default_model_path(), input_shapes={"input": (64, 1, 8, 8)})
    result = evaluate(sess, digits_split()[1])
    assert result.batch == 64 and result.latency.runs == 6 and result.accuracy >= 0.97


def test_dataset_errors(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(str(tmp_path / "none.npz"))
    bad = tmp_path / "bad.npz"
    import numpy as np
    np.savez(bad, images=np.zeros(3))
    with pytest.raises(DatasetError, match="'x' and 'y'"):
        load_dataset(str(bad))
