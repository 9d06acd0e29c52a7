"""The kernel suite on small shapes under the Oclgrind simulator, which checks every memory access
of every work-item: the test fails on any out-of-bounds access, data race or API error it reports.

Run directly (``oclgrind --check-api --data-races python tests/test_opencl_oclgrind.py``) this file
is the suite itself: every kernel family, dense and compressed weights, fp32 and fp16, each
checked against the reference backend. Under Oclgrind the device is the simulator, which the
``generic`` device profile matches (float4 vectors, 16x4 work-groups), so the rounded-up NDRanges
and the guards of every kernel are exercised too.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
# Oclgrind's report lines for the problems we fail on.
PROBLEMS = re.compile(r"Invalid (read|write)|data race|Uninitialized|out of bounds|runtime error|FATAL",
                      re.IGNORECASE)
# pyopencl probes optional device properties while building programs and kernels; Oclgrind (an
# OpenCL 1.2 device) answers CL_INVALID_VALUE and pyopencl carries on. That one API report is
# not ours; any other one fails the test.
PYOPENCL_PROBE = ("Function: clGetDeviceInfo", "Error:    CL_INVALID_VALUE", "For argument 'param_name'")


def oclgrind_problems(log: str) -> list[str]:
    """Oclgrind's reports in ``log`` (one string per report), pyopencl's device probes excepted."""
    reports = [block.strip() for block in re.split(r"\n\s*\n", log) if PROBLEMS.search(block)]
    return [r for r in reports if not ("OpenCL runtime error" in r and all(p in r for p in PYOPENCL_PROBE))]


def run_under_oclgrind(script: str, tmp_path: Path, *args: str) -> tuple[int, str]:
    """``python script args`` under Oclgrind (API and data-race checks on), with a kernel cache of
    its own and no device, profile or memory override: (exit status, stdout + stderr)."""
    env = {**os.environ, "EDGESDK_CACHE_DIR": str(tmp_path), "EDGESDK_OPENCL_DEVICE": "",
           "EDGESDK_OPENCL_CONFIG": "", "EDGESDK_OPENCL_MEMORY": ""}
    proc = subprocess.run(["oclgrind", "--check-api", "--data-races", sys.executable, str(Path(script).resolve()),
                           *args], capture_output=True, text=True, env=env, timeout=900, cwd=TESTS.parent)
    return proc.returncode, proc.stdout + proc.stderr


def assert_clean_under_oclgrind(script: str, tmp_path: Path, *args: str) -> str:
    """Runs a kernel suite under Oclgrind (run_under_oclgrind) and fails on any report, a non-zero
    exit or a run that did not reach the simulator; returns the log (for the suite's case count)."""
    returncode, log = run_under_oclgrind(script, tmp_path, *args)
    problems = oclgrind_problems(log)
    assert not problems, "Oclgrind reported:\n" + "\n\n".join(problems[:10])
    assert returncode == 0, log[-3000:]
    assert "device: Oclgrind" in log, log[-2000:]  # really ran on the simulator
    return log


needs_oclgrind = pytest.mark.skipif(shutil.which("oclgrind") is None,
                                    reason="oclgrind is not installed (apt-get install oclgrind)")


@pytest.mark.oclgrind
@needs_oclgrind
def test_oclgrind_reports_are_detected(tmp_path) -> None:
    """The checker itself: a kernel that writes one element past its buffer and races is caught."""
    _, log = run_under_oclgrind(__file__, tmp_path, "--faulty-kernel")
    problems = oclgrind_problems(log)
    assert any("Invalid write" in p for p in problems), log[-2000:]
    assert any("data race" in p for p in problems), log[-2000:]


@pytest.mark.oclgrind
@needs_oclgrind
def test_kernel_suite_is_clean_under_oclgrind(tmp_path) -> None:
    log = assert_clean_under_oclgrind(__file__, tmp_path)
    ran = re.search(r"suite ok: (\d+) cases", log)
    assert ran and int(ran.group(1)) >= 20, log[-2000:]


# -- the suite (runs inside the oclgrind process) ------------------------------------------------------

def _cases():
    from onnx_builders import single_node_model
    rng = np.random.default_rng(11)

    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    conv = lambda x, w, **a: (single_node_model("Conv", x, {"W": r(*w), "B": r(w[0])}, **a), x)  # noqa: E731
    yield "conv3x3", conv((1, 3, 6, 7), (4, 3, 3, 3), pads=[1, 1, 1, 1])
    yield "conv_stride2", conv((1, 2, 7, 19), (3, 2, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
    yield "conv_dilated_grouped", conv((1, 4, 7, 6), (4, 2, 3, 3), group=2, dilations=[2, 1], pads=[2, 1, 2, 1])
    yield "depthwise", conv((1, 3, 5, 9), (3, 1, 3, 3), group=3, pads=[1, 1, 1, 1])
    yield "pointwise", conv((1, 5, 3, 7), (6, 5, 1, 1))
    # the channel-vectorised and Winograd kernels on wide rows too (forced: see FORCED below)
    yield "conv_oc_wide", conv((1, 3, 7, 19), (7, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
    yield "winograd", conv((1, 3, 5, 7), (7, 3, 3, 3), pads=[1, 1, 0, 0])
    yield "winograd_wide", conv((2, 2, 4, 21), (4, 2, 3, 3), pads=[1, 1, 1, 1])
    yield "gemv", (single_node_model("Gemm", (1, 13), {"W": r(5, 13), "B": r(5)}, transB=1), (1, 13))
    yield "gemm", (single_node_model("Gemm", (3, 6), {"W": r(6, 4), "B": r(3, 4)}), (3, 6))
    yield "matmul", (single_node_model("MatMul", (2, 3, 5), {"B": r(5, 6)}), (2, 3, 5))
    yield "add_same", (single_node_model("Add", (1, 3, 3, 5), {"C": r(1, 3, 3, 5)}), (1, 3, 3, 5))
    yield "mul_broadcast", (single_node_model("Mul", (1, 3, 2, 5), {"C": r(3, 1, 1)}), (1, 3, 2, 5))
    yield "hardswish", (single_node_model("HardSwish", (1, 2, 3, 5)), (1, 2, 3, 5))
    yield "maxpool_ceil", (single_node_model("MaxPool", (1, 2, 7, 7), kernel_shape=[3, 3], strides=[2, 2],
                                             ceil_mode=1), (1, 2, 7, 7))
    yield "avgpool_pads", (single_node_model("AveragePool", (1, 2, 5, 6), kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                           (1, 2, 5, 6))
    yield "global_avg", (single_node_model("GlobalAveragePool", (1, 3, 3, 5)), (1, 3, 3, 5))
    yield "global_max", (single_node_model("GlobalMaxPool", (1, 3, 2, 2)), (1, 3, 2, 2))
    yield "softmax", (single_node_model("Softmax", (2, 37), axis=1), (2, 37))
    yield "softmax_inner", (single_node_model("Softmax", (2, 5, 3), axis=1), (2, 5, 3))
    yield "lrn", (single_node_model("LRN", (1, 6, 2, 3), size=3, alpha=1e-2, beta=0.75, bias=1.0), (1, 6, 2, 3))
    yield "reduce_mean", (single_node_model("ReduceMean", (1, 3, 4, 2), axes=[2, 3], keepdims=0), (1, 3, 4, 2))
    yield "concat", (single_node_model("Concat", (1, 2, 3, 3), {"C": r(1, 3, 3, 3)}, axis=1), (1, 2, 3, 3))
    yield "transpose", (single_node_model("Transpose", (1, 2, 3, 4), perm=[0, 2, 3, 1]), (1, 2, 3, 4))
    yield "pad", (single_node_model("Pad", (1, 2, 3, 3), {"pads": np.array([0, 0, 1, 0, 0, 0, 1, 2], np.int64)}),
                  (1, 2, 3, 3))
    yield "batchnorm", (single_node_model("BatchNormalization", (1, 3, 2, 2),
                                          {"s": r(3), "b": r(3), "m": r(3), "v": np.abs(r(3)) + 1}), (1, 3, 2, 2))


def _compressed_cases():
    from edgesdk.compress.recipe import Recipe
    from edgesdk.pack import compress_model
    from onnx_builders import single_node_model
    rng = np.random.default_rng(12)
    model = single_node_model("Conv", (1, 4, 5, 6), {"W": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
                                                     "B": rng.standard_normal(8).astype(np.float32)},
                              pads=[1, 1, 1, 1])
    for name, recipe in {"clustered": {"cluster_bits": 3, "per_channel": True},
                         "csr": {"prune": 0.7},
                         "csr_clustered": {"prune": 0.7, "cluster_bits": 4},
                         "nnm_shared": {"nnm_rate": 0.5},
                         "nnm_per_input": {"nnm_rate": 0.5, "nnm_mode": "per_input_channel"}}.items():
        graph, _ = compress_model(model, Recipe.from_dict({"default": recipe, "min_params": 1}))
        yield name, (graph, (1, 4, 5, 6))
    yield from _huffman_cases()


def _huffman_cases():
    """conv_huffman (issue 15): sparse layout with codebook indices (128 x 128 blocks) and raw
    values (odd 3 x 5 blocks), dense layout, a 1x1 conv and a Gemm, all with NaN-free inputs."""
    from edgesdk.compress.encode import encode_clustered, encode_huffman, encode_sparse, prune_mask
    from edgesdk.graph import Graph
    from edgesdk.loader import load_model
    rng = np.random.default_rng(13)

    def graph(enc, x_shape, op="Conv", **attrs):
        g = Graph("huffman")
        g.add_input("x", x_shape)
        g.add_encoded("w", enc)
        g.add_constant("b", rng.standard_normal(enc.shape[0]).astype(np.float32))
        if op == "Conv":
            attrs = dict(kernel_shape=tuple(enc.shape[2:]), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0),
                         group=1) | attrs
        else:
            attrs = dict(alpha=1.0, beta=1.0, transA=False, transB=True)
        g.add_node(op, ["x", "w", "b"], ["y"], name="layer", **attrs)
        g.outputs = ["y"]
        return load_model(g), x_shape

    w = rng.standard_normal((9, 4, 3, 3)).astype(np.float32)
    yield "huffman_codebook", graph(encode_huffman(encode_sparse(w, prune_mask(w, 0.7), bits=4)), (1, 4, 5, 6),
                                    pads=(1, 1, 1, 1))
    yield "huffman_raw_3x5", graph(encode_huffman(encode_sparse(w, prune_mask(w, 0.7)), block=(3, 5)), (1, 4, 7, 6),
                                   pads=(1, 0, 0, 1), strides=(2, 1))
    yield "huffman_dense_5x7", graph(encode_huffman(encode_clustered(w, 3), block=(5, 7)), (1, 4, 5, 6),
                                     pads=(1, 1, 1, 1))
    w1 = rng.standard_normal((11, 6, 1, 1)).astype(np.float32)
    yield "huffman_1x1", graph(encode_huffman(encode_sparse(w1, prune_mask(w1, 0.5), bits=3), block=(4, 4)),
                               (2, 6, 3, 5))
    wg = rng.standard_normal((7, 13)).astype(np.float32)
    yield "huffman_gemm", graph(encode_huffman(encode_sparse(wg, prune_mask(wg, 0.6), bits=2), block=(3, 8)), (3, 13),
                                op="Gemm")
    # blocks decoded a strip of rows at a time (local memory shrunk by STRIP_BUDGETS)
    ws = rng.standard_normal((20, 4, 3, 3)).astype(np.float32)
    yield "huffman_strips_raw", graph(encode_huffman(encode_sparse(ws, prune_mask(ws, 0.7)), block=(16, 36)),
                                      (1, 4, 5, 6), pads=(1, 1, 1, 1))
    yield "huffman_strips_dense", graph(encode_huffman(encode_clustered(ws, 3), block=(16, 36)), (1, 4, 5, 6),
                                        pads=(1, 1, 1, 1))


# Device-config overrides for cases whose kernel the generic profile would not pick on so small a
# layer (thresholds down to 1).
FORCED = {"conv_oc_wide": "kernels:\n  conv_oc: {min_k: 1}\n",
          "winograd": "kernels:\n  winograd: {min_k: 1, min_tiles: 1}\n",
          "winograd_wide": "kernels:\n  winograd: {min_k: 1, min_tiles: 1}\n"}

# Local memory (bytes) conv_huffman may use in these cases: less than one block, so it strips.
STRIP_BUDGETS = {"huffman_strips_raw": 2048, "huffman_strips_dense": 1536}


def run_suite() -> int:
    sys.path.insert(0, str(TESTS))
    import edgesdk
    from conftest import assert_close
    from edgesdk.backends.opencl.device import open_device
    print(f"device: {open_device().label}", flush=True)
    import tempfile
    count = 0
    cases = list(_cases()) + list(_compressed_cases())
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), None)
    if only is not None:  # a few cases by name (a quicker check of one kernel)
        cases = [case for case in cases if case[0] in only]
    forced_dir = Path(tempfile.mkdtemp())
    for name, (model, shape) in cases:
        for precision in ("fp32", "fp16"):
            if precision == "fp16" and name not in ("conv3x3", "pointwise", "gemv", "depthwise", "add_same",
                                                    "softmax", "maxpool_ceil", "clustered", "nnm_shared",
                                                    "conv_oc_wide", "winograd", "huffman_raw_3x5", "huffman_gemm"):
                continue
            x = np.random.default_rng(count).standard_normal(shape).astype(np.float32)
            ref = edgesdk.Session(model, backend="reference", precision=precision)
            os.environ["EDGESDK_OPENCL_CONFIG"] = ""
            if name in FORCED:
                (forced_dir / f"{name}.yaml").write_text(FORCED[name])
                os.environ["EDGESDK_OPENCL_CONFIG"] = str(forced_dir / f"{name}.yaml")
            from edgesdk.backends.opencl.lower import conv_huffman
            budget = STRIP_BUDGETS.get(name)
            conv_huffman.local_budget = (lambda info: budget) if budget else (lambda info: int(info.local_mem_bytes))
            sess = edgesdk.Session(model, backend="opencl", precision=precision)
            assert not sess._impl.fallback_reasons, (name, sess._impl.fallback_reasons)
            if budget:
                assert "rows at a time" in sess._impl._steps[0].note, (name, sess._impl._steps[0].note)
            if name in FORCED:
                ran = {launch.name for step in sess._impl._steps for launch in step.launches}
                assert ran & {"conv_oc", "winograd_gemm"}, (name, ran)
            expected, got = ref.run({"x": x}), sess.run({"x": x})
            for out in expected:
                assert_close(got[out], expected[out], 1e-4 if precision == "fp32" else 1e-2, what=f"{name}/{precision}")
            count += 1
            print(f"  {name} {precision}: ok", flush=True)
    print(f"suite ok: {count} cases", flush=True)
    return 0


def run_faulty_kernel() -> int:
    """Writes a[i + 1] = a[i] * 2 over the whole buffer: out of bounds at the end, and racing."""
    import pyopencl as cl
    from edgesdk.backends.opencl.device import open_device
    device = open_device()
    program = cl.Program(device.context, "__kernel void f(__global float* a) "
                         "{ int i = get_global_id(0); a[i + 1] = a[i] * 2.0f; }").build()
    buffer = cl.Buffer(device.context, cl.mem_flags.READ_WRITE, 16 * 4)
    program.f(device.queue, (16,), (16,), buffer)
    device.queue.finish()
    return 0


if __name__ == "__main__":
    sys.exit(run_faulty_kernel() if "--faulty-kernel" in sys.argv else run_suite())
