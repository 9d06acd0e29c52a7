"""The opencl backend's runtime: devices, device configs, the program binary cache, io bindings
(zero-copy mapped buffers) and the map-state guard, the activation arena, profiling and the fp16 product numerics."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

import edgesdk
from conftest import assert_close
from edgesdk.errors import BackendUnavailableError, EdgeSDKError
from edgesdk.models import default_model_path
from onnx_builders import single_node_model

pytest.importorskip("pyopencl")
from edgesdk.backends.opencl import MappedBufferError, OpenCLBackend, describe_devices  # noqa: E402
from edgesdk.backends.opencl import config as cl_config  # noqa: E402
from edgesdk.backends.opencl.device import open_device  # noqa: E402
from edgesdk.backends.opencl import programs  # noqa: E402
from edgesdk.backends.opencl.programs import program_cache  # noqa: E402

pytestmark = pytest.mark.skipif(OpenCLBackend.unavailable_reason() is not None,
                                reason=str(OpenCLBackend.unavailable_reason()))
R = np.random.default_rng(3)
DEFAULT = str(default_model_path())


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def backend_for(model, **options) -> OpenCLBackend:
    sess = edgesdk.Session(model, backend="reference")  # for its optimised plan
    return OpenCLBackend(sess.plan, **options)


def reference_out(model, x: np.ndarray, precision: str = "fp32") -> dict[str, np.ndarray]:
    sess = edgesdk.Session(model, backend="reference", precision=precision)
    return sess.run({sess.input_names[0]: x})


# -- devices ------------------------------------------------------------------------------------

def test_describe_devices_has_table_2_1_fields() -> None:
    devices = describe_devices()
    assert devices
    for key in ("global_mem_bytes", "local_mem_bytes", "constant_buffer_bytes", "global_mem_cache_bytes",
                "global_mem_cacheline_bytes", "compute_units", "max_work_group_size", "max_work_item_sizes",
                "host_unified_memory", "fp16", "mem_base_addr_align_bytes", "extensions", "driver_version"):
        assert key in devices[0], key
    assert devices[0]["compute_units"] >= 1 and devices[0]["max_work_group_size"] >= 1
    json.dumps(devices)


def test_device_selection_by_environment(monkeypatch) -> None:
    name = describe_devices()[0]["device"]
    monkeypatch.setenv("EDGESDK_OPENCL_DEVICE", "0")
    assert backend_for(DEFAULT).device.info.name == name
    monkeypatch.setenv("EDGESDK_OPENCL_DEVICE", name[2:7].upper())  # case-insensitive substring
    assert backend_for(DEFAULT).device.info.name == name
    monkeypatch.setenv("EDGESDK_OPENCL_DEVICE", "no-such-device-anywhere")
    with pytest.raises(BackendUnavailableError, match="no OpenCL device matches"):
        edgesdk.Session(DEFAULT, backend="opencl")
    monkeypatch.setenv("EDGESDK_OPENCL_DEVICE", "99")
    with pytest.raises(BackendUnavailableError, match="out of range"):
        edgesdk.Session(DEFAULT, backend="opencl")


def test_device_argument_wins_over_environment(monkeypatch) -> None:
    monkeypatch.setenv("EDGESDK_OPENCL_DEVICE", "no-such-device-anywhere")
    assert backend_for(DEFAULT, device=0).device.info.name == describe_devices()[0]["device"]


# -- device configs -----------------------------------------------------------------------------

def test_every_family_file_is_valid() -> None:
    files = cl_config.family_files()
    families = {p.stem for p in files}
    assert {"adreno-5xx", "adreno-6xx", "adreno-7xx", "mali-bifrost", "mali-valhall", "powervr", "intel-igpu",
            "amd", "nvidia", "pocl-cpu", "generic"} <= families
    for path in files:
        data = cl_config._read(path)
        config = cl_config._build(data, path.name)
        assert set(config.kernels) <= set(cl_config.KERNEL_NAMES)


def _info(**fields):
    base = open_device(0).info
    return base.__class__(**{**base.__dict__, **fields})


@pytest.mark.parametrize("vendor,name,type_,family", [
    ("QUALCOMM", "QUALCOMM Adreno(TM) 540", "GPU", "adreno-5xx"),
    ("QUALCOMM", "QUALCOMM Adreno(TM) 660", "GPU", "adreno-6xx"),
    ("QUALCOMM", "QUALCOMM Adreno(TM) 740", "GPU", "adreno-7xx"),
    ("ARM", "Mali-G76", "GPU", "mali-bifrost"),
    ("ARM", "Mali-G710", "GPU", "mali-valhall"),
    ("Imagination Technologies", "PowerVR B-Series BXM-8-256", "GPU", "powervr"),
    ("Intel(R) Corporation", "Intel(R) UHD Graphics 620", "GPU", "intel-igpu"),
    ("Advanced Micro Devices, Inc.", "gfx1030", "GPU", "amd"),
    ("NVIDIA Corporation", "NVIDIA GeForce RTX 3060", "GPU", "nvidia"),
    ("Some Vendor", "Some Accelerator", "ACCELERATOR", "generic"),
])
def test_family_matching(vendor, name, type_, family) -> None:
    info = _info(vendor=vendor, name=name, type=type_, platform="Some Platform")
    assert cl_config.load_device_config(info).family == family


def test_pocl_matches_its_profile_and_user_file_overrides(tmp_path) -> None:
    info = open_device(0).info
    if "Portable Computing Language" not in info.platform:
        pytest.skip("not PoCL")
    assert cl_config.load_device_config(info).family == "pocl-cpu"
    user = tmp_path / "mine.yaml"
    user.write_text("memory: copy\nkernels:\n  conv_direct: {rows: 2}\n")
    config = cl_config.load_device_config(info, user)
    assert config.memory == "copy" and config.tuning("conv_direct").rows == 2
    assert config.tuning("conv_gemm").rows == cl_config.load_device_config(info).tuning("conv_gemm").rows


@pytest.mark.parametrize("text,match", [("vector_width: 3\n", "vector_width"), ("memory: shared\n", "memory"),
                                        ("weights_storage: image\n", "not implemented"),
                                        ("activation_storage: images\n", "activation_storage"),
                                        ("kernels:\n  conv_fast: {}\n", "unknown kernel"),
                                        ("colour: blue\n", "unknown keys")])
def test_bad_user_config_is_a_typed_one_line_error(tmp_path, text, match) -> None:
    user = tmp_path / "bad.yaml"
    user.write_text(text)
    with pytest.raises(cl_config.DeviceConfigError, match=match) as info:
        cl_config.load_device_config(open_device(0).info, user)
    assert isinstance(info.value, EdgeSDKError) and "\n" not in str(info.value)


@pytest.mark.parametrize("family", ["adreno-6xx", "mali-bifrost", "nvidia", "generic"])
def test_other_families_tunings_compute_the_same(family) -> None:
    """Tile sizes, vector widths and work-group sizes of the GPU profiles, run on this device."""
    model = single_node_model("Conv", (1, 6, 11, 13), {"W": rand(10, 6, 3, 3), "B": rand(10)}, pads=[1, 1, 1, 1],
                              strides=[2, 1])
    x = rand(1, 6, 11, 13)
    backend = backend_for(model, config=cl_config.CONFIG_DIR / f"{family}.yaml")
    assert backend.config.family == family
    got = backend.run({"x": x})
    assert_close(got["y"], reference_out(model, x)["y"], 1e-4)
    pointwise = single_node_model("Conv", (1, 12, 5, 7), {"W": rand(9, 12, 1, 1)})
    x = rand(1, 12, 5, 7)
    got = backend_for(pointwise, config=cl_config.CONFIG_DIR / f"{family}.yaml").run({"x": x})
    assert_close(got["y"], reference_out(pointwise, x)["y"], 1e-4)


# -- program binary cache -----------------------------------------------------------------------

def test_compiler_notes_go_to_the_debug_log(caplog) -> None:
    """NVIDIA's compiler leaves a note in the build log of every kernel, and pyopencl turned each
    into a CompilerWarning on stderr: a build's CompilerWarnings stay quiet (the debug log, on here,
    gets the build log instead)."""
    import warnings

    import pyopencl as cl
    cache = program_cache(open_device())
    built = cl.Program(cache.device.context, "__kernel void k(__global float *p) { p[0] = 1.0f; }").build()

    def noisy_build():
        warnings.warn("Non-empty compiler output encountered", cl.CompilerWarning)
        return built
    with warnings.catch_warnings(record=True) as shown, caplog.at_level("DEBUG", logger="edgesdk.opencl"):
        warnings.simplefilter("always")
        assert cache._quiet("k.cl", noisy_build) is built
    assert not [w for w in shown if issubclass(w.category, cl.CompilerWarning)]


def test_second_session_loads_cached_binaries(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESDK_CACHE_DIR", str(tmp_path))
    cache = program_cache(open_device(None))
    cache.clear_memory()
    before = cache.stats.to_dict()
    first = edgesdk.Session(DEFAULT, backend="opencl")
    built = cache.stats.source_builds - before["source_builds"]
    assert built > 0
    files = sorted((tmp_path / "cl").glob("*.bin"))
    assert len(files) == built and not list((tmp_path / "cl").glob("*.tmp"))
    cache.clear_memory()  # as a new process would: nothing in memory, binaries on disk
    loads = cache.stats.binary_loads
    second = edgesdk.Session(DEFAULT, backend="opencl")
    assert cache.stats.source_builds - before["source_builds"] == built  # no rebuild
    assert cache.stats.binary_loads - loads == built
    x = rand(*first.input_shapes[first.input_names[0]])
    assert np.array_equal(first.run({"input": x})["logits"], second.run({"input": x})["logits"])


def test_damaged_cached_binary_is_rebuilt(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESDK_CACHE_DIR", str(tmp_path))
    cache = program_cache(open_device(None))
    cache.clear_memory()
    edgesdk.Session(DEFAULT, backend="opencl")
    for path in (tmp_path / "cl").glob("*.bin"):
        path.write_bytes(b"not a program binary")
    cache.clear_memory()
    builds = cache.stats.source_builds
    sess = edgesdk.Session(DEFAULT, backend="opencl")
    assert cache.stats.source_builds > builds
    x = rand(*sess.input_shapes["input"])
    assert_close(sess.run({"input": x})["logits"], reference_out(DEFAULT, x)["logits"], 1e-4)


def test_cache_entry_format_detects_every_damage() -> None:
    binary = bytes(range(256)) * 8
    entry = programs.pack_entry(binary)
    assert programs.unpack_entry(entry) == binary
    for cut in range(0, len(entry), 97):  # truncated anywhere, header included
        assert programs.unpack_entry(entry[:cut]) is None
    for at in (0, 9, 20, 60, len(entry) // 2, len(entry) - 1):  # one flipped bit in magic, length, hash, binary
        damaged = bytearray(entry)
        damaged[at] ^= 0x10
        assert programs.unpack_entry(bytes(damaged)) is None
    assert programs.unpack_entry(binary) is None  # a raw binary from an older cache
    assert programs.unpack_entry(entry + b"\0") is None


_DAMAGE_SCRIPT = """
import sys, numpy as np, edgesdk
from pathlib import Path
from edgesdk.backends.opencl.device import open_device
from edgesdk.backends.opencl.programs import program_cache
model, cache_dir = sys.argv[1], Path(sys.argv[2])
cache = program_cache(open_device(None))
x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
expected = edgesdk.Session(model, backend="opencl").run({"input": x})["logits"]
originals = {p: p.read_bytes() for p in cache_dir.glob("*.bin")}
assert originals
for fraction in (0.0, 0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99):  # truncated cache entries
    for path, data in originals.items():
        path.write_bytes(data[:int(len(data) * fraction)])
    cache.clear_memory()
    builds = cache.stats.source_builds
    got = edgesdk.Session(model, backend="opencl").run({"input": x})["logits"]
    assert cache.stats.source_builds - builds == len(originals), fraction
    assert np.array_equal(got, expected), fraction
    assert sorted(p.read_bytes() == originals[p] for p in originals) == [True] * len(originals)
