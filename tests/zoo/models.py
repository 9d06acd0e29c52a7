"""Plain-PyTorch model zoo for the ONNX parity tests.

Every model is built deterministically (``torch.manual_seed`` per model), put in eval mode and
given non-trivial BatchNorm statistics (random running mean/var, weight, bias), so that the SDK's
BatchNorm folding is exercised for real rather than folding an identity.

torchvision is deliberately not used: every architecture is written out here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ModelSpec", "MODELS", "build", "get_spec", "model_names"]


# --------------------------------------------------------------------------------------------
# helpers


def _init_weights(model: nn.Module) -> None:
    """Variance-preserving init (as torchvision does) so activations stay O(1) through deep nets."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.uniform_(m.bias, -0.1, 0.1)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, (1.0 / m.in_features) ** 0.5)
            if m.bias is not None:
                nn.init.uniform_(m.bias, -0.1, 0.1)


def randomize_batchnorm(model: nn.Module, generator: torch.Generator | None = None) -> None:
    """Give every BatchNorm non-trivial statistics: var ~ U(0.5, 2), the rest random too."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(n, generator=generator) * 0.2)
                m.running_var.copy_(torch.rand(n, generator=generator) * 1.5 + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(n, generator=generator) * 1.0 + 0.5)
                    m.bias.copy_(torch.randn(n, generator=generator) * 0.2)


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = nn.ReLU):
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish) else act())
    return nn.Sequential(*layers)


def _make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


# --------------------------------------------------------------------------------------------
# 1. MobileNetV2 (width 1.0, 1000 classes)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1, act=nn.ReLU6))
        layers += [
            _conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    # t, c, n, s
    SETTINGS = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]

    def __init__(self, num_classes: int = 1000, width: float = 1.0):
        super().__init__()
        cin = _make_divisible(32 * width)
        last = _make_divisible(1280 * max(1.0, width))
        feats: list[nn.Module] = [_conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width)
            for i in range(n):
                feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        feats.append(_conv_bn(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.classifier(x)


# --------------------------------------------------------------------------------------------
# 2. ResNet-18


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers = []
        cin = 64
        for i, c in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, c, stride), BasicBlock(c, c, 1)))
            cin = c
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)  # exports as GlobalAveragePool
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# --------------------------------------------------------------------------------------------
# 3. MobileNetV3-Small-like


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x):
        s = self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))
        return x * s


class V3Block(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, act: type[nn.Module], stride: int):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(_conv_bn(cin, exp, 1, act=act))
        layers.append(_conv_bn(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcite(exp, _make_divisible(exp // 4)))
        layers.append(_conv_bn(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV3Style(nn.Module):
    # k, exp, out, se, act, stride  (MobileNetV3-Small layout)
    RE, HS = nn.ReLU, nn.Hardswish
    SETTINGS = [
        (3, 16, 16, True, RE, 2),
        (3, 72, 24, False, RE, 2),
        (3, 88, 24, False, RE, 1),
        (5, 96, 40, True, HS, 2),
        (5, 240, 40, True, HS, 1),
        (5, 120, 48, True, HS, 1),
        (5, 144, 48, True, HS, 1),
        (5, 288, 96, True, HS, 2),
        (5, 576, 96, True, HS, 1),
    ]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        feats: list[nn.Module] = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish)]
        cin = 16
        for k, exp, cout, se, act, s in self.SETTINGS:
            feats.append(V3Block(cin, k, exp, cout, se, act, s))
            cin = cout
        feats.append(_conv_bn(cin, 576, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*feats)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(576, 1024), nn.Hardswish(inplace=True), nn.Dropout(0.2), nn.Linear(1024, num_classes)
        )

    def forward(self, x):
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


# --------------------------------------------------------------------------------------------
# 4. SqueezeNet 1.1


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, e1: int, e3: int):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_bn = nn.BatchNorm2d(squeeze)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.act(self.squeeze_bn(self.squeeze(x)))
        return torch.cat([self.act(self.expand1x1(x)), self.act(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 (plus a BatchNorm after each squeeze conv, to feed BN folding)."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64),
            Fire(128, 16, 64, 64),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128),
            Fire(256, 32, 128, 128),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256),
        )
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Conv2d(512, num_classes, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1)
        )

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# --------------------------------------------------------------------------------------------
# 5. LeNet-5


class LeNet5(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.bn1 = nn.BatchNorm2d(6)
        self.pool1 = nn.AvgPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool1(torch.tanh(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


# --------------------------------------------------------------------------------------------
# 6. oddnet: awkward attributes and op types


@torch.library.custom_op("edgesdk_zoo::lrn", mutates_args=())
def lrn_op(x: torch.Tensor, size: int, alpha: float, beta: float, k: float) -> torch.Tensor:
    """``F.local_response_norm`` as one opaque op, so that exporters can emit a single ONNX ``LRN``."""
    return F.local_response_norm(x, size, alpha, beta, k)


@lrn_op.register_fake
def _lrn_fake(x, size, alpha, beta, k):
    return torch.empty_like(x)


class LocalResponseNorm(nn.LocalResponseNorm):
    """``nn.LocalResponseNorm`` that exports as ONNX ``LRN`` (export.py registers the translations).

    Plain ``nn.LocalResponseNorm`` is Python code (pad, 3-D avg-pool, pow, squeeze) and exports as
    that decomposition, never as ``LRN``. ONNX LRN and torch agree for odd ``size`` only.
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        if size % 2 != 1:
            raise ValueError("LRN size must be odd (ONNX and torch place even windows differently)")
        super().__init__(size, alpha, beta, k)

    def forward(self, x):
        return lrn_op(x, self.size, float(self.alpha), float(self.beta), float(self.k))


