"""The opencl backend's lowerings, one module per op family (the families of ``edgesdk.ops``);
each registers its ops in ``kernels.KERNELS``."""
from __future__ import annotations

from . import conv, conv_transpose, elementwise, linear, lq, normalization, pool, quantize, reduce, resize, tensor  # noqa: F401 (register)
