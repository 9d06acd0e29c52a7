"""Hypothesis strategies for Conv and pooling geometry, shared by the op tests of every backend.

Each draws a whole case (kernel, strides, dilations, pads, sizes) and returns the single-node model
and its input shape, or None when the geometry is one ONNX forbids or leaves no output; a test
skips those (returns), so every backend's fuzz sees the same kind of cases.
"""
from __future__ import annotations

import onnx
from hypothesis import strategies as st

from onnx_builders import single_node_model

Case = tuple[onnx.ModelProto, tuple[int, ...]] | None


@st.composite
def conv_cases(draw, *, batch: int, max_m_per_group: int, min_hw: int, weights) -> Case:
    """Grouped 2-D convolutions; ``weights(*shape)`` makes the test's random arrays."""
    c_per_group, groups = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m_per_group = draw(st.integers(1, max_m_per_group))
    h, w = draw(st.integers(min_hw, 12)), draw(st.integers(min_hw, 12))
    kh, kw, sh, sw = (draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 3)),
                      draw(st.integers(1, 3)))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = draw(st.lists(st.integers(0, 2), min_size=4, max_size=4))
    if (kh - 1) * dh + 1 > h + pads[0] + pads[2] or (kw - 1) * dw + 1 > w + pads[1] + pads[3]:
        return None
    c, m = c_per_group * groups, m_per_group * groups
    model = single_node_model("Conv", (batch, c, h, w), {"W": weights(m, c_per_group, kh, kw), "B": weights(m)},
                              group=groups, strides=[sh, sw], dilations=[dh, dw], pads=pads)
    return model, (batch, c, h, w)


@st.composite
def pool_cases(draw, *, channels: int, **model_options) -> Case:
    """MaxPool (optionally dilated) and AveragePool (either padding count) with ceil mode."""
    op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    h, w = draw(st.integers(3, 11)), draw(st.integers(3, 11))
    kh, kw, sh, sw = (draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 3)),
                      draw(st.integers(1, 3)))
    pads = draw(st.lists(st.integers(0, 1), min_size=4, max_size=4))
    ceil_mode, count_include_pad, dilated = draw(st.integers(0, 1)), draw(st.integers(0, 1)), draw(st.booleans())
    dil = [2, 1] if dilated and op == "MaxPool" else [1, 1]
    if pads[0] >= kh or pads[2] >= kh or pads[1] >= kw or pads[3] >= kw:
        return None  # ONNX requires pads smaller than the kernel
    if (kh - 1) * dil[0] + 1 > h + pads[0] + pads[2] or kw > w + pads[1] + pads[3]:
        return None
    attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=pads, ceil_mode=ceil_mode)
    if op == "AveragePool":
        attrs["count_include_pad"] = count_include_pad
    else:
        attrs["dilations"] = dil
    return single_node_model(op, (1, channels, h, w), **model_options, **attrs), (1, channels, h, w)
