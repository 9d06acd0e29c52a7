"""PyTorch 2 export quantization (PT2E) models import as integer ops.

torch.export -> prepare_pt2e / convert_pt2e with the XNNPACK quantizer (int8 symmetric, weights
per channel, BatchNorm folded by convert_pt2e) -> torch.onnx.export (the dynamo exporter: it writes
the quantized_decomposed ops as QuantizeLinear / DequantizeLinear) -> edgesdk.Session, checked
against ONNX Runtime on the same file.

Where PT2E lives: torch 2.13 no longer ships ``torch.ao.quantization.quantize_pt2e`` nor
``torch.ao.quantization.quantizer.xnnpack_quantizer``; ``prepare_pt2e`` / ``convert_pt2e`` are in
torchao (``torchao.quantization.pt2e.quantize_pt2e``) and the XNNPACK quantizer in ExecuTorch
(``executorch.backends.xnnpack.quantizer.xnnpack_quantizer``), with a copy in torchao
(``torchao.testing.pt2e._xnnpack_quantizer``). The tests take the first that imports and skip,
naming what is missing, without any.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript (pip install onnxscript)")

import edgesdk  # noqa: E402
from edgesdk.compress.torch_bridge import quiet_export  # noqa: E402


def _pt2e_api():
    """(prepare_pt2e, convert_pt2e, XNNPACKQuantizer, get_symmetric_quantization_config), or a skip."""
    try:  # torch <= 2.9 shipped PT2E itself
        from torch.ao.quantization.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torch.ao.quantization.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                        get_symmetric_quantization_config)
        return prepare_pt2e, convert_pt2e, XNNPACKQuantizer, get_symmetric_quantization_config
    except ImportError:
        pass
    try:
        with quiet_export():  # torchao's import prints about optional CUDA kernels it cannot load
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError:
        pytest.skip(f"PT2E quantization needs torchao (pip install torchao): torch {torch.__version__} has no "
                    "torch.ao.quantization.quantize_pt2e / quantizer.xnnpack_quantizer", allow_module_level=True)
    try:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                              get_symmetric_quantization_config)
    except ImportError:
        try:
            from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
        except ImportError:
            pytest.skip("the XNNPACK quantizer is missing: neither executorch (pip install executorch) nor this "
                        "torchao's torchao.testing.pt2e._xnnpack_quantizer", allow_module_level=True)
    return prepare_pt2e, convert_pt2e, XNNPACKQuantizer, get_symmetric_quantization_config


PREPARE, CONVERT, XNNPACKQuantizer, symmetric_config = _pt2e_api()
nn = torch.nn
BACKENDS = ["reference", "cpu"]
FLOAT_PRODUCTS = {"Conv", "Gemm", "MatMul"}


class ConvBnReluPoolLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


class ResidualNet(nn.Module):
    """More of what the XNNPACK quantizer annotates: a residual Add + ReLU, a depthwise conv with
    ReLU6 (hardtanh), Linear + ReLU; and pools it leaves in float."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(x + self.bn2(self.conv2(x)))
        x = nn.functional.hardtanh(self.dw(x), 0.0, 6.0)
        x = nn.functional.adaptive_avg_pool2d(nn.functional.avg_pool2d(x, 2), 1).flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))


def _pt2e_onnx(module: nn.Module, shape: tuple[int, ...], path) -> str:
    """``module`` (BatchNorm statistics made non-trivial, so folding matters) quantized by PT2E with
    the XNNPACK quantizer, calibrated on 32 random inputs, exported to ONNX at ``path``."""
    torch.manual_seed(0)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    module.eval()
    example = (torch.randn(shape),)
    with quiet_export():
        exported = torch.export.export(module, example).module()
        prepared = PREPARE(exported, XNNPACKQuantizer().set_global(symmetric_config(is_per_channel=True)))
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for _ in range(32):
                prepared(torch.randn(shape, generator=gen))
        converted = CONVERT(prepared)
        torch.onnx.export(converted, example, str(path), dynamo=True, input_names=["x"], output_names=["y"])
    return str(path)


@pytest.fixture(scope="module")
def simple_model(tmp_path_factory) -> str:
    return _pt2e_onnx(ConvBnReluPoolLinear(), (1, 3, 8, 8), tmp_path_factory.mktemp("pt2e") / "simple.onnx")


@pytest.fixture(scope="module")
def residual_model(tmp_path_factory) -> str:
    return _pt2e_onnx(ResidualNet(), (1, 3, 16, 16), tmp_path_factory.mktemp("pt2e") / "residual.onnx")


def _output_scale(model) -> float:
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    out = model.graph.output[0].name
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == out)
    return float(inits[dq.input[1]])


def _steps_from_onnxruntime(path: str, backend: str, shape: tuple[int, ...], runs: int = 16):
    """Per-element |edgesdk - ONNX Runtime| in output steps over ``runs`` random inputs, and the session."""
    model = onnx.load(path)
    step = _output_scale(model)
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ours = edgesdk.Session(path, backend=backend)
    rng = np.random.default_rng(7)
    steps = []
    for _ in range(runs):
        x = rng.standard_normal(shape).astype(np.float32)
        want = theirs.run(None, {"x": x})[0]
        got = ours.run({"x": x})[ours.output_names[0]]
        assert got.shape == want.shape
        steps.append(np.abs(got - want) / step)
    return np.stack(steps), ours


def _qdq_file(path: str) -> set[str]:
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops and not any(op.startswith("QLinear") for op in ops), ops
    return ops


@pytest.mark.parametrize("backend", BACKENDS)
def test_pt2e_conv_bn_relu_pool_linear_runs_in_integer_ops(simple_model: str, backend: str) -> None:
    assert {"Conv", "Gemm"} <= _qdq_file(simple_model)  # the file is QDQ: the fusion is edgesdk's
    steps, sess = _steps_from_onnxruntime(simple_model, backend, (1, 3, 8, 8))
    assert steps.max() <= 1.0 + 1e-4, steps.max()
    ops = [n.op for n in sess.graph.nodes]
    assert ops.count("QLinearConv") == 1 and ops.count("QGemm") == 1 and not FLOAT_PRODUCTS & set(ops), ops
    assert "Relu" not in ops  # folded into the QLinearConv's clamp
    if backend == "cpu":
        integer = [n.name for n in sess.graph.nodes if n.op in ("QLinearConv", "QGemm")]
        assert {sess._impl.placements[name] for name in integer} == {"native"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_pt2e_residual_model_runs_in_integer_ops(residual_model: str, backend: str) -> None:
    """Every Conv / Linear and the residual Add fuse; the ReLU6 after the depthwise conv (its own
    Q/DQ in PT2E's output) becomes an 8-bit table; the pools PT2E left float stay float, as in
    ONNX Runtime."""
    _qdq_file(residual_model)
    steps, sess = _steps_from_onnxruntime(residual_model, backend, (1, 3, 16, 16))
    # Measured: max 1 step on both backends (16 inputs).
    assert steps.max() <= 1.0 + 1e-4, steps.max()
    ops = [n.op for n in sess.graph.nodes]
    assert ops.count("QLinearConv") == 3 and ops.count("QGemm") == 2 and "QLinearAdd" in ops, ops
    assert not FLOAT_PRODUCTS & set(ops) and "Add" not in ops, ops