for path, data in originals.items():  # the binary itself damaged, with the stored hash kept
    damaged = bytearray(data)
    for at in range(60, len(damaged), 4099):
        damaged[at] ^= 0xFF
    path.write_bytes(bytes(damaged))
cache.clear_memory()
builds = cache.stats.source_builds
got = edgesdk.Session(model, backend="opencl").run({"input": x})["logits"]
assert cache.stats.source_builds - builds == len(originals)
assert np.array_equal(got, expected)
print("ok", len(originals))
"""


def test_truncated_or_damaged_cache_entries_never_reach_the_driver(tmp_path) -> None:
    """Drivers abort or segfault on damaged binaries: run in a child so a crash fails the test
    instead of killing pytest. Every damaged entry must be rebuilt from source, same outputs."""
    env = dict(os.environ, EDGESDK_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", _DAMAGE_SCRIPT, str(DEFAULT), str(tmp_path / "cl")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.startswith("ok")


# -- zero-copy views and the map-state guard ---------------------------------------------------------

def session_for(model, memory: str = "zero_copy") -> edgesdk.Session:
    """An opencl session in ``memory`` mode, whatever the device family's default is (copy on
    NVIDIA's discrete GPUs: these tests failed there when they relied on the default)."""
    with mock.patch.dict(os.environ, {"EDGESDK_OPENCL_MEMORY": memory}):
        return edgesdk.Session(model, backend="opencl")


