"""The linear family (``edgesdk/ops/linear.py``) on every backend: Gemm with transposed operands,
alpha and beta and every shape of C; MatMul with batch dimensions and numpy broadcasting, 1-D
operands, both operands at run time (attention's Q K^T) or one constant, fused activations, and
an attention block (exported from torch, as ViT's is) with no fallback. (Activations fused into
Gemm: tests/ops/test_conv.py, after a Conv's pooled output.)"""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from onnx_builders import single_node_model

R = np.random.default_rng(31)
FLOAT = onnx.TensorProto.FLOAT


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def model_of(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, ...]], outputs: list[str],
             initializers: dict[str, np.ndarray] | None = None, opset: int = 17) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(n, FLOAT, list(s)) for n, s in inputs.items()],
                          [oh.make_empty_tensor_value_info(o) for o in outputs],
                          [onnx.numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    return model


# -- Gemm -------------------------------------------------------------------------------------------
TRANS_A = "Gemm with transA: no OpenCL kernel"
C_NOT_A_ROW = "the cpu Gemm kernel adds a row-vector C only (a full or column C runs on the reference kernel)"
# name: (A shape, B shape, C shape (None: no C, (): a scalar), attributes)
GEMM_CASES = {
    "plain": ((3, 5), (5, 4), (4,), {}),
    "transB_gemv": ((1, 37), (11, 37), (11,), dict(transB=1)),
    "transB_batch": ((6, 20), (3, 20), (1, 3), dict(transB=1)),
    "transA_alpha_beta": ((6, 2), (6, 3), (2, 3), dict(transA=1, alpha=0.5, beta=2.0)),
    "alpha_beta_full_c": ((5, 9), (9, 3), (5, 3), dict(alpha=0.5, beta=2.0)),
    "column_c": ((4, 8), (8, 5), (4, 1), {}),
    "scalar_c": ((1, 7), (7, 2), (), {}),
    "no_c": ((4, 3), (3, 5), None, {}),
}


@pytest.mark.parametrize("case", GEMM_CASES)
def test_gemm(target, case: str) -> None:
    a, b, c, attrs = GEMM_CASES[case]
    constants = {"B": rand(*b)}
    if c is not None:
        constants["C"] = rand(*c) if c else np.float32(0.3)
    fallback = {}
    if attrs.get("transA"):
        fallback.update({"opencl/fp32:Gemm": TRANS_A, "opencl/fp16:Gemm": TRANS_A})
    if c is not None and len(c) == 2 and c[0] != 1:
        fallback.update({"cpu/fp32:Gemm": C_NOT_A_ROW, "cpu/fp16:Gemm": C_NOT_A_ROW})
    target.check(single_node_model("Gemm", a, constants, **attrs), {"x": rand(*a)}, may_fall_back=fallback)


# -- MatMul -----------------------------------------------------------------------------------------
RUNTIME_CASES = {  # name: (A shape, B shape), both graph inputs
    "batched_4d": ((2, 3, 4, 5), (2, 3, 5, 6)),
    "broadcast_both": ((3, 1, 4, 5), (1, 2, 5, 6)),
    "a_2d_b_batched": ((4, 5), (2, 5, 6)),
    "a_batched_b_2d": ((2, 3, 4, 5), (5, 6)),
    "a_1d": ((5,), (2, 5, 6)),
    "b_1d": ((2, 3, 4, 5), (5,)),
    "both_1d": ((7,), (7,)),
    "row_times_column": ((1, 9), (9, 1)),
    "five_batch_dims_merge": ((2, 2, 2, 2, 3, 3, 4), (2, 2, 2, 2, 3, 4, 5)),
}


@pytest.mark.parametrize("case", RUNTIME_CASES)
def test_matmul_of_two_run_time_tensors(target, case: str) -> None:
    a, b = RUNTIME_CASES[case]
    model = model_of([oh.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])
    target.check(model, {"a": rand(*a), "b": rand(*b)})


CONSTANT_CASES = {  # name: (run-time shape, constant shape, constant on the right)
    "matrix": ((3, 4), (4, 5), True),
    "matrix_one_row_odd": ((1, 37), (37, 19), True),
    "weight_2d": ((2, 3, 4, 5), (5, 6), True),          # cpu: a packed GEMM over the 24 leading rows
    "weight_2d_few_rows": ((2, 3, 5), (5, 6), True),    # opencl: Gemm's kernel below 16 rows
    "weight_2d_vector_input": ((5,), (5, 6), True),
    "weight_batched": ((2, 4, 5), (2, 5, 3), True),
    "weight_broadcast": ((2, 1, 4, 5), (3, 5, 6), True),
    "weight_batched_rank_up": ((1, 3, 13, 32), (3, 32, 8), True),
    "weight_1d": ((2, 4, 5), (5,), True),
    "constant_left": ((2, 5, 6), (4, 5), False),        # W @ x
}


@pytest.mark.parametrize("case", CONSTANT_CASES)
def test_matmul_with_a_constant(target, case: str) -> None:
    x_shape, w_shape, right = CONSTANT_CASES[case]
    inputs = ["x", "w"] if right else ["w", "x"]
    model = model_of([oh.make_node("MatMul", inputs, ["y"])], {"x": x_shape}, ["y"], {"w": rand(*w_shape)})
    target.check(model, {"x": rand(*x_shape)})


def test_matmul_batch_dims_that_do_not_merge(target) -> None:
    """Four output batch dimensions that no operand steps through evenly: beyond linear.cl's
    three batch indices, so OpenCL runs it on the reference kernel; the cpu's index tables take any."""
    a, b = (2, 1, 3, 1, 4, 5), (1, 2, 1, 3, 5, 6)
    model = model_of([oh.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])
    why = "linear.cl indexes three batch dims"
    target.check(model, {"a": rand(*a), "b": rand(*b)},
                 may_fall_back={"opencl/fp32:MatMul": why, "opencl/fp16:MatMul": why})


def test_matmul_tiled_kernel(tmp_path, monkeypatch) -> None:
    """linear.cl's local-memory kernel, which device families with a ``matmul`` work-group size
    (GPUs) run: partial tiles, broadcast batch dims, a fused activation, half storage."""
    import edgesdk
    from ops.op_tester import backend_unavailable
    if backend_unavailable("opencl"):
        pytest.skip(backend_unavailable("opencl"))
    config = tmp_path / "gpu.yaml"
    config.write_text("kernels:\n  matmul: {local: [64, 1]}\n")
    monkeypatch.setenv("EDGESDK_OPENCL_CONFIG", str(config))
    a, b = (3, 1, 33, 17), (2, 17, 40)
    nodes = [oh.make_node("MatMul", ["a", "b"], ["t"]), oh.make_node("Relu", ["t"], ["y"])]
    model = model_of(nodes, {"a": a, "b": b}, ["y"])
    feeds = {"a": rand(*a), "b": rand(*b)}
    for precision in ("fp32", "fp16"):
        want = edgesdk.Session(model, backend="reference", precision=precision).run(None, feeds)[0]
        sess = edgesdk.Session(model, backend="opencl", precision=precision)
        assert [launch.name for step in sess._impl._steps for launch in step.launches] == ["matmul_tiled"]
        np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-4 if precision == "fp32" else 1e-2,
                                   atol=1e-4 if precision == "fp32" else 2e-2)


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
@pytest.mark.parametrize("constant", [False, True], ids=["run_time_b", "constant_b"])
def test_matmul_with_a_fused_activation(target, activation: str, constant: bool) -> None:
    nodes = [oh.make_node("MatMul", ["a", "b"], ["t"]), oh.make_node(activation, ["t"], ["y"])]
    b = rand(2, 5, 6)
    model = model_of(nodes, {"a": (2, 4, 5), **({} if constant else {"b": b.shape})}, ["y"],
                     {"b": b} if constant else None)
    sess = target.check(model, {"a": rand(2, 4, 5), **({} if constant else {"b": b})})
    assert [n.op for n in sess.graph.nodes] == ["MatMul"]  # the activation is fused


