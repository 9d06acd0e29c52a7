"""Huffman-coded weight blocks on the opencl backend (issue 15): ``conv_huffman`` decodes each
block into local memory, one work-group per block row and pixel tile, and multiplies it in.

Against the reference backend (which decodes the weights and runs the dense product): sparse
layout with codebook indices or raw fp32 values, dense layout (every weight an index), 128x128
blocks and small odd ones (3x5, 7x4) on shapes that are no multiple of them, 1x1 and 3x3 convs with
strides, padding and dilation, Gemm at batch 1 and 5, fused activations, fp16 storage, and
non-finite inputs (NaN and inf where ONNX Runtime's dense product has them: a pruned weight times
inf is NaN), and blocks larger than the device's local memory (decoded a strip of rows at a time,
as on NVIDIA, Adreno and Mali). fp32: rtol 1e-4; fp16: against the reference's fp16 mode, rtol 1e-2.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import edgesdk
from conftest import assert_close
from edgesdk.compress.encode import encode_clustered, encode_huffman, encode_sparse, prune_mask
from edgesdk.graph import Graph
from edgesdk.loader import load_model
from edgesdk.runtime.activations import Activation

pytest.importorskip("pyopencl")
from edgesdk.backends.opencl import OpenCLBackend  # noqa: E402

pytestmark = pytest.mark.skipif(OpenCLBackend.unavailable_reason() is not None,
                                reason=str(OpenCLBackend.unavailable_reason()))

R = np.random.default_rng(15)

ENCODERS = {
    "sparse-codebook": lambda w, block: encode_huffman(encode_sparse(w, prune_mask(w, 0.9), bits=4), block=block),
    "sparse-fp32": lambda w, block: encode_huffman(encode_sparse(w, prune_mask(w, 0.8)), block=block),
    "dense": lambda w, block: encode_huffman(encode_clustered(w, 4), block=block),
}


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def conv_graph(enc, x_shape: tuple[int, ...], *, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1,
               activation: Activation | None = None, bias: bool = True) -> Graph:
    g = Graph("huffman-conv")
    g.add_input("x", x_shape)
    g.add_encoded("w", enc)
    inputs = ["x", "w"]
    if bias:
        g.add_constant("b", rand(enc.shape[0]))
        inputs.append("b")
    attrs = dict(kernel_shape=tuple(enc.shape[2:]), strides=strides, dilations=dilations, pads=pads, group=group)
    if activation is not None:
        attrs["fused_activation"] = activation
    g.add_node("Conv", inputs, ["y"], name="conv", **attrs)
    g.outputs = ["y"]
    return load_model(g)


def gemm_graph(enc, m: int, alpha: float = 1.0, beta: float = 1.0) -> Graph:
    g = Graph("huffman-gemm")
    g.add_input("x", (m, enc.shape[1]))
    g.add_encoded("w", enc)
    g.add_constant("b", rand(enc.shape[0]))
    g.add_node("Gemm", ["x", "w", "b"], ["y"], name="gemm", alpha=alpha, beta=beta, transA=False, transB=True)
    g.outputs = ["y"]
    return load_model(g)


def run_both(graph: Graph, x: np.ndarray, precision: str = "fp32", kernel: str | None = "conv_huffman"):
    ref = edgesdk.Session(graph, backend="reference", precision=precision)
    ocl = edgesdk.Session(graph, backend="opencl", precision=precision)
    assert not ocl._impl.fallback_reasons, ocl._impl.fallback_reasons
    steps = [s for s in ocl._impl._steps if s.placement == "opencl"]
    ran = {launch.name for s in steps for launch in s.launches}
    if kernel is not None:
        assert kernel in ran, (ran, [s.note for s in steps])
    with np.errstate(all="ignore"):
        want = ref.run({"x": x})["y"]
    got = ocl.run({"x": x})["y"]
    return got, want, steps


def check(graph: Graph, x: np.ndarray, precision: str = "fp32", kernel: str | None = "conv_huffman"):
    got, want, steps = run_both(graph, x, precision, kernel)
    assert_close(got, want, 1e-4 if precision == "fp32" else 1e-2, what=precision)
    return steps


CONVS = {  # name: (weight shape, input shape, conv attributes)
    "1x1": ((20, 12, 1, 1), (2, 12, 5, 7), {}),
    "3x3-pad": ((20, 12, 3, 3), (1, 12, 9, 11), {"pads": (1, 1, 1, 1)}),
    "3x3-stride2": ((13, 7, 3, 3), (2, 7, 10, 19), {"pads": (1, 0, 0, 1), "strides": (2, 2)}),
    "3x3-dilated": ((9, 5, 3, 3), (1, 5, 8, 9), {"pads": (2, 1, 2, 1), "dilations": (2, 1)}),
    "1x1-stride2": ((11, 6, 1, 1), (1, 6, 7, 8), {"strides": (2, 2)}),
    "3x3-2x2-blocks": ((130, 16, 3, 3), (1, 16, 6, 21), {"pads": (1, 1, 1, 1)}),  # 2 x 2 blocks of 128 x 128
}


# (the large layer in 128 x 128 blocks only: many small blocks are slow for the Python reference decoder)
CONV_BLOCKS = [(conv, block) for conv in CONVS for block in [(128, 128), (3, 5), (7, 4)]
               if conv != "3x3-2x2-blocks" or block == (128, 128)]


@pytest.mark.parametrize("encoding", list(ENCODERS))
@pytest.mark.parametrize("conv, block", CONV_BLOCKS, ids=[f"{c}-{b[0]}x{b[1]}" for c, b in CONV_BLOCKS])
def test_conv_matches_the_reference(conv: str, encoding: str, block: tuple[int, int]) -> None:
    w_shape, x_shape, attrs = CONVS[conv]
    enc = ENCODERS[encoding](rand(*w_shape), block)
    steps = check(conv_graph(enc, x_shape, **attrs), rand(*x_shape))
    assert "decoded per block in the kernel" in steps[0].note


@pytest.mark.parametrize("encoding", list(ENCODERS))
@pytest.mark.parametrize("m", [1, 5])
def test_gemm_matches_the_reference(encoding: str, m: int) -> None:
    enc = ENCODERS[encoding](rand(37, 150), (16, 64))
    check(gemm_graph(enc, m, alpha=0.5, beta=2.0), rand(m, 150))


@pytest.mark.parametrize("encoding", list(ENCODERS))
def test_fp16_storage(encoding: str) -> None:
    enc = ENCODERS[encoding](rand(24, 10, 3, 3), (5, 7))
    check(conv_graph(enc, (1, 10, 7, 9), pads=(1, 1, 1, 1)), rand(1, 10, 7, 9), precision="fp16")
    check(gemm_graph(ENCODERS[encoding](rand(19, 40), (4, 9)), 3), rand(3, 40), precision="fp16")


@pytest.mark.parametrize("activation", [Activation("Relu"), Activation("Clip", (0.0, 6.0)), Activation("HardSwish")],
                         ids=lambda a: a.kind)
def test_fused_activation(activation: Activation) -> None:
    enc = ENCODERS["sparse-codebook"](rand(16, 8, 3, 3), (6, 10))
    check(conv_graph(enc, (1, 8, 6, 6), pads=(1, 1, 1, 1), activation=activation), rand(1, 8, 6, 6))


def test_no_bias_and_empty_blocks() -> None:
    """A layer pruned to almost nothing: most blocks have no entries (rows of end-of-row codes)."""
    w = rand(12, 6, 3, 3)
    keep = np.zeros(w.shape, bool)
    keep[3, 2, 1, 1] = keep[7, 0, 0, 2] = True
    enc = encode_huffman(encode_sparse(w, keep), block=(4, 8))
    check(conv_graph(enc, (1, 6, 5, 5), pads=(1, 1, 1, 1), bias=False), rand(1, 6, 5, 5))


def _assert_same_specials(got: np.ndarray, want: np.ndarray, what: str) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=f"{what}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=f"{what}: -inf positions")
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], 1e-4, what=what)


@pytest.mark.parametrize("encoding", list(ENCODERS))
@pytest.mark.parametrize("conv", ["1x1", "3x3-pad", "3x3-stride2"])
def test_non_finite_inputs_propagate_as_the_dense_product(conv: str, encoding: str) -> None:
    """NaN and inf as the reference's (and ONNX Runtime's) dense product: a pruned weight times inf
    or NaN is NaN, an inf met only by stored weights stays +-inf."""
    w_shape, x_shape, attrs = CONVS[conv]
    enc = ENCODERS[encoding](rand(*w_shape), (3, 5))
    x = rand(*x_shape)
    flat = x.reshape(-1)
    flat[R.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    got, want, _ = run_both(conv_graph(enc, x_shape, **attrs), x)
    assert np.isnan(want).any()
    _assert_same_specials(got, want, f"{conv} {encoding}")


def test_inf_met_only_by_stored_weights_stays_infinite() -> None:
    """A 1x1 layer with a dense column: an inf on that input channel meets no pruned weight, so the
    outputs are +-inf, not NaN; a NaN on a pruned channel makes exactly the rows that pruned it NaN."""
    w = np.abs(rand(10, 4, 1, 1)) + 0.5
    keep = np.zeros(w.shape, bool)
    keep[:, 0] = True  # channel 0: every row stores a weight
    keep[::2, 1] = True  # channel 1: even rows only
    enc = encode_huffman(encode_sparse(w, keep, bits=3), block=(3, 2))
    x = np.abs(rand(1, 4, 3, 3))
    x[0, 0, 1, 1] = np.inf
    x[0, 1, 2, 0] = np.nan
    got, want, _ = run_both(conv_graph(enc, (1, 4, 3, 3), bias=False), x)
    assert np.isposinf(want[0, :, 1, 1]).all() and np.isnan(want[0, :, 2, 0]).all()
    _assert_same_specials(got, want, "stored-only inf")
    x[0, 1, 2, 0] = np.inf
    got, want, _ = run_both(conv_graph(enc, (1, 4, 3, 3), bias=False), x)
    assert np.isposinf(want[0, ::2, 2, 0]).all() and np.isnan(want[0, 1::2, 2, 0]).all()
    _assert_same_specials(got, want, "inf on a half-pruned channel")


def test_gemm_non_finite_inputs() -> None:
    enc = ENCODERS["sparse-codebook"](rand(21, 40), (8, 16))
    x = rand(3, 40)
    x[1, 7] = np.inf
    x[2, 30] = np.nan
    got, want, _ = run_both(gemm_graph(enc, 3), x)
    _assert_same_specials(got, want, "gemm")


def test_grouped_conv_runs_decoded_at_load() -> None:
    enc = ENCODERS["sparse-codebook"](rand(8, 3, 3, 3), (4, 4))
    steps = check(conv_graph(enc, (1, 6, 5, 5), pads=(1, 1, 1, 1), group=2), rand(1, 6, 5, 5), kernel=None)
    assert "grouped convolution" in steps[0].note and "decoded at load" in steps[0].note
    assert "conv_huffman" not in {launch.name for launch in steps[0].launches}


def test_block_too_large_for_local_memory_runs_decoded_at_load(monkeypatch) -> None:
    from edgesdk.backends.opencl.lower import conv_huffman
    monkeypatch.setattr(conv_huffman, "local_bytes", lambda enc, rows, per_row=None: 1 << 40)
    enc = ENCODERS["dense"](rand(8, 4, 3, 3), (8, 36))
    steps = check(conv_graph(enc, (1, 4, 5, 5), pads=(1, 1, 1, 1)), rand(1, 4, 5, 5), kernel=None)
    assert "local memory" in steps[0].note and "decoded at load" in steps[0].note


# Local memory per work-group: NVIDIA's 48 KiB (a 128x128 float block is 64 KiB), Adreno's and
# Mali's 32 KiB, and less (strips of 8 rows): PoCL has far more, so the tests shrink its budget.
# The sparse blocks (80-90% zero: 10-20 KiB) fit 32 KiB whole: smaller budgets make them strip.
STRIP_CASES = [("dense", 48), ("dense", 32), ("dense", 4), ("sparse-codebook", 8), ("sparse-codebook", 5),
               ("sparse-fp32", 16), ("sparse-fp32", 6)]


@pytest.mark.parametrize("encoding, kib", STRIP_CASES, ids=[f"{e}-{k}KiB" for e, k in STRIP_CASES])
def test_blocks_larger_than_local_memory_decode_in_row_strips(monkeypatch, encoding: str, kib: int) -> None:
    """The 128x128 blocks of a 130x144 layer (2 x 2 blocks, edge blocks 2 rows and 16 columns) on a
    device whose local memory holds only part of a block: decoded a strip of rows at a time, the
    bit reader (and the raw values' position) carried from strip to strip."""
    from edgesdk.backends.opencl.lower import conv_huffman
    monkeypatch.setattr(conv_huffman, "local_budget", lambda info: kib << 10)
    w_shape, x_shape, attrs = CONVS["3x3-2x2-blocks"]
    enc = ENCODERS[encoding](rand(*w_shape), (128, 128))
    steps = check(conv_graph(enc, x_shape, **attrs), rand(*x_shape))
    assert "rows at a time" in steps[0].note, steps[0].note


@pytest.mark.parametrize("encoding, kib", [("dense", 6), ("sparse-codebook", 2), ("sparse-fp32", 2)],
                         ids=["dense", "sparse-codebook", "sparse-fp32"])
def test_gemm_and_pointwise_in_row_strips(monkeypatch, encoding: str, kib: int) -> None:
    """Strips on the flattened-pixel path (Gemm, 1x1 conv) with blocks that are no multiple of the
    strip, and the non-finite rule across strips."""
    from edgesdk.backends.opencl.lower import conv_huffman
    monkeypatch.setattr(conv_huffman, "local_budget", lambda info: kib << 10)
    enc = ENCODERS[encoding](rand(45, 300), (40, 128))
    x = rand(5, 300)
    x[1, 7] = np.inf
    x[3, 200] = np.nan
    steps = check(gemm_graph(enc, 1, alpha=0.5, beta=2.0), rand(1, 300))
    assert "rows at a time" in steps[0].note, steps[0].note
    got, want, _ = run_both(gemm_graph(enc, 5), x)
    _assert_same_specials(got, want, f"gemm {encoding}")
    x = rand(2, 300, 3, 5)
    steps = check(conv_graph(dataclasses.replace(enc, shape=(45, 300, 1, 1)), x.shape), x)  # the same matrix
    assert "rows at a time" in steps[0].note, steps[0].note


def test_lookup_table_decodes_every_code() -> None:
    """Every peek of MAX_CODE_BITS bits maps to the symbol whose bit-reversed code it starts with."""
    from edgesdk.backends.opencl.lower.conv_huffman import lookup_table
    from edgesdk.compress.huffman import MAX_CODE_BITS, code_lengths, reversed_codes
    lengths = code_lengths(np.array([40, 1, 0, 7, 7, 300, 2, 0, 1, 1, 1]))
    table = lookup_table(lengths)
    codes = reversed_codes(lengths)
    for peek in range(1 << MAX_CODE_BITS):
        entry = int(table[peek])
        symbol, length = entry >> 4, entry & 15
        assert length == lengths[symbol] and peek & ((1 << length) - 1) == codes[symbol]


# -- the uncoded CSR kernel (conv_csr) keeps the same rule -------------------------------------------
@pytest.mark.parametrize("conv, group", [("1x1", 1), ("3x3-pad", 1), ("3x3-stride2", 1), ("3x3-dilated", 1),
                                         ("3x3-pad", 4)])
def test_csr_non_finite_inputs_propagate_as_the_dense_product(conv: str, group: int) -> None:
    """conv_csr (a pruned layer stored as plain CSR): a non-finite input met by a pruned weight
    makes the output NaN, as in the dense product; nonfinite_taps counts the taps once per layer."""
    w_shape, x_shape, attrs = CONVS[conv]
    w = rand(w_shape[0], w_shape[1] // group, *w_shape[2:])
    enc = encode_sparse(w, prune_mask(w, 0.8))
    x = rand(*x_shape)
    flat = x.reshape(-1)
    flat[R.choice(flat.size, 4, replace=False)] = [np.nan, np.inf, -np.inf, np.inf]
    got, want, steps = run_both(conv_graph(enc, x_shape, group=group, **attrs), x, kernel="conv_csr")
    assert np.isnan(want).any()
    assert "nonfinite_taps" in {launch.name for launch in steps[0].launches}
    _assert_same_specials(got, want, f"csr {conv} group {group}")


def test_csr_inf_met_only_by_stored_weights_stays_infinite() -> None:
    w = np.abs(rand(10, 4, 1, 1)) + 0.5
    keep = np.zeros(w.shape, bool)
    keep[:, 0] = True
    keep[::2, 1] = True
    x = np.abs(rand(1, 4, 3, 3))
    x[0, 0, 1, 1] = np.inf
    x[0, 1, 2, 0] = np.inf
    got, want, _ = run_both(conv_graph(encode_sparse(w, keep), (1, 4, 3, 3), bias=False), x, kernel="conv_csr")
    assert np.isposinf(want[0, :, 1, 1]).all() and np.isnan(want[0, 1::2, 2, 0]).all()
    _assert_same_specials(got, want, "csr stored-only inf")
