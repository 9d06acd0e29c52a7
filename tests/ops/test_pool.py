"""The pool family (``edgesdk/ops/pool.py``) on every backend: max, average and global pools,
2-D and 1-D (rank-3 inputs, imported as 2-D between reshapes)."""
from __future__ import annotations

import numpy as np
import pytest

from onnx_builders import single_node_model

R = np.random.default_rng(11)

POOL_CASES = {
    "max_3x3_s2_p1": ("MaxPool", (1, 5, 11, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max_ceil": ("MaxPool", (1, 3, 10, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max_dilated": ("MaxPool", (1, 2, 12, 12), dict(kernel_shape=[2, 2], dilations=[2, 2])),
    "avg_exclude_pad": ("AveragePool", (1, 4, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "avg_include_pad": ("AveragePool", (1, 4, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                                          count_include_pad=1)),
    "global_avg": ("GlobalAveragePool", (2, 6, 7, 5), {}),
    "global_max": ("GlobalMaxPool", (1, 6, 7, 5), {}),
    "max_1d": ("MaxPool", (1, 4, 17), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "avg_1d": ("AveragePool", (2, 3, 16), dict(kernel_shape=[4], strides=[4])),
}


@pytest.mark.parametrize("case", POOL_CASES)
def test_pool(target, case: str) -> None:
    op, shape, attrs = POOL_CASES[case]
    x = R.standard_normal(shape).astype(np.float32)
    target.check(single_node_model(op, shape, **attrs), {"x": x})