@pytest.mark.parametrize("memory", ["zero_copy", "copy"])
def test_io_binding_round_trip(memory: str) -> None:
    sess = session_for(DEFAULT, memory)
    assert sess._impl.zero_copy == (memory == "zero_copy")
    binding = sess.io_binding()
    for _ in range(2):  # a second run on the same binding: the input is mapped again
        x = rand(1, 1, 8, 8)
        binding.input("input")[...] = x
        binding.run()
        out = binding.output("logits")
        assert not out.flags.writeable
        assert_close(out, reference_out(DEFAULT, x)["logits"], 1e-4)
        assert np.array_equal(out, sess.run({"input": x})["logits"])
    binding.close()


def test_io_binding_inputs_stay_between_runs() -> None:
    sess = session_for(DEFAULT)
    x = rand(1, 1, 8, 8)
    with sess.io_binding() as binding:
        binding.input("input")[...] = x
        binding.run()
        first = binding.output("logits").copy()
        binding.run()  # nothing rewritten: the same input, the same output
        assert np.array_equal(binding.output("logits"), first)
        assert np.array_equal(binding.input("input"), x)


def test_io_binding_maps_the_device_buffers() -> None:
    """Zero-copy: the arrays are the mapped buffers (nothing is copied on the host), they are
    unmapped before a kernel runs, and the session's own buffers are never touched."""
    sess = session_for(DEFAULT)
    binding = sess.io_binding()
    view = binding.input("input")
    buffer = binding._buffers["input"]
    assert buffer.mapped and buffer.zero_copy
    view[...] = rand(1, 1, 8, 8)
    binding.run()
    assert not buffer.mapped
    binding.output("logits")
    assert binding._buffers["logits"].mapped
    assert not any(b.mapped for b in sess._impl._io.values())
    binding.close()
    assert not binding._buffers


