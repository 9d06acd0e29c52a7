"""The OpenCL kernels that no lowering calls yet, on their own, against float64 numpy references.

Covered: the fused-activation ids 8-20 (common.cl), resize_nearest / resize_linear (resize.cl),
layer_norm / instance_norm / softmax_axis / softmax_axis_wg (normalization.cl), reduce_axis /
reduce_axis_wg / argreduce_axis (reduce.cl), conv_transpose2d (conv_transpose.cl), strided_copy /
gather_axis (tensor.cl), the POW and PRELU codes of elementwise.cl's binary kernels, and
matmul_blocked / matmul_tiled (linear.cl).

Each kernel is built the way the backend builds it (``ProgramCache``: common.cl in front, ``-D``
constants, the device profile's VEC and half-vector mode) and run on the default OpenCL device
(PoCL here) at small odd shapes, in float and half storage, with NaN and infinities. Global sizes
are rounded up past the work (as the host does), and every output buffer carries a guard tail
that must come back untouched. Expected values are rounded to the output's storage type (float32
or float16) before the comparison, which then wants the same NaN positions and the same signed
infinities, and the finite values within rtol (1e-4 float, 1e-2 half).

``test_new_kernels_are_clean_under_oclgrind`` runs one small case of every kernel under Oclgrind
(``python tests/test_cl_kernels_ops.py --oclgrind-suite`` inside ``oclgrind``), which reports any
out-of-bounds access or data race.
"""
from __future__ import annotations

import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
GUARD = 16  # elements past every output that must stay untouched
SENTINEL_BYTE = 0xA5

# Fused-activation ids appended to common.cl (ids 0-7 are covered by tests/ops/test_conv.py and tests/test_opencl_backend.py).
with np.errstate(all="ignore"):
    _erf = np.vectorize(math.erf, otypes=[np.float64])
ACTIVATIONS = {
    8: ("GELU", lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    9: ("GELU_TANH", lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    10: ("ERF", lambda x: _erf(x)),
    11: ("EXP", np.exp),
    12: ("LOG", np.log),
    13: ("ABS", np.abs),
    14: ("SQRT", np.sqrt),
    15: ("RECIPROCAL", lambda x: 1.0 / x),
    16: ("NEG", np.negative),
    17: ("SQUARE", lambda x: x * x),
    18: ("SILU", lambda x: x / (1 + np.exp(-x))),
    19: ("MISH", lambda x: x * np.tanh(np.logaddexp(0, x))),
    20: ("SOFTPLUS", lambda x: np.logaddexp(0, x)),
}
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0, 30.0, -30.0, 1e-3, -1e-3, 9.5],
                    np.float32)


# -- harness ---------------------------------------------------------------------------------------

@dataclass
class Out:
    """An output argument: ``size`` elements of ``dtype`` (plus the guard tail)."""
    size: int
    dtype: type = np.float32