ODDNET_INPUT = (1, 3, 37, 53)


class OddNet(nn.Module):
    """Non-square input, asymmetric strides/pads, dilation, grouped conv, odd pools, many op types.

    Two outputs: ``output_0`` class probabilities (Softmax), ``output_1`` a feature vector.
    Fixed spatial size (the FC layer's width is derived from ``input_hw``).
    """

    def __init__(self, input_hw: tuple[int, int] = ODDNET_INPUT[2:], num_classes: int = 10):
        super().__init__()
        # per-channel normalisation constants: Sub / Div broadcasting against (1, 3, 1, 1)
        self.register_buffer("mean", torch.tensor([0.1, -0.2, 0.3]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([1.5, 0.8, 1.2]).view(1, 3, 1, 1))
        # explicit asymmetric F.pad (-> Pad) feeding a conv with padding=0 and stride (2, 1)
        self.conv_a = nn.Conv2d(3, 16, 3, stride=(2, 1), padding=0, bias=False)
        self.bn_a = nn.BatchNorm2d(16)
        self.lrn = LocalResponseNorm(5, alpha=1e-3, beta=0.75, k=2.0)
        # dilation 2 (padding 2 keeps the size)
        self.conv_b = nn.Conv2d(16, 16, 3, padding=(2, 2), dilation=2)
        self.bn_b = nn.BatchNorm2d(16)
        # grouped, non-depthwise: 16 -> 32, groups=4, padding (1, 2), dilation (2, 3)
        self.conv_c = nn.Conv2d(16, 32, 3, padding=(1, 2), dilation=(2, 3), groups=4)
        self.bn_c = nn.BatchNorm2d(32)
        self.conv_d = nn.Conv2d(32, 32, (3, 1), padding=(1, 2))  # non-square kernel; W grows by 4
        self.avg_nopad = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.avg_ceil = nn.AvgPool2d(2, stride=2, ceil_mode=True)
        self.max_odd = nn.MaxPool2d(3, stride=2)  # stride != kernel
        self.gate = nn.Conv2d(32, 32, 1)
        with torch.no_grad():
            h, w = self._trunk(torch.zeros(1, 3, *input_hw)).shape[2:]
        self.matmul_w = nn.Parameter(torch.randn(h, 32, 8) / 32**0.5)  # batched MatMul weight (H, C, K)
        self.fc = nn.Linear(32 * h * w, 24)
        self.fc_out = nn.Linear(24 + 8, num_classes)
        self.scale = nn.Parameter(torch.tensor([0.75]))

    def _trunk(self, x):
        x = (x - self.mean) / self.std
        x = F.pad(x, (1, 2, 0, 1))  # left, right, top, bottom: asymmetric
        x = F.leaky_relu(self.bn_a(self.conv_a(x)), 0.1)
        x = self.lrn(x)
        x = F.relu6(self.bn_b(self.conv_b(x)))
        x = F.hardtanh(self.bn_c(self.conv_c(x)), -0.5, 0.7)
        x = self.conv_d(x)
        x = self.avg_nopad(x)
        x = self.avg_ceil(x)
        x = self.max_odd(x)
        x = x * torch.sigmoid(self.gate(x))
        return x

    def forward(self, x):
        f = self._trunk(x)  # (N, 32, H, W)
        # Reshape from x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape
        a = torch.tanh(self.fc(f.view(f.size(0), -1)))  # Gemm
        # batched MatMul (N, H, W, C) @ (H, C, K) -> (N, H, W, K), then reduce
        t = f.permute(0, 2, 3, 1)  # Transpose
        m = torch.matmul(t, self.matmul_w)
        m = m.mean(dim=(1, 2))  # ReduceMean -> (N, K)
        b = (m * 2.0 + 0.5) - self.scale  # Mul / Add / Sub with constants
        feat = torch.cat([a, b], dim=1)  # Concat
        logits = self.fc_out(feat)
        probs = torch.softmax(logits, dim=1)
        side = f.mean(dim=(2, 3), keepdim=True).squeeze(3).squeeze(2)  # ReduceMean, Squeeze -> (N, 32)
        side = torch.flatten(side.unsqueeze(1), 1)  # Unsqueeze -> (N, 1, 32), Flatten -> (N, 32)
        return probs, side / 3.0  # Div by a constant


# --------------------------------------------------------------------------------------------
# registry


@dataclass(frozen=True)
class ModelSpec:
    name: str
    constructor: Callable[[], nn.Module]
    input_shape: tuple[int, ...]  # default (full-size) input
    correctness_shape: tuple[int, ...]  # small input used by the parity tests
    num_outputs: int = 1
    seed: int = 0


MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        ModelSpec("mobilenet_v2", MobileNetV2, (1, 3, 224, 224), (1, 3, 96, 96), 1, seed=1),
        ModelSpec("resnet18", ResNet18, (1, 3, 224, 224), (1, 3, 96, 96), 1, seed=2),
        ModelSpec("mobilenet_v3_style", MobileNetV3Style, (1, 3, 224, 224), (1, 3, 96, 96), 1, seed=3),
        ModelSpec("squeezenet", SqueezeNet, (1, 3, 224, 224), (1, 3, 64, 64), 1, seed=4),
        ModelSpec("lenet5", LeNet5, (1, 1, 32, 32), (1, 1, 32, 32), 1, seed=5),
        ModelSpec("oddnet", OddNet, ODDNET_INPUT, ODDNET_INPUT, 2, seed=6),
    ]
}


def model_names() -> list[str]:
    return list(MODELS)


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(MODELS)}") from None


def build(name: str) -> nn.Module:
    """Construct ``name`` with deterministic weights and random BN statistics, in eval mode."""
    spec = get_spec(name)
    torch.manual_seed(spec.seed)
    model = spec.constructor()
    _init_weights(model)
    g = torch.Generator().manual_seed(1000 + spec.seed)
    randomize_batchnorm(model, g)
    return model.eval()