def test_kernel_never_runs_on_a_mapped_buffer() -> None:
    sess = session_for(DEFAULT)
    binding = sess.io_binding()
    binding.input("input")[...] = rand(1, 1, 8, 8)
    with pytest.raises(MappedBufferError, match="mapped"):  # the binding's run unmaps; this does not
        sess._impl._execute(binding._buffers)
    binding.run()
    binding.output("logits")
    with pytest.raises(MappedBufferError):  # the output is host-owned while mapped, too
        sess._impl._execute(binding._buffers)
    binding.run()


def test_io_binding_and_run_interleave() -> None:
    """A binding's buffers are its own: session runs between its calls change nothing in it."""
    sess = session_for(DEFAULT)
    x, other = rand(1, 1, 8, 8), rand(1, 1, 8, 8)
    binding = sess.io_binding()
    binding.input("input")[...] = x
    other_out = sess.run({"input": other})["logits"]
    binding.run()
    assert np.array_equal(sess.run({"input": other})["logits"], other_out)
    assert np.array_equal(binding.output("logits"), sess.run({"input": x})["logits"])


def test_copy_mode_matches_zero_copy() -> None:
    x = rand(1, 1, 8, 8)
    zero = session_for(DEFAULT).run({"input": x})["logits"]
    copy_sess = session_for(DEFAULT, "copy")
    assert not copy_sess._impl.zero_copy
    assert np.array_equal(copy_sess.run({"input": x})["logits"], zero)
    with copy_sess.io_binding() as binding:
        binding.input("input")[...] = x  # a staging array in copy mode
        binding.run()
        assert np.array_equal(binding.output("logits"), zero)
    with pytest.raises(MappedBufferError, match="copy mode"):
        copy_sess._impl._io["input"].map(np.float32, (64,), write=True)