class Kernels:
    """Builds programs through the backend's ProgramCache and runs one kernel synchronously."""

    def __init__(self) -> None:
        import pyopencl as cl
        from edgesdk.backends.opencl.config import load_device_config
        from edgesdk.backends.opencl.device import open_device
        from edgesdk.backends.opencl.programs import ProgramCache
        self.cl = cl
        self.device = open_device()
        self.config = load_device_config(self.device.info)
        self.sources = ProgramCache(self.device)  # only its source(): common.cl + the file
        self.programs: dict[tuple[str, str], object] = {}
        self.vec = self.config.vector_width
        self.base = {"VEC": self.vec, "HALF_PRODUCTS": 0,
                     "HALF_VECTOR_SCALAR": int(self.config.half_vectors == "scalar")}

    def program(self, file: str, defines: dict):
        """ProgramCache.get's build (same source, same options), minus its on-disk binary cache
        (fetching binaries costs a third of a PoCL build, and every define set here is new)."""
        from edgesdk.backends.opencl.programs import BASE_OPTIONS, format_define
        options = " ".join(BASE_OPTIONS + tuple(format_define(k, v) for k, v in sorted(defines.items())))
        key = (file, options)
        if key not in self.programs:
            self.programs[key] = self.cl.Program(self.device.context, self.sources.source(file)).build(
                options, devices=[self.device.cl_device])
        return self.programs[key]

    def run(self, file: str, kernel: str, defines: dict, args: list, global_size: tuple[int, ...],
            local_size: tuple[int, ...] | None = None) -> list[np.ndarray]:
        cl = self.cl
        program = self.program(file, {**self.base, **defines})
        knl = cl.Kernel(program, kernel)
        ctx, queue = self.device.context, self.device.queue
        buffers, outputs = [], []
        for arg in args:
            if isinstance(arg, Out):
                host = np.empty(arg.size + GUARD, arg.dtype)
                host.view(np.uint8)[:] = SENTINEL_BYTE
                buffer = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
                outputs.append((buffer, host))
            else:
                arr = np.ascontiguousarray(arg)
                if arr.size == 0:
                    arr = np.zeros(1, np.float32)
                buffer = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=arr)
            buffers.append(buffer)
        knl.set_args(*buffers)
        if local_size is None:  # round the NDRange up, as the host does, so the guards get work
            local_size = tuple([16, 4, 1][:len(global_size)])
        global_size = tuple(-(-g // l) * l for g, l in zip(global_size, local_size))
        cl.enqueue_nd_range_kernel(queue, knl, global_size, local_size)
        results = []
        for buffer, host in outputs:
            cl.enqueue_copy(queue, host, buffer)
            results.append(host)
        queue.finish()
        trimmed = []
        for host, (_, _) in zip(results, outputs):
            tail = host[-GUARD:].view(np.uint8)
            assert np.all(tail == SENTINEL_BYTE), f"{kernel} wrote past its output"
            trimmed.append(host[:-GUARD])
        return trimmed


def storage(half: bool):
    return np.float16 if half else np.float32


def assert_matches(got: np.ndarray, want: np.ndarray, rtol: float, atol: float | None = None,
                   what: str = "") -> None:
    """``want`` (float64) rounded to ``got``'s storage type; same NaNs, same signed infinities,
    finite values within rtol * |want| + atol (atol: rtol * the largest finite |want|)."""
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    with np.errstate(all="ignore"):
        want = want.astype(got.dtype if got.dtype in (np.float16, np.float32) else np.float32).astype(np.float64)
    got = got.astype(np.float64)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{what}: NaN positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(np.isinf(got), inf, err_msg=f"{what}: inf positions")
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{what}: inf signs")
    finite = ~nan & ~inf
    if atol is None:
        atol = rtol * max(float(np.max(np.abs(want[finite]), initial=0.0)), 1e-6)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol, err_msg=what)


def tol(half: bool) -> float:
    return 1e-2 if half else 1e-4


def randn(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- cases (each takes the runner; shared by the pytest tests and the Oclgrind suite) -------------

def case_activation(k: Kernels, act: int, half: bool) -> None:
    rng = np.random.default_rng(act)
    x = randn(rng, 119, scale=3.0)
    x[:SPECIALS.size] = SPECIALS  # in the vector part
    x[-SPECIALS.size // 2:] = SPECIALS[:SPECIALS.size // 2]  # and in the scalar tail (119 % VEC)
    xs = x.astype(storage(half))
    defines = {"UNARY": 1, "TOTAL": x.size, "ACT": act, "X_HALF": int(half), "Y_HALF": int(half)}
    (y,) = k.run("elementwise.cl", "unary", defines, [xs, Out(x.size, storage(half))], (cdiv(x.size, k.vec),))
    with np.errstate(all="ignore"):
        want = ACTIVATIONS[act][1](xs.astype(np.float64))
    # float: 1e-5 relative, absolute 1e-6 (erf-based GELU of a large negative x is a difference
    # of nearly equal numbers); half: the storage rounding.
    assert_matches(y, want, 1e-2 if half else 1e-5, 1e-3 if half else 1e-6, what=ACTIVATIONS[act][0])


def case_activation_in_conv_gemm(k: Kernels, act: int) -> None:
    """A vector-wide epilogue (conv_gemm) with a new activation, bias and a partial last vector."""
    rng = np.random.default_rng(100 + act)
    n, c, h, w, oc = 1, 3, 3, 7, 5
    x, wt, b = randn(rng, n, c, h, w, scale=2.0), randn(rng, oc, c), randn(rng, oc)
    defines = {"CONV_GEMM": 1, "N": n, "C": c, "H": h, "W": w, "OC": oc, "ROWS": 2, "NVEC": 1,
               "HAS_BIAS": 1, "ACT": act}
    (y,) = k.run("conv.cl", "conv_gemm", defines, [x, wt, b, Out(n * oc * h * w)],
                 (cdiv(h * w, k.vec), cdiv(oc, 2), n))
    pre = np.einsum("nchw,oc->nohw", x.astype(np.float64), wt.astype(np.float64)) + b[None, :, None, None]
    assert_matches(y.reshape(n, oc, h, w), ACTIVATIONS[act][1](pre), 1e-4, what=ACTIVATIONS[act][0])


def resize_tables_linear_half_pixel(size: int, out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX Resize linear, coordinate_transformation_mode half_pixel, as ONNX Runtime computes it
    (clamped source coordinate, the two neighbours, the weight of the second)."""
    scale = out / size
    src = np.clip((np.arange(out) + 0.5) / scale - 0.5, 0, size - 1)
    i0 = np.minimum(np.floor(src).astype(np.int32), size - 1)
    i1 = np.minimum(i0 + 1, size - 1).astype(np.int32)
    return i0, i1, (src - i0).astype(np.float32)


def resize_table_nearest_asymmetric(size: int, out: int) -> np.ndarray:
    """ONNX Resize nearest, asymmetric, nearest_mode floor."""
    return np.minimum(np.floor(np.arange(out) * (size / out)), size - 1).astype(np.int32)


def resize_reference(x, iy0, iy1, wy, ix0, ix1, wx):
    x = x.astype(np.float64)
    wx, wy = wx.astype(np.float64), wy.astype(np.float64)
    with np.errstate(all="ignore"):
        top = x[:, iy0][:, :, ix0] * (1 - wx) + x[:, iy0][:, :, ix1] * wx
        bottom = x[:, iy1][:, :, ix0] * (1 - wx) + x[:, iy1][:, :, ix1] * wx
        return top * (1 - wy)[:, None] + bottom * wy[:, None]


def case_resize(k: Kernels, nc: int, h: int, w: int, oh: int, ow: int, half: bool, specials: bool = True) -> None:
    rng = np.random.default_rng(nc * 100 + oh)
    x = randn(rng, nc, h, w)
    if specials:
        x.reshape(-1)[1::11] = np.resize(SPECIALS[:3], x.reshape(-1)[1::11].size)
    xs = x.astype(storage(half))
    iy0, iy1 = rng.integers(0, h, oh).astype(np.int32), rng.integers(0, h, oh).astype(np.int32)
    ix0, ix1 = rng.integers(0, w, ow).astype(np.int32), rng.integers(0, w, ow).astype(np.int32)
    wy, wx = rng.random(oh).astype(np.float32), rng.random(ow).astype(np.float32)
    wy[0], wx[0] = 0.0, 0.0  # a zero weight still multiplies its tap (NaN * 0 = NaN, as ORT)
    base = {"NC": nc, "H": h, "W": w, "OH": oh, "OW": ow, "X_HALF": int(half), "Y_HALF": int(half)}
    total = nc * oh * ow
    (y,) = k.run("resize.cl", "resize_nearest", {"RESIZE_NEAREST": 1, **base},
                 [xs, iy0, ix0, Out(total, storage(half))], (total,))
    want = xs.astype(np.float64)[:, iy0][:, :, ix0]
    assert_matches(y.reshape(nc, oh, ow), want, tol(half), what="resize_nearest")
    (y,) = k.run("resize.cl", "resize_linear", {"RESIZE_LINEAR": 1, **base},
                 [xs, iy0, iy1, wy, ix0, ix1, wx, Out(total, storage(half))], (total,))
    assert_matches(y.reshape(nc, oh, ow), resize_reference(xs, iy0, iy1, wy, ix0, ix1, wx), tol(half),
                   what="resize_linear")


def case_layer_norm(k: Kernels, rows: int, cols: int, local: int, has_bias: bool, half: bool,
                    act: int = 0) -> None:
    rng = np.random.default_rng(rows * cols + local)
    x = randn(rng, rows, cols, scale=3.0) + 1.5
    if rows >= 3:
        x[1, cols // 2] = np.nan
        x[2, 0] = np.inf
    scale, bias = randn(rng, cols), randn(rng, cols)
    xs, ss, bs = (a.astype(storage(half)) for a in (x, scale, bias))
    eps = 1e-5
    defines = {"LAYER_NORM": 1, "ROWS": rows, "COLS": cols, "LOCAL": local, "EPS": eps,
               "HAS_BIAS": int(has_bias), "ACT": act,
               "X_HALF": int(half), "W_HALF": int(half), "B_HALF": int(half), "Y_HALF": int(half)}
    (y,) = k.run("normalization.cl", "layer_norm", defines, [xs, ss, bs, Out(rows * cols, storage(half))],
                 (rows * local,), (local,))
    x64 = xs.astype(np.float64)
    with np.errstate(all="ignore"):
        mean = x64.mean(axis=1, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
        want = (x64 - mean) / np.sqrt(var + np.float32(eps)) * ss.astype(np.float64)
    if has_bias:
        want = want + bs.astype(np.float64)
    if act:
        with np.errstate(all="ignore"):
            want = ACTIVATIONS[act][1](want)
    assert_matches(y.reshape(rows, cols), want, tol(half), what="layer_norm")


def case_instance_norm(k: Kernels, n: int, ch: int, spatial: int, cpg: int, local: int, half: bool) -> None:
    rng = np.random.default_rng(n * ch * spatial + cpg)
    x = randn(rng, n, ch, spatial, scale=2.0) - 0.7
    x[0, 0, spatial // 2] = np.nan  # poisons one row (one instance / group)
    scale, bias = randn(rng, ch), randn(rng, ch)
    xs, ss, bs = (a.astype(storage(half)) for a in (x, scale, bias))
    rows, cols = n * ch // cpg, cpg * spatial
    eps = 1e-5
    defines = {"INSTANCE_NORM": 1, "ROWS": rows, "COLS": cols, "SPATIAL": spatial, "CH": ch, "CPG": cpg,
               "LOCAL": local, "EPS": eps, "HAS_BIAS": 1,
               "X_HALF": int(half), "W_HALF": int(half), "B_HALF": int(half), "Y_HALF": int(half)}
    (y,) = k.run("normalization.cl", "instance_norm", defines, [xs, ss, bs, Out(x.size, storage(half))],
                 (rows * local,), (local,))
    g = xs.astype(np.float64).reshape(n, ch // cpg, cols)
    with np.errstate(all="ignore"):
        mean = g.mean(axis=2, keepdims=True)
        var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
        want = ((g - mean) / np.sqrt(var + np.float32(eps))).reshape(n, ch, spatial)
    want = want * ss.astype(np.float64)[None, :, None] + bs.astype(np.float64)[None, :, None]
    assert_matches(y.reshape(n, ch, spatial), want, tol(half), what="instance_norm")


def softmax_input(rng, outer: int, axis: int, inner: int) -> np.ndarray:
    x = randn(rng, outer, axis, inner, scale=3.0)
    cols = [(o, i) for o in range(outer) for i in range(inner)]
    if axis >= 3 and len(cols) >= 4:
        (o0, i0), (o1, i1), (o2, i2), (o3, i3) = cols[:4]
        x[o0, 1, i0] = np.nan  # a NaN: the column is NaN
        x[o1, 0, i1] = np.inf  # +inf: NaN
        x[o2, :, i2] = -np.inf  # all -inf: NaN
        x[o3, ::2, i3] = -np.inf  # some -inf: exact zeros
    return x


def softmax_reference(x: np.ndarray, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        m = np.max(x, axis=1, keepdims=True)
        e = np.exp(x - m)
        s = e.sum(axis=1, keepdims=True)
        return (x - m) - np.log(s) if log else e / s


def case_softmax(k: Kernels, outer: int, axis: int, inner: int, log: bool, half: bool,
                 local: int | None = None) -> None:
    rng = np.random.default_rng(outer * axis * inner + log)
    xs = softmax_input(rng, outer, axis, inner).astype(storage(half))
    defines = {"OUTER": outer, "AXIS": axis, "INNER": inner, "LOG_SOFTMAX": int(log),
               "X_HALF": int(half), "Y_HALF": int(half)}
    if local is None:
        (y,) = k.run("normalization.cl", "softmax_axis", {"SOFTMAX_AXIS": 1, **defines},
                     [xs, Out(xs.size, storage(half))], (outer * inner,))
    else:
        (y,) = k.run("normalization.cl", "softmax_axis_wg", {"SOFTMAX_AXIS_WG": 1, "LOCAL": local, **defines},
                     [xs, Out(xs.size, storage(half))], (outer * inner * local,), (local,))
    assert_matches(y.reshape(xs.shape), softmax_reference(xs, log), tol(half),
                   what=f"{'log' if log else ''}softmax {xs.shape} local {local}")


REDUCE_OPS = {  # REDUCE_OP: (name, float64 reference along axis 1)
    0: ("SUM", lambda x: x.sum(axis=1)),
    1: ("MEAN", lambda x: x.mean(axis=1)),
    2: ("MAX", lambda x: x.max(axis=1)),
    3: ("MIN", lambda x: x.min(axis=1)),
    4: ("L2", lambda x: np.sqrt((x * x).sum(axis=1))),
    5: ("SUM_SQUARE", lambda x: (x * x).sum(axis=1)),
    6: ("L1", lambda x: np.abs(x).sum(axis=1)),
    7: ("LOG_SUM", lambda x: np.log(x.sum(axis=1))),
    8: ("LOG_SUM_EXP", lambda x: _lse(x)),
    9: ("PROD", lambda x: x.prod(axis=1)),
}


def _lse(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1)
    s = np.exp(x - m[:, None]).sum(axis=1)
    return np.where(np.isinf(m), m, m + np.log(s))


def reduce_input(rng, outer: int, axis: int, inner: int) -> np.ndarray:
    x = randn(rng, outer, axis, inner, scale=1.5) + 0.3
    if outer * inner >= 5 and axis >= 3:
        cols = [(o, i) for o in range(outer) for i in range(inner)]
        (o0, i0), (o1, i1), (o2, i2), (o3, i3) = cols[1:5]
        x[o0, 2, i0] = np.nan
        x[o1, 1, i1] = np.inf
        x[o2, :, i2] = -np.inf
        x[o3, 0, i3], x[o3, 2, i3] = np.inf, -np.inf
    return x


def case_reduce(k: Kernels, op: int, outer: int, axis: int, inner: int, half: bool,
                local: int | None = None) -> None:
    rng = np.random.default_rng(op * 7 + outer * axis * inner)
    xs = reduce_input(rng, outer, axis, inner).astype(storage(half))
    defines = {"REDUCE_OP": op, "OUTER": outer, "AXIS": axis, "INNER": inner,
               "X_HALF": int(half), "Y_HALF": int(half)}
    n = outer * inner
    if local is None:
        (y,) = k.run("reduce.cl", "reduce_axis", {"REDUCE_AXIS": 1, **defines}, [xs, Out(n, storage(half))], (n,))
    else:
        (y,) = k.run("reduce.cl", "reduce_axis_wg", {"REDUCE_AXIS_WG": 1, "LOCAL": local, **defines},
                     [xs, Out(n, storage(half))], (n * local,), (local,))
    with np.errstate(all="ignore"):
        want = REDUCE_OPS[op][1](xs.astype(np.float64))
    # Sums of AXIS terms: the absolute floor scales with the terms' magnitudes.
    assert_matches(y.reshape(outer, inner), want, tol(half), what=f"reduce {REDUCE_OPS[op][0]} local {local}")


def argreduce_reference(x: np.ndarray, is_max: bool, last: bool) -> np.ndarray:
    """ONNX Runtime's scan: start at the first value, move on a strictly better one (or an equal
    one with select_last_index); every comparison with NaN is false."""
    outer, axis, inner = x.shape
    out = np.zeros((outer, inner), np.int64)
    for o in range(outer):
        for i in range(inner):
            best, arg = x[o, 0, i], 0
            for a in range(1, axis):
                v = x[o, a, i]
                better = (v >= best if last else v > best) if is_max else (v <= best if last else v < best)
                if better:
                    best, arg = v, a
            out[o, i] = arg
    return out


def case_argreduce(k: Kernels, is_max: bool, last: bool, outer: int, axis: int, inner: int, half: bool = False,
                   long: bool = False) -> None:
    rng = np.random.default_rng(outer * axis + inner + 2 * is_max + last)
    x = rng.integers(-3, 4, (outer, axis, inner)).astype(np.float32)  # many ties
    flat = x.reshape(-1)
    flat[5::13] = np.resize(SPECIALS[:3], flat[5::13].size)
    xs = x.astype(storage(half))
    defines = {"ARGREDUCE_AXIS": 1, "ARG_MAX": int(is_max), "ARG_MIN": int(not is_max), "SELECT_LAST": int(last),
               "OUTER": outer, "AXIS": axis, "INNER": inner, "X_HALF": int(half), "ARG_LONG": int(long)}
    (y,) = k.run("reduce.cl", "argreduce_axis", defines, [xs, Out(outer * inner, np.int64 if long else np.int32)],
                 (outer * inner,))
    np.testing.assert_array_equal(y.reshape(outer, inner), argreduce_reference(xs.astype(np.float32), is_max, last))


def conv_transpose_reference(x, w, b, strides, dilations, pads, out_pad, group):
    """ONNX ConvTranspose by scattering every input value (float64)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr), (oph, opw) = strides, dilations, pads, out_pad
    oh = (h - 1) * sh + (kh - 1) * dh + 1 + oph - pt - pb
    ow = (wd - 1) * sw + (kw - 1) * dw + 1 + opw - pl - pr
    fh = max((h - 1) * sh + (kh - 1) * dh + 1, pt + oh)
    fw = max((wd - 1) * sw + (kw - 1) * dw + 1, pl + ow)
    full = np.zeros((n, ocg * group, fh, fw))
    cg = c // group
    with np.errstate(all="ignore"):
        for g in range(group):
            xg = x[:, g * cg:(g + 1) * cg]
            for ky in range(kh):
                for kx in range(kw):
                    contrib = np.einsum("nchw,co->nohw", xg, w[g * cg:(g + 1) * cg, :, ky, kx])
                    full[:, g * ocg:(g + 1) * ocg, ky * dh:ky * dh + (h - 1) * sh + 1:sh,
                         kx * dw:kx * dw + (wd - 1) * sw + 1:sw] += contrib
    y = full[:, :, pt:pt + oh, pl:pl + ow]
    if b is not None:
        y = y + b.astype(np.float64)[None, :, None, None]
    return y


CONV_T_CASES = {  # name: (x shape, (C_in, OC/G, KH, KW), strides, dilations, pads, output_padding, group, bias, ROWS)
    "stride2_outpad": ((1, 3, 5, 7), (3, 4, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (1, 1), 1, True, 4),
    "grouped_dilated_asym": ((2, 4, 3, 4), (4, 3, 2, 3), (3, 2), (2, 1), (0, 1, 2, 0), (0, 1), 2, False, 2),
    "depthwise_4x4_s2": ((1, 3, 7, 1), (3, 1, 4, 4), (2, 2), (1, 1), (1, 1, 1, 1), (0, 0), 3, True, 4),
    "pointwise": ((1, 5, 3, 3), (5, 7, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (0, 0), 1, True, 4),
}


def conv_transpose_defines(x_shape, w_shape, strides, dilations, pads, out_pad, group, bias, rows):
    n, c, h, w = x_shape
    _, ocg, kh, kw = w_shape
    oh = (h - 1) * strides[0] + (kh - 1) * dilations[0] + 1 + out_pad[0] - pads[0] - pads[2]
    ow = (w - 1) * strides[1] + (kw - 1) * dilations[1] + 1 + out_pad[1] - pads[1] - pads[3]
    return {"N": n, "C": c, "H": h, "W": w, "OC": ocg * group, "OH": oh, "OW": ow, "KH": kh, "KW": kw,
            "SH": strides[0], "SW": strides[1], "DH": dilations[0], "DW": dilations[1], "PT": pads[0],
            "PL": pads[1], "G": group, "CG": c // group, "OCG": ocg, "ROWS": rows, "HAS_BIAS": int(bias)}


def case_conv_transpose(k: Kernels, name: str, half: bool = False, act: int = 0, half_products: int = 0,
                        specials: bool = True) -> np.ndarray:
    x_shape, w_shape, strides, dil, pads, out_pad, group, has_bias, rows = CONV_T_CASES[name]
    rng = np.random.default_rng(len(name))
    x, w, b = randn(rng, *x_shape), randn(rng, *w_shape), randn(rng, w_shape[1] * group)
    if specials:
        x[0, 0, 1, 0] = np.nan
        x[-1, -1, -1, -1] = np.inf
    xs, ws, bs = (a.astype(storage(half)) for a in (x, w, b))
    d = conv_transpose_defines(x_shape, w_shape, strides, dil, pads, out_pad, group, has_bias, rows)
    d.update({"ACT": act, "HALF_PRODUCTS": half_products,
              **{f"{r}_HALF": int(half) for r in "XWBY"}})
    total = d["N"] * d["OC"] * d["OH"] * d["OW"]
    (y,) = k.run("conv_transpose.cl", "conv_transpose2d", d, [xs, ws, bs, Out(total, storage(half))],
                 (d["OW"], d["OH"], d["N"] * group * cdiv(d["OCG"], rows)))
    want = conv_transpose_reference(xs, ws, bs if has_bias else None, strides, dil, pads, out_pad, group)
    if act:
        with np.errstate(all="ignore"):
            want = ACTIVATIONS[act][1](want) if act in ACTIVATIONS else np.maximum(want, 0)
    y = y.reshape(want.shape)
    assert_matches(y, want, 2e-2 if half else 1e-4, what=f"conv_transpose {name}")
    return y


def view_params(base: np.ndarray, view: np.ndarray) -> tuple[int, list[int], list[int]]:
    """(offset, dims, element strides) of a numpy view of the contiguous ``base``, padded to rank 6."""
    item = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    dims, strides = list(view.shape), [s // item for s in view.strides]
    assert len(dims) <= 6
    return offset, [1] * (6 - len(dims)) + dims, [0] * (6 - len(dims)) + strides


def case_strided_copy(k: Kernels, name: str, half: bool = False) -> None:
    rng = np.random.default_rng(len(name))
    if name == "slice_steps":
        x = randn(rng, 4, 7, 9)
        view, want_shape = x[1:4, ::-2, 7:0:-3], None
    elif name == "broadcast":
        x = randn(rng, 3, 1, 5)
        view, want_shape = np.broadcast_to(x, (2, 3, 7, 5)), None
    elif name == "depth_to_space_dcr":  # (N, C, H, W) -> (N, C / b^2, H b, W b), DCR
        x, bs = randn(rng, 1, 8, 3, 7), 2
        n, c, h, w = x.shape
        view, want_shape = x.reshape(n, bs, bs, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2), (n, c // 4, h * bs, w * bs)
    elif name == "depth_to_space_crd":
        x, bs = randn(rng, 2, 4, 3, 1), 2
        n, c, h, w = x.shape
        view, want_shape = x.reshape(n, c // 4, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3), (n, c // 4, h * bs, w * bs)
    elif name == "space_to_depth":
        x, bs = randn(rng, 1, 3, 6, 4), 2
        n, c, h, w = x.shape
        view, want_shape = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4), \
            (n, c * bs * bs, h // bs, w // bs)
    else:
        raise AssertionError(name)
    x.reshape(-1)[::5] = np.resize(SPECIALS[:3], x.reshape(-1)[::5].size)
    xs = x.astype(storage(half))
    offset, dims, strides = view_params(x, view)
    total = int(np.prod(dims))
    defines = {"STRIDED_COPY": 1, "TOTAL": total, "BASE": offset, **{f"D{i}": d for i, d in enumerate(dims)},
               **{f"S{i}": s for i, s in enumerate(strides)}, "X_HALF": int(half), "Y_HALF": int(half)}
    (y,) = k.run("tensor.cl", "strided_copy", defines, [xs, Out(total, storage(half))], (total,))
    want = np.asarray(view, np.float64)
    if half:
        want = np.asarray(view.astype(np.float16), np.float64)
    np.testing.assert_array_equal(y.astype(np.float64), want.reshape(-1))
    if want_shape is not None:  # the copy, read as the op's output shape, is the op's result
        np.testing.assert_array_equal(y.reshape(want_shape).astype(np.float64), want.reshape(want_shape))


def case_gather(k: Kernels, outer: int, axis_in: int, inner: int, idx: list[int], half: bool = False,
                long: bool = False) -> None:
    rng = np.random.default_rng(outer + axis_in + inner)
    x = randn(rng, outer, axis_in, inner)
    x.reshape(-1)[::4] = np.resize(SPECIALS[:3], x.reshape(-1)[::4].size)
    xs = x.astype(storage(half))
    index = np.array(idx, np.int64 if long else np.int32)
    defines = {"GATHER_AXIS": 1, "OUTER": outer, "AXIS_IN": axis_in, "INNER": inner, "NIDX": len(idx),
               "IDX_LONG": int(long), "X_HALF": int(half), "Y_HALF": int(half)}
    total = outer * len(idx) * inner
    (y,) = k.run("tensor.cl", "gather_axis", defines, [xs, index, Out(total, storage(half))], (total,))
    want = np.zeros((outer, len(idx), inner))
    for j, a in enumerate(idx):
        if 0 <= a < axis_in:  # out of range: 0 (the host validates indices)
            want[:, j] = xs[:, a]
    np.testing.assert_array_equal(y.reshape(want.shape).astype(np.float64), want)


def binary_inputs(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = randn(rng, n, scale=2.0), randn(rng, n, scale=2.0)
    a[:12] = [-2, -2, -0.0, np.nan, 1, -1, -np.inf, np.inf, 0.5, -8, 0, 3]
    b[:12] = [3, 0.5, 0.5, 0, np.nan, np.inf, 0.5, -1, np.inf, 1 / 3, -1, 2]
    a[-6:] = [np.nan, -3, 2, -np.inf, 0, -0.0]
    b[-6:] = [0, 2, np.nan, 3, -2, 0.25]
    return a, b


BINARY_REFERENCE = {4: np.power, 5: lambda a, b: np.where(a >= 0, a, a * b)}


def case_binary(k: Kernels, op: int, half: bool) -> None:
    rng = np.random.default_rng(op)
    a, b = binary_inputs(rng, 119)
    a_s, b_s = a.astype(storage(half)), b.astype(storage(half))
    defines = {"BINARY_SAME": 1, "OP": op, "TOTAL": a.size, "A_HALF": int(half), "B_HALF": int(half),
               "Y_HALF": int(half)}
    (y,) = k.run("elementwise.cl", "binary_same", defines, [a_s, b_s, Out(a.size, storage(half))],
                 (cdiv(a.size, k.vec),))
    with np.errstate(all="ignore"):
        want = BINARY_REFERENCE[op](a_s.astype(np.float64), b_s.astype(np.float64))
    assert_matches(y, want, tol(half), 1e-6, what=f"binary_same op {op}")


def case_binary_broadcast(k: Kernels, op: int, a_shape, b_shape, act: int = 0) -> None:
    rng = np.random.default_rng(op + 10)
    a, b = randn(rng, *a_shape, scale=2.0), np.abs(randn(rng, *b_shape)) + 0.5
    a.reshape(-1)[::7] = np.resize(SPECIALS, a.reshape(-1)[::7].size)
    out = np.broadcast_shapes(a_shape, b_shape)
    pad = lambda s: (1,) * (6 - len(s)) + tuple(s)  # noqa: E731

    def strides(shape):
        p = pad(shape)
        st = [int(np.prod(p[i + 1:])) for i in range(6)]
        return [s if d > 1 else 0 for s, d in zip(st, p)]
    total = int(np.prod(out))
    defines = {"BINARY_BROADCAST": 1, "OP": op, "TOTAL": total, "ACT": act,
               **{f"D{i}": d for i, d in enumerate(pad(out))},
               **{f"SA{i}": s for i, s in enumerate(strides(a_shape))},
               **{f"SB{i}": s for i, s in enumerate(strides(b_shape))}}
    (y,) = k.run("elementwise.cl", "binary_broadcast", defines, [a, b, Out(total)], (total,))
    with np.errstate(all="ignore"):
        want = BINARY_REFERENCE[op](a.astype(np.float64), b.astype(np.float64))
        if act:
            want = ACTIVATIONS[act][1](want)
    assert_matches(y.reshape(out), want, 1e-4, 1e-6, what=f"binary_broadcast op {op}")


def matmul_batch_defines(out_batch, a_batch, b_batch, m, kk, nn, transpose_b):
    """The batch constants of linear.cl's batched MatMul for operands with batch shapes a_batch /
    b_batch (each broadcast to out_batch, all padded to 3 dims)."""
    pad = lambda s: (1,) * (3 - len(s)) + tuple(s)  # noqa: E731
    ob, ab, bb = pad(out_batch), pad(a_batch), pad(b_batch)

    def strides(shape, matrix):
        st = [int(np.prod(shape[i + 1:])) * matrix for i in range(3)]
        return [s if d > 1 else 0 for s, d in zip(st, shape)]
    d = {"M": m, "K": kk, "NN": nn, "TRANSPOSE_B": int(transpose_b),
         **{f"OB{i}": v for i, v in enumerate(ob)}}
    d.update({f"SA{i}": s for i, s in enumerate(strides(ab, m * kk))})
    d.update({f"SB{i}": s for i, s in enumerate(strides(bb, kk * nn))})
    return d


def case_matmul(k: Kernels, kernel: str, a_shape, b_shape, transpose_b: bool, params: dict,
                half: bool = False, bias: bool = False, alpha: float = 1.0, act: int = 0) -> None:
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape) + transpose_b)
    a, b = randn(rng, *a_shape), randn(rng, *b_shape)
    a.reshape(-1)[min(a.size - 1, a_shape[-1] * 2)] = np.nan  # one row of one batch goes NaN
    m, kk = a_shape[-2:]
    nn = b_shape[-2] if transpose_b else b_shape[-1]
    out_batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    bias_v = randn(rng, nn)
    a_s, b_s, bias_s = a.astype(storage(half)), b.astype(storage(half)), bias_v.astype(storage(half))
    d = matmul_batch_defines(out_batch, a_shape[:-2], b_shape[:-2], m, kk, nn, transpose_b)
    batches = int(np.prod(out_batch))
    d.update({kernel.upper(): 1, "HAS_BIAS": int(bias), "ALPHA": float(alpha), "ACT": act, **params,
              **{f"{r}_HALF": int(half) for r in "ABWY"}})
    if kernel == "matmul_tiled":
        lx, ly = params["TN"] // params["RN"], params["TM"] // params["RM"]
        gsize, lsize = (cdiv(nn, params["TN"]) * lx, cdiv(m, params["TM"]) * ly, batches), (lx, ly, 1)
    elif transpose_b:
        gsize, lsize = (cdiv(nn, params["RN"]), cdiv(m, params["RM"]), batches), None
    else:
        gsize, lsize = (cdiv(nn, params["NV"] * k.vec), cdiv(m, params["RM"]), batches), None
    (y,) = k.run("linear.cl", kernel, d, [a_s, b_s, bias_s, Out(batches * m * nn, storage(half))], gsize, lsize)
    b64 = b_s.astype(np.float64)
    with np.errstate(all="ignore"):
        want = alpha * (a_s.astype(np.float64) @ (np.swapaxes(b64, -1, -2) if transpose_b else b64))
        if bias:
            want = want + bias_s.astype(np.float64)
        if act:
            want = ACTIVATIONS[act][1](want)
    assert_matches(y.reshape(want.shape), want, 2e-2 if half else 1e-4,
                   what=f"{kernel} {a_shape} x {b_shape} T{int(transpose_b)} {params}")


# -- pytest ----------------------------------------------------------------------------------------

def _skip_reason() -> str | None:
    try:
        import pyopencl  # noqa: F401
    except ImportError as exc:
        return f"pyopencl: {exc}"
    from edgesdk.backends.opencl.device import unavailable_reason
    return unavailable_reason()


@pytest.fixture(scope="module")
def k() -> Kernels:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    return Kernels()


# Every id in float storage; three in half (the storage path is the unary kernel's, shared by all).
@pytest.mark.parametrize("act,half", [*[(a, False) for a in sorted(ACTIVATIONS)], (8, True), (15, True), (19, True)],
                         ids=lambda v: ACTIVATIONS[v][0] if not isinstance(v, bool) else ("half" if v else "float"))
def test_activation_ids(k, act: int, half: bool) -> None:
    case_activation(k, act, half)


def test_activation_fused_in_conv_gemm(k) -> None:
    case_activation_in_conv_gemm(k, 19)  # MISH, the longest ACTIVATE, on floatV


def test_resize_tables(k) -> None:
    case_resize(k, 2, 7, 5, 17, 3, False)
    case_resize(k, 1, 1, 1, 3, 7, True, specials=False)  # a 1x1 plane, half storage


def test_resize_tables_reproduce_onnxruntime(k) -> None:
    """The host's table contract: half_pixel linear and asymmetric-floor nearest tables (the
    formulas in this file) give ONNX Runtime's Resize exactly, up- and downsampling."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    rng = np.random.default_rng(5)
    x = randn(rng, 1, 2, 7, 5)
    for mode, extra, out_hw in [("linear", {"coordinate_transformation_mode": "half_pixel"}, (17, 3)),
                                ("nearest", {"coordinate_transformation_mode": "asymmetric",
                                             "nearest_mode": "floor"}, (17, 3))]:
        sizes = np.array([1, 2, *out_hw], np.int64)
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, **extra)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [helper.make_tensor("sizes", TensorProto.INT64, [4], sizes)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 8
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        oh, ow = out_hw
        base = {"NC": 2, "H": 7, "W": 5, "OH": oh, "OW": ow}
        if mode == "linear":
            iy0, iy1, wy = resize_tables_linear_half_pixel(7, oh)
            ix0, ix1, wx = resize_tables_linear_half_pixel(5, ow)
            (y,) = k.run("resize.cl", "resize_linear", {"RESIZE_LINEAR": 1, **base},
                         [x, iy0, iy1, wy, ix0, ix1, wx, Out(2 * oh * ow)], (2 * oh * ow,))
        else:
            (y,) = k.run("resize.cl", "resize_nearest", {"RESIZE_NEAREST": 1, **base},
                         [x, resize_table_nearest_asymmetric(7, oh), resize_table_nearest_asymmetric(5, ow),
                          Out(2 * oh * ow)], (2 * oh * ow,))
        np.testing.assert_allclose(y.reshape(want.shape), want, rtol=1e-6, atol=1e-6, err_msg=mode)


@pytest.mark.parametrize("rows,cols,local,has_bias,half,act", [
    (3, 17, 16, True, False, 0),
    (7, 192, 64, False, False, 8),  # ViT's width, fused GELU
    (3, 7, 32, True, True, 0),      # LOCAL > COLS, half storage
])
def test_layer_norm(k, rows, cols, local, has_bias, half, act) -> None:
    case_layer_norm(k, rows, cols, local, has_bias, half, act)


@pytest.mark.parametrize("n,ch,spatial,cpg,local,half", [
    (2, 3, 17, 1, 16, False),   # InstanceNormalization
    (1, 6, 5, 3, 8, True),      # GroupNormalization, 2 groups of 3 channels, half storage
])
def test_instance_norm(k, n, ch, spatial, cpg, local, half) -> None:
    case_instance_norm(k, n, ch, spatial, cpg, local, half)


@pytest.mark.parametrize("outer,axis,inner,log,half,local", [
    (3, 7, 17, False, False, None),
    (3, 7, 5, True, True, None),
    (2, 1, 3, True, False, None),   # a single value per column
    (3, 197, 1, False, False, 64),
    (2, 7, 3, True, True, 4),
    (2, 3, 1, False, False, 8),     # LOCAL > AXIS
])
def test_softmax_axis(k, outer, axis, inner, log, half, local) -> None:
    case_softmax(k, outer, axis, inner, log, half, local)


REDUCE_CASES = [  # every op once, spread over both kernels and both storages
    (0, 3, 7, 5, False, None),
    (1, 3, 197, 1, False, 64),
    (2, 3, 7, 5, False, None),
    (3, 2, 7, 3, True, 8),
    (4, 3, 7, 5, False, None),
    (5, 2, 7, 3, False, 4),
    (6, 3, 7, 5, True, None),
    (7, 3, 7, 5, False, None),
    (8, 3, 7, 5, False, None),
    (8, 2, 7, 3, False, 16),    # LOCAL > AXIS
    (9, 3, 7, 5, False, None),
    (9, 7, 1, 1, False, None),  # a single value per output
]


@pytest.mark.parametrize("op,outer,axis,inner,half,local", REDUCE_CASES,
                         ids=[f"{REDUCE_OPS[c[0]][0]}-{c[1]}x{c[2]}x{c[3]}{'-half' if c[4] else ''}"
                              f"{f'-wg{c[5]}' if c[5] else ''}" for c in REDUCE_CASES])
def test_reduce_axis(k, op, outer, axis, inner, half, local) -> None:
    case_reduce(k, op, outer, axis, inner, half, local)


def test_argreduce_reference_is_onnxruntime() -> None:
    """The reference scan reproduces answers recorded from ONNX Runtime 1.32 (a NaN only wins as
    the first value; ties go to the first, or with select_last_index the last, index)."""
    x = np.array([[1, np.nan, 3], [1, 2, 3], [-np.inf] * 3, [np.inf, 1, 2], [np.nan, 5, 5]], np.float32)[:, :, None]
    recorded = {(True, False): [2, 2, 0, 0, 0], (True, True): [2, 2, 2, 0, 0],
                (False, False): [0, 0, 0, 1, 0], (False, True): [0, 0, 2, 1, 0]}
    for (is_max, last), want in recorded.items():
        np.testing.assert_array_equal(argreduce_reference(x, is_max, last)[:, 0], want)
    ties = np.array([[1, 2, 2, 0], [3, 3, 1, 3]], np.float32)[:, :, None]
    np.testing.assert_array_equal(argreduce_reference(ties, True, True)[:, 0], [2, 3])
    np.testing.assert_array_equal(argreduce_reference(ties, False, True)[:, 0], [3, 2])


@pytest.mark.parametrize("is_max,last,half,long", [(True, False, False, False), (True, True, True, True),
                                                  (False, False, False, True), (False, True, True, False)],
                         ids=["argmax", "argmax_last_half_long", "argmin_long", "argmin_last_half"])
def test_argreduce(k, is_max: bool, last: bool, half: bool, long: bool) -> None:
    case_argreduce(k, is_max, last, 3, 7, 5, half=half, long=long)


@pytest.mark.parametrize("name", CONV_T_CASES)
def test_conv_transpose(k, name: str) -> None:
    case_conv_transpose(k, name, act=18 if name == "depthwise_4x4_s2" else 0)  # (a fused SiLU)


def test_conv_transpose_half_and_activation(k) -> None:
    case_conv_transpose(k, "stride2_outpad", half=True, half_products=2)


def test_conv_transpose_matches_onnxruntime(k) -> None:
    """The kernel's reading of pads / output_padding / dilations / groups is ONNX's."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    for name in ("stride2_outpad", "grouped_dilated_asym"):
        x_shape, w_shape, strides, dil, pads, out_pad, group, has_bias, _ = CONV_T_CASES[name]
        rng = np.random.default_rng(len(name))
        x, w, b = randn(rng, *x_shape), randn(rng, *w_shape), randn(rng, w_shape[1] * group)
        inputs = ["x", "w"] + (["b"] if has_bias else [])
        inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if has_bias else [])
        node = helper.make_node("ConvTranspose", inputs, ["y"], strides=list(strides), dilations=list(dil),
                                pads=list(pads), output_padding=list(out_pad), group=group)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        rows = CONV_T_CASES[name][-1]
        d = conv_transpose_defines(x_shape, w_shape, strides, dil, pads, out_pad, group, has_bias, rows)
        d.update({"ACT": 0, "HALF_PRODUCTS": 0, **{f"{r}_HALF": 0 for r in "XWBY"}})  # test_conv_transpose's build
        (y,) = k.run("conv_transpose.cl", "conv_transpose2d", d, [x, w, b, Out(want.size)],
                     (d["OW"], d["OH"], d["N"] * group * cdiv(d["OCG"], rows)))
        np.testing.assert_allclose(y.reshape(want.shape), want, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("name", ["slice_steps", "broadcast", "depth_to_space_dcr", "depth_to_space_crd",
                                  "space_to_depth"])
def test_strided_copy(k, name: str) -> None:
    case_strided_copy(k, name, half=name == "depth_to_space_crd")


def test_gather_axis(k) -> None:
    case_gather(k, 3, 5, 2, [4, 0, 0, 3, 7, -1])  # 7 and -1: out of range (0)
    case_gather(k, 2, 3, 17, [2, 1], half=True, long=True)


@pytest.mark.parametrize("op,half", [(4, False), (4, True), (5, True)], ids=["POW", "POW-half", "PRELU-half"])
def test_pow_prelu_same_shape(k, op: int, half: bool) -> None:
    case_binary(k, op, half)


def test_pow_prelu_broadcast(k) -> None:
    case_binary_broadcast(k, 5, (2, 3, 3, 5), (3, 1, 1))       # PRelu, per-channel slope
    case_binary_broadcast(k, 4, (3, 1), (1, 17), act=16)      # Pow, both operands broadcast, fused Neg


MATMUL_TILED = [{"TM": 8, "TN": 8, "TK": 4, "RM": 2, "RN": 2}, {"TM": 16, "TN": 8, "TK": 8, "RM": 4, "RN": 1}]


@pytest.mark.parametrize("kernel,transpose_b,params", [
    ("matmul_blocked", False, {"RM": 6, "NV": 2}),  # 7 rows: a partial row block; 19 columns: a partial vector
    ("matmul_blocked", True, {"RM": 3, "RN": 4}),   # K = 17: a partial K vector
    ("matmul_tiled", False, MATMUL_TILED[0]),
    ("matmul_tiled", True, MATMUL_TILED[0]),
], ids=str)
def test_matmul(k, kernel: str, transpose_b: bool, params: dict) -> None:
    b_shape = (3, 19, 17) if transpose_b else (3, 17, 19)
    case_matmul(k, kernel, (3, 7, 17), b_shape, transpose_b, params)


def test_matmul_broadcast_bias_alpha_half(k) -> None:
    # A batched (2, 3), B broadcast over the first batch dim; bias, alpha and GELU fused.
    case_matmul(k, "matmul_blocked", (2, 3, 7, 3), (3, 3, 17), False, {"RM": 6, "NV": 2},
                bias=True, alpha=0.125, act=8)
    case_matmul(k, "matmul_blocked", (2, 1, 1, 9), (3, 17, 9), True, {"RM": 3, "RN": 4}, bias=True, alpha=0.5)
    case_matmul(k, "matmul_tiled", (1, 17, 1), (2, 1, 3), False, MATMUL_TILED[0], bias=True)
    case_matmul(k, "matmul_blocked", (3, 7, 17), (3, 17, 19), False, {"RM": 1, "NV": 1}, half=True)
    case_matmul(k, "matmul_tiled", (3, 7, 17), (3, 19, 17), True, MATMUL_TILED[1], half=True)


# -- Oclgrind --------------------------------------------------------------------------------------

def oclgrind_cases():
    """One small case of every kernel (float, plus half where the kernel has it)."""
    yield "activations", lambda k: [case_activation(k, a, a % 2 == 0) for a in sorted(ACTIVATIONS)]
    yield "resize", lambda k: case_resize(k, 2, 3, 5, 4, 7, True)
    yield "layer_norm", lambda k: case_layer_norm(k, 3, 17, 8, True, False)
    yield "layer_norm_half", lambda k: case_layer_norm(k, 2, 5, 8, False, True)
    yield "instance_norm", lambda k: case_instance_norm(k, 1, 6, 5, 3, 4, True)
    yield "softmax_axis", lambda k: case_softmax(k, 3, 7, 5, True, True)
    yield "softmax_axis_wg", lambda k: case_softmax(k, 2, 7, 3, False, False, 4)
    yield "reduce_axis", lambda k: case_reduce(k, 8, 3, 7, 5, True)
    yield "reduce_axis_wg", lambda k: case_reduce(k, 1, 2, 17, 1, False, 8)
    yield "argreduce_axis", lambda k: case_argreduce(k, True, True, 3, 7, 5, half=True, long=True)
    yield "conv_transpose2d", lambda k: [case_conv_transpose(k, n) for n in ("stride2_outpad", "grouped_dilated_asym")]
    yield "conv_transpose2d_half", lambda k: case_conv_transpose(k, "depthwise_4x4_s2", half=True)
    yield "strided_copy", lambda k: [case_strided_copy(k, "slice_steps", half=True),
                                     case_strided_copy(k, "depth_to_space_dcr")]
    yield "gather_axis", lambda k: case_gather(k, 3, 5, 2, [4, 0, 7, -1], half=True)
    yield "pow_prelu", lambda k: [case_binary(k, 4, True), case_binary(k, 5, False),
                                  case_binary_broadcast(k, 5, (2, 3, 3, 5), (3, 1, 1))]
    yield "matmul_blocked", lambda k: [case_matmul(k, "matmul_blocked", (2, 7, 5), (2, 5, 19), False,
                                                   {"RM": 6, "NV": 2}, bias=True),
                                       case_matmul(k, "matmul_blocked", (2, 7, 5), (2, 19, 5), True,
                                                   {"RM": 3, "RN": 4}, half=True)]
    yield "matmul_tiled", lambda k: [case_matmul(k, "matmul_tiled", (2, 7, 5), (2, 5, 19), False,
                                                 MATMUL_TILED[0], bias=True),
                                     case_matmul(k, "matmul_tiled", (2, 7, 5), (2, 19, 5), True, MATMUL_TILED[1],
                                                 half=True)]


def run_oclgrind_suite() -> int:
    sys.path.insert(0, str(TESTS))
    k = Kernels()
    print(f"device: {k.device.label}", flush=True)
    count = 0
    for name, fn in oclgrind_cases():
        fn(k)
        count += 1
        print(f"  {name}: ok", flush=True)
    print(f"suite ok: {count} cases", flush=True)
    return 0


@pytest.mark.oclgrind
@pytest.mark.skipif(shutil.which("oclgrind") is None, reason="oclgrind is not installed (apt-get install oclgrind)")
def test_new_kernels_are_clean_under_oclgrind(tmp_path) -> None:
    if _skip_reason() is not None:
        pytest.skip(_skip_reason())
    from test_opencl_oclgrind import assert_clean_under_oclgrind
    log = assert_clean_under_oclgrind(__file__, tmp_path, "--oclgrind-suite")
    assert f"suite ok: {len(list(oclgrind_cases()))} cases" in log, log[-2000:]


if __name__ == "__main__":
    sys.exit(run_oclgrind_suite() if "--oclgrind-suite" in sys.argv else 0)