def test_attention_block(target) -> None:
    """softmax(Q K^T / sqrt(d)) V with batch dims (1, heads, tokens, dim), K^T as a Transpose."""
    q, k, v = (1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16)
    nodes = [oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             oh.make_node("MatMul", ["q", "kt"], ["scores"]),
             oh.make_node("Mul", ["scores", "scale"], ["scaled"]),
             oh.make_node("Softmax", ["scaled"], ["weights"], axis=-1),
             oh.make_node("MatMul", ["weights", "v"], ["y"])]
    model = model_of(nodes, {"q": q, "k": k, "v": v}, ["y"], {"scale": np.array(0.25, np.float32)})
    target.check(model, {"q": rand(*q), "k": rand(*k), "v": rand(*v)})


def test_torch_attention(target) -> None:
    """A hand-written 2-head self-attention (8 tokens, dim 16) from torch's legacy exporter at
    opset 17: Linear projections (MatMul + Add), head split (Reshape + Transpose), Q @ K^T,
    softmax over the last axis, @ V, head merge, output projection."""
    torch = pytest.importorskip("torch")

    class SelfAttention(torch.nn.Module):
        def __init__(self, dim: int = 16, heads: int = 2) -> None:
            super().__init__()
            self.heads, self.scale = heads, (dim // heads) ** -0.5
            self.q, self.k, self.v, self.proj = (torch.nn.Linear(dim, dim) for _ in range(4))

        def split(self, t):
            b, n, d = t.shape
            return t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            weights = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
            return self.proj((weights @ v).transpose(1, 2).reshape(b, n, d))

    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.onnx.export(SelfAttention().eval(), (torch.randn(1, 8, 16),), buffer, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    model = onnx.load_from_string(buffer.getvalue())
    batched = [n for n in model.graph.node if n.op_type == "MatMul"]
    assert len(batched) == 6  # four projections, Q @ K^T and weights @ V
    sess = target.check(model, {"x": rand(1, 8, 16)})
    if target.backend == "cpu":
        placements = sess._impl.placements
        assert {placements[n.name] for n in sess.graph.nodes if n.op in ("MatMul", "Softmax")} == {"native"}


def test_matmul_inner_sizes_must_agree() -> None:
    import edgesdk
    from edgesdk.errors import UnsupportedModelError
    with pytest.raises(UnsupportedModelError, match="inner sizes differ"):
        edgesdk.Session(single_node_model("MatMul", (2, 3, 4), {"B": rand(5, 6)}), backend="reference")


@pytest.mark.parametrize("case", ["broadcast_both", "a_1d", "b_1d"])
def test_torch_lowering(case: str) -> None:
    from ops.test_reduce import torch_parity
    a, b = RUNTIME_CASES[case]
    model = model_of([oh.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])
    torch_parity(model, {"a": rand(*a), "b": rand(*b)})