@pytest.mark.parametrize("how", ["close", "collected"])
def test_arena_sub_buffers_are_freed_newest_first(how: str, monkeypatch, tmp_path) -> None:
    """NVIDIA's driver crashes in clReleaseMemObject when an arena sub-buffer is freed while a
    later one overlapping it is alive (the session tests segfaulted on an H100). Whether the
    session is closed or dropped unclosed and collected, the sub-buffers go newest first. (The
    arena by name: NVIDIA's family now keeps activations in whole buffers.)"""
    from edgesdk.backends.opencl import memory
    freed: list[int] = []
    real = memory.release_cl_object
    monkeypatch.setattr(memory, "release_cl_object", lambda obj: (freed.append(obj.int_ptr), real(obj)))
    (tmp_path / "arena.yaml").write_text("activation_storage: arena\n")
    monkeypatch.setenv("EDGESDK_OPENCL_CONFIG", str(tmp_path / "arena.yaml"))
    sess = session_for(DEFAULT, "copy")
    sess.run({"input": rand(1, 1, 8, 8)})
    created = [b.int_ptr for b in sess._impl._arena._sub_buffers]
    assert len(created) >= 4  # a model whose tensors share arena memory
    if how == "close":
        sess.close()
    else:
        import gc
        del sess
        gc.collect()
    assert freed == created[::-1]


def test_io_binding_rejects_unknown_names() -> None:
    binding = session_for(DEFAULT).io_binding()
    with pytest.raises(edgesdk.errors.InputError):
        binding.input("logits")
    with pytest.raises(edgesdk.errors.InputError):
        binding.output("input")


# -- arena ------------------------------------------------------------------------------------------

def test_arena_reuses_memory_and_profile_reports_peak() -> None:
    from zoo import export_onnx, sample_input
    path = export_onnx("squeezenet", input_shape=(1, 3, 64, 64))
    sess = edgesdk.Session(path, backend="opencl")
    report = sess.profile({"input": sample_input("squeezenet", (1, 3, 64, 64))})
    memory = report.memory
    assert memory.arena_bytes < memory.unplanned_activation_bytes / 2
    assert report.to_dict()["peak_device_memory_bytes"] == memory.arena_bytes + memory.io_bytes + memory.weight_bytes


