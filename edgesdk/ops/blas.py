"""Matrix products for the reference kernels whose bits do not depend on how BLAS is threaded.

The reference backend is the oracle, and a run of it must return the same bits whatever else is
in flight. OpenBLAS's multi-threaded sgemm sums in another order than its single-threaded path
(9.5e-6 apart on a 16x72x1024 convolution, OpenBLAS 0.3.31 on a Zen 4), and a thread count set
through threadpoolctl holds only for calls from the thread that set it: runs from worker threads
took the environment's count (OPENBLAS_NUM_THREADS) while runs from the main thread took the
session's, and their outputs differed by an ulp. Float32 and float16 products are therefore
accumulated in float64, where a different summation order moves the sum by ~1e-16 relative and
rounding back to the operands' type removes it (a flip needs the exact sum within that distance
of a float32 rounding midpoint: ~K * 2^-29 per element for K terms)."""
from __future__ import annotations

import numpy as np


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` in ``np.result_type(a, b)``, accumulated in float64 for float32/16."""
    dtype = np.result_type(a, b)
    if dtype.kind != "f" or dtype.itemsize >= 8:
        return np.matmul(a, b)
    return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)).astype(dtype)