@pytest.mark.parametrize("memory", ["zero_copy", "copy"])
def test_shared_object_storage_runs_without_sub_buffers(tmp_path, memory: str) -> None:
    """``activation_storage: objects`` (NVIDIA's config: an enqueue cost 29 us there with the
    arena's sub-buffers, 6 us with whole buffers): the same outputs as the arena, bit for bit,
    every activation in a buffer of its own or shared with tensors never alive with it, and a
    profile with device times (kernels on the profiling queue, a fallback between them)."""
    from zoo import export_onnx, sample_input
    path = export_onnx("squeezenet", input_shape=(1, 3, 64, 64))
    user = tmp_path / "objects.yaml"
    user.write_text("activation_storage: objects\n")
    x = sample_input("squeezenet", (1, 3, 64, 64))
    arena = backend_for(path, memory=memory)
    objects = backend_for(path, memory=memory, config=user)
    assert objects.config.activation_storage == "objects" and objects._arena is None
    io = {id(b) for b in objects._io.values()}
    inner = {id(ref.buffer): ref.buffer for ref in objects._tensors.values() if id(ref.buffer) not in io}
    assert inner and all(b.parent is None for b in inner.values())
    assert all(b.parent is None for step in objects._steps for launch in step.launches for b in launch.buffers)
    roots = {objects._root[name] for name in objects._tensors} - set(objects._io)
    assert len(inner) < len(roots) / 2  # tensors never alive together share a buffer
    want = arena.run({"input": x})
    got = objects.run({"input": x})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    report = objects.profile({"input": x})
    assert report.memory.arena_bytes == sum(b.nbytes for b in inner.values())
    assert arena.memory_report.arena_bytes <= report.memory.arena_bytes < report.memory.unplanned_activation_bytes
    assert report.device_ms > 0 and all(r.device_ms > 0 for r in report.ops if r.op.startswith("Conv"))
    for name in want:
        np.testing.assert_array_equal(report.outputs[name], want[name])


def test_profile_with_a_fallback_step_between_kernels(tmp_path) -> None:
    """Profiles run their kernels on the profiling queue and a fallback's reads and writes on the
    run queue: the kernels after the fallback see what it wrote."""
    model = _pad_reflect_between_convs()
    x = rand(1, 3, 7, 9)
    sess = edgesdk.Session(model, backend="opencl")
    assert sess._impl.fallback_reasons
    report = sess.profile({"x": x})
    assert_close(report.outputs["y"], reference_out(model, x)["y"], 1e-4)
    assert_close(sess.run({"x": x})["y"], reference_out(model, x)["y"], 1e-4)


def _pad_reflect_between_convs():
    """conv -> Pad(reflect: no kernel, runs on the reference) -> conv."""
    from onnx import TensorProto, helper, numpy_helper
    w1, w2 = rand(4, 3, 3, 3), rand(5, 4, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Pad", ["a", "pads"], ["b"], mode="reflect"),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")]
    graph = helper.make_graph(nodes, "fallback", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 7, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- profiling ----------------------------------------------------------------------------------------

def test_profile_records_every_op() -> None:
    sess = edgesdk.Session(DEFAULT, backend="opencl")
    x = rand(1, 1, 8, 8)
    report = sess.profile({"input": x})
    assert [r.node for r in report.ops] == [n.name for n in sess.graph.nodes]
    convs = [r for r in report.ops if r.op.startswith("Conv")]
    assert convs and all(r.placement == "opencl" and r.device_ms > 0 and r.kernels for r in convs)
    assert all(r.weight_bytes > 0 and r.output_bytes > 0 for r in convs)
    assert report.device_ms > 0 and report.wall_ms > 0
    assert_close(report.outputs["logits"], reference_out(DEFAULT, x)["logits"], 1e-4)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["placements"]["opencl"] == len(convs) + sum(r.op.startswith(("Gemm", "MaxPool")) for r in report.ops)


# -- fp16 products (native cl_khr_fp16 arithmetic, emulated bit-exactly where it is missing) ------------

def test_half_products_match_numpy_float16_model(tmp_path) -> None:
    """fp16 mode with half products: every product x*w is rounded to half (as native half
    multiplication does), sums stay float. Compared with the numpy model of exactly that."""
    k, nout = 256, 16
    w, b = rand(nout, k), rand(nout)
    model = single_node_model("Gemm", (1, k), {"W": w, "B": b}, transB=1)
    x = rand(1, k)
    user = tmp_path / "emulate.yaml"
    user.write_text("fp16_arithmetic: emulate\n")
    backend = backend_for(model, precision="fp16", config=user)
    got = backend.run({"x": x})["y"].astype(np.float64)
    f16 = lambda a: a.astype(np.float16)  # noqa: E731
    products = (f16(x).astype(np.float32) * f16(w).astype(np.float32)).astype(np.float16)  # half products
    model_out = products.astype(np.float64).sum(axis=1) + f16(b).astype(np.float64)
    storage_only = (f16(x).astype(np.float64) * f16(w).astype(np.float64)).sum(axis=1) + f16(b).astype(np.float64)
    scale = np.abs(model_out).max()
    assert np.abs(got - model_out).max() <= 2e-5 * scale  # float32 sums of the half products
    assert np.abs(storage_only - model_out).max() > 1e-4 * scale  # the model is not vacuous


def test_native_half_used_only_with_cl_khr_fp16() -> None:
    backend = backend_for(DEFAULT, precision="fp16")
    assert backend._half_products() == (1 if backend.device.info.fp16 else 0)
    assert backend_for(DEFAULT, precision="fp32")._half_products() == 0


def test_fp16_mode_stores_activations_as_half() -> None:
    backend = backend_for(DEFAULT, precision="fp16")
    inner = [t for name, t in backend._tensors.items() if name not in ("input", "logits")]
    assert inner and all(t.half for t in inner)
    fp32 = backend_for(DEFAULT)
    assert fp32.memory_report.arena_bytes >= backend.memory_report.arena_bytes
    assert math.isclose(sum(w.nbytes for w in backend.weights) * 2, sum(w.nbytes for w in fp32.weights))


def _add_then_mul(shape: list[int]):
    """x + 0 (stored as half in fp16 mode: the rounding under test) then * 1 (read back)."""
    import onnx
    import onnx.helper as oh
    import onnx.numpy_helper as nh
    nodes = [oh.make_node("Add", ["x", "zero"], ["a"]), oh.make_node("Mul", ["a", "one"], ["y"])]
    graph = oh.make_graph(nodes, "halves", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                          [oh.make_empty_tensor_value_info("y")],
                          [nh.from_array(np.zeros(shape, np.float32), "zero"), nh.from_array(np.ones(shape, np.float32), "one")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return edgesdk.Session(model, backend="opencl", precision="fp16")


def test_every_finite_half_survives_vector_loads() -> None:
    """fp16 storage round trip of all 63,488 finite halves: Add stores them as half, Mul reads
    them back with the vector loads (on PoCL: the integer widening of `half_vectors: scalar`)."""
    values = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    values = values[np.isfinite(values)].astype(np.float32)
    x = values[: values.size // 8 * 8].reshape(1, 1, -1, 8)
    got = _add_then_mul(list(x.shape)).run({"x": x})["y"]
    assert np.array_equal(got, x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("width", [8, 7])  # 7: rows end off the vector width (scalar stores)
def test_float_to_half_stores_round_to_nearest_even(width: int) -> None:
    """Every tie between adjacent halves (and one float ulp either side of it), the overflow
    threshold, subnormals, infinities and nan, stored as half: equal to numpy's float16 rounding."""
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    halves = np.sort(halves[np.isfinite(halves)].astype(np.float32))
    ties = (halves[:-1] + (halves[1:] - halves[:-1]) / 2).astype(np.float32)  # exact in float32
    near = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
    special = np.array([65504, 65519.996, 65520, 65536, 1e30, np.inf, -np.inf, 2.0 ** -24, 2.0 ** -25,
                        2.0 ** -25 * 1.0001, 2.0 ** -26, 1e-40, -1e-40, 0.0, -0.0], np.float32)
    rng = np.random.default_rng(0)
    wide = (rng.standard_normal(4096) * 10.0 ** rng.uniform(-9, 6, 4096)).astype(np.float32)
    values = np.concatenate([near, special, wide])
    values = values[: values.size // width * width]
    x = values.reshape(1, 1, -1, width)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float32)
    got = _add_then_mul(list(x.shape)).run({"x": x})["y"]
    assert np.array_equal(got, expected), (x[got != expected][:5], got[got != expected][:5])
    nan = _add_then_mul([1, 1, 1, 8]).run({"x": np.full((1, 1, 1, 8), np.nan, np.float32)})["y"]
    assert np.isnan(nan).all()
