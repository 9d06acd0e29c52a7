"""Per-op profiles on every backend (``Backend.profile`` / ``Session.profile``), run profiles
(``profile_session``), sensors read from fake sysfs trees, and energy integration."""
from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from datetime import datetime, timezone

import numpy as np
import pytest

from edgesdk import backends
from edgesdk.backends.base import Backend
from edgesdk.backends.opencl import OpenCLBackend
from edgesdk.backends.reference import ReferenceBackend
from edgesdk.cli import main as cli_main
from edgesdk.errors import BackendUnavailableError, InputError
from edgesdk.models import default_model_path
from edgesdk.profile import PowerSampler, profile_session, random_feeds, read_environment
from edgesdk.profile.sensors import battery_watts, integrate_energy
from edgesdk.runtime.cost import op_label
from edgesdk.runtime.session import Session

LENET = default_model_path()  # 7 nodes on 8x8 inputs; on cpu it also gets a layout conversion and a view
RUN_KEYS = {"schema", "label", "started_at", "duration_s", "warmup", "iters", "model", "host", "backend", "precision",
            "threads", "device", "latency", "ops", "op_profile", "placements", "memory", "environment", "energy",
            "outputs", "notes"}
OP_KEYS = {"node", "op", "placement", "kernels", "note", "timed_on", "output_bytes", "weight_bytes", "scratch_bytes",
           "min_ms", "median_ms", "p90_ms", "device_ms_median", "host_ms_median"}
ENVIRONMENT_KEYS = {"cpu_freq_mhz", "cpu_governor", "gpu", "devfreq", "temperatures_c", "load_avg"}


def plan_nodes(sess: Session) -> list[str]:
    return [step.node.name for step in sess.plan.steps]


# -- Backend.profile ------------------------------------------------------------------------
def test_reference_profile_times_every_plan_node():
    sess = Session(LENET, backend="reference")
    feeds = random_feeds(sess)
    report = sess.profile(feeds)
    graph = sess.graph
    assert [r.node for r in report.ops] == plan_nodes(sess)
    assert [r.op for r in report.ops] == [op_label(step.node) for step in sess.plan.steps]
    assert all(r.placement == "reference" and r.timed_on == "host" and r.device_ms == 0 for r in report.ops)
    assert all(r.host_ms > 0 for r in report.ops)
    assert report.wall_ms >= report.host_ms  # the steps are timed inside the wall time
    first = sess.plan.steps[0].node
    assert report.ops[0].output_bytes == graph.tensors[first.outputs[0]].nbytes
    assert report.ops[0].weight_bytes == sum(graph.tensors[i].nbytes for i in first.inputs[1:])
    assert report.memory.arena_bytes == sess.plan.peak_activation_bytes
    assert report.memory.weight_bytes == sum(t.nbytes for t in graph.constants())
    assert report.memory.source.startswith("estimate")
    out = sess.output_names[0]
    np.testing.assert_array_equal(report.outputs[out], sess.run(feeds)[out])


def test_cpu_profile_times_nodes_and_the_conversions_it_inserted():
    sess = Session(LENET, backend="cpu", threads=1)
    impl = sess._impl
    feeds = random_feeds(sess)
    before = sess.run(feeds)
    report = sess.profile(feeds)
    assert len(report.ops) == len(impl.steps)
    by_step = list(zip(impl.steps, report.ops))
    nodes = [record for step, record in by_step if step.node]
    conversions = [record for step, record in by_step if not step.node]
    assert [r.node for r in nodes] == plan_nodes(sess)
    assert {r.node: r.placement for r in nodes} == impl.placements
    assert conversions, "LeNet's flatten needs an NHWC -> NCHW conversion on the cpu backend"
    assert all(r.placement == "native" and r.op == "nhwc->nchw" and r.node.startswith("layout of ") for r in conversions)
    assert all(r.host_ms == 0 for r in report.ops if r.placement == "view")
    assert all(r.host_ms > 0 and r.timed_on == "host" for r in report.ops if r.placement != "view")
    assert report.placements == {"native": 7, "view": 1}
    assert report.wall_ms >= report.host_ms
    assert report.memory.arena_bytes == impl.arena_bytes and report.memory.peak_bytes > impl.arena_bytes
    assert "1 thread)" in report.device and impl.isa in report.device
    out = sess.output_names[0]
    np.testing.assert_array_equal(report.outputs[out], before[out])
    np.testing.assert_array_equal(sess.run(feeds)[out], before[out])  # profiling left run() as it was


@pytest.mark.skipif(OpenCLBackend.unavailable_reason() is not None, reason="no OpenCL device")
def test_opencl_run_profile_uses_device_time_for_kernels():
    run = profile_session(Session(LENET, backend="opencl"), warmup=1, iters=3)
    kernels = [op for op in run["ops"] if op["kernels"]]
    assert kernels and all(op["timed_on"] == "device" and op["median_ms"] == op["device_ms_median"] for op in kernels)
    assert run["memory"]["source"] == "allocated by the backend"
    assert run["memory"]["memory_mode"] in ("zero_copy", "copy")


class PlainBackend(Backend):
    """A backend that runs but has no profiler (as a third-party one might)."""
    name = "plain"

    @classmethod
    def supported_ops(cls) -> frozenset[str]:
        return ReferenceBackend.supported_ops()

    def __init__(self, plan, **options):
        super().__init__(plan, **options)
        self._reference = ReferenceBackend(plan, **options)

    def run(self, feeds):
        return self._reference.run(feeds)


@pytest.fixture
def plain_backend(monkeypatch):
    monkeypatch.setitem(backends._REGISTRY, "plain", "test_profile:PlainBackend")


def test_backend_without_profiler_says_so(plain_backend, tmp_path, capsys):
    sess = Session(LENET, backend="plain")
    with pytest.raises(BackendUnavailableError, match="backend 'plain' has no per-op profiler") as caught:
        sess.profile(random_feeds(sess))
    assert "\n" not in str(caught.value)
    out = tmp_path / "report"
    assert cli_main(["profile", str(LENET), "--backend", "plain", "--iters", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("edgesdk: error: backend 'plain' has no per-op profiler") and err.count("\n") == 1
    assert not out.exists()  # the empty report folder made for the run is removed again


# -- profile_session ------------------------------------------------------------------------
def test_profile_session_schema():
    sess = Session(LENET, backend="cpu", threads=1)
    calls = []
    run = profile_session(sess, warmup=2, iters=4, progress=lambda *call: calls.append(call))
    assert json.loads(json.dumps(run, allow_nan=False)) == run
    assert set(run) == RUN_KEYS
    assert run["schema"] == "edgesdk.profile/1" and run["label"] == "cpu fp32 1 thread"
    assert datetime.fromisoformat(run["started_at"]).tzinfo == timezone.utc
    assert (run["backend"], run["precision"], run["threads"], run["warmup"], run["iters"]) == ("cpu", "fp32", 1, 2, 4)
    model = run["model"]
    assert (model["name"], model["nodes"], model["inputs"]) == ("digits_lenet", 7, {"input": [1, 1, 8, 8]})
    assert model["params"] > 0 and model["macs"] > 0 and model["file"].endswith("digits_lenet.onnx")
    assert set(run["host"]) == {"hostname", "os", "arch", "cpu", "cores", "python", "edgesdk_version"}
    latency = run["latency"]
    assert set(latency) == {"runs", "median_ms", "min_ms", "p20_ms", "p80_ms", "p90_ms", "mean_ms", "samples_ms"}
    assert latency["runs"] == len(latency["samples_ms"]) == 4
    assert 0 < latency["min_ms"] <= latency["median_ms"] <= latency["p90_ms"]
    assert [op["node"] for op in run["ops"]] == [s.node or s.note for s in sess._impl.steps]
    for op in run["ops"]:
        assert set(op) == OP_KEYS
        assert 0 <= op["min_ms"] <= op["median_ms"] <= op["p90_ms"]
    assert run["placements"] == dict(Counter(op["placement"] for op in run["ops"]))
    assert run["op_profile"]["runs"] == 4 and run["op_profile"]["wall_ms_median"] > 0
    assert run["memory"]["peak_bytes"] > 0 and run["memory"]["source"]
    assert set(run["environment"]) == {"before", "after"}
    assert all(set(env) == ENVIRONMENT_KEYS for env in run["environment"].values())
    assert run["energy"] is None and run["notes"] == []
    assert set(run["outputs"]) == set(sess.output_names)
    output = run["outputs"][sess.output_names[0]]
    assert output["shape"] == [1, 10] and output["dtype"] == "float32" and output["checksum"].startswith("sha256:")
    assert [c[0] for c in calls] == list(range(1, 11)) and {c[1] for c in calls} == {10}
    assert [c[2] for c in calls] == ["warm-up"] * 2 + ["timing"] * 4 + ["per-op"] * 4


def test_profile_session_default_feeds_are_seeded():
    sess = Session(LENET)
    checksums = [profile_session(sess, warmup=0, iters=1)["outputs"] for _ in range(2)]
    assert checksums[0] == checksums[1]
    other = {name: np.ones(shape, np.float32) for name, shape in sess.input_shapes.items()}
    assert profile_session(sess, other, warmup=0, iters=1)["outputs"] != checksums[0]


@pytest.mark.parametrize("options", [{"iters": 0}, {"warmup": -1}, {"power": {"current": "x"}}])
def test_profile_session_rejects_bad_options(options):
    with pytest.raises(InputError):
        profile_session(Session(LENET), **options)


# -- sensors --------------------------------------------------------------------------------
def fake_tree(root, files: dict[str, str]):
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_read_environment_from_a_fake_sysfs_tree(tmp_path):
    cpu, zone, devfreq = "sys/devices/system/cpu", "sys/class/thermal/thermal_zone", "sys/class/devfreq"
    fake_tree(tmp_path, {
        f"{cpu}/cpu0/cpufreq/scaling_cur_freq": "1800000", f"{cpu}/cpu0/cpufreq/scaling_governor": "schedutil",
        f"{cpu}/cpu2/cpufreq/scaling_cur_freq": "600000", f"{cpu}/cpu10/cpufreq/scaling_cur_freq": "2400000",
        f"{cpu}/cpuidle/state": "not a core",
        f"{zone}0/type": "cpu-thermal", f"{zone}0/temp": "45500",
        f"{zone}1/type": "cpu-thermal", f"{zone}1/temp": "47000",  # the same name twice
        f"{zone}2/type": "battery", f"{zone}2/temp": "31",  # a driver that reports degrees
        f"{zone}3/type": "asleep", f"{zone}3/temp": "not a number",
        f"{devfreq}/dmc/cur_freq": "1560000000", f"{devfreq}/ff9a0000.gpu/cur_freq": "800000000",
        f"{devfreq}/ff9a0000.gpu/governor": "simple_ondemand",
        "proc/loadavg": "0.50 0.40 0.30 1/100 1234", "extra/skin_temp": "38250",
    })
    env = read_environment(["/extra/skin_temp", "/extra/missing"], root=tmp_path)
    assert list(env["cpu_freq_mhz"].items()) == [("cpu0", 1800.0), ("cpu2", 600.0), ("cpu10", 2400.0)]
    assert env["cpu_governor"] == {"cpu0": "schedutil"}
    assert env["gpu"] == {"name": "ff9a0000.gpu", "freq_mhz": 800.0, "governor": "simple_ondemand",
                          "source": str(tmp_path / devfreq / "ff9a0000.gpu/cur_freq")}
    assert env["devfreq"] == {"dmc": 1560.0, "ff9a0000.gpu": 800.0}
    assert env["temperatures_c"] == {"cpu-thermal": 45.5, "cpu-thermal (thermal_zone1)": 47.0, "battery": 31.0,
                                     "/extra/skin_temp": 38.25}
    assert env["load_avg"] == [0.5, 0.4, 0.3]


def test_adreno_kgsl_clock_is_the_gpu(tmp_path):
    fake_tree(tmp_path, {"sys/class/kgsl/kgsl-3d0/gpuclk": "585000000", "sys/class/devfreq/dmc/cur_freq": "1"})
    gpu = read_environment(root=tmp_path)["gpu"]
    assert (gpu["name"], gpu["freq_mhz"]) == ("kgsl-3d0", 585.0)


def test_read_environment_without_any_sensor(tmp_path):
    assert read_environment(["/nope"], root=tmp_path) == {"cpu_freq_mhz": {}, "cpu_governor": {}, "gpu": None,
                                                          "devfreq": {}, "temperatures_c": {}, "load_avg": None}


def test_read_environment_on_this_machine():
    env = read_environment()
    assert set(env) == ENVIRONMENT_KEYS
    json.dumps(env, allow_nan=False)


def test_battery_watts_normalises_units_and_sign():
    assert battery_watts(-500_000, 4_000_000) == pytest.approx(2.0)  # µA and µV, discharge negative
    assert battery_watts(500, 4_000) == pytest.approx(2.0)  # mA and mV
    assert battery_watts(0.5, 4.0) == pytest.approx(2.0)  # A and V


def test_integrate_energy_is_the_trapezoid_rule():
    assert integrate_energy([(0.0, 2.0), (1.0, 2.0), (3.0, 2.0)]) == pytest.approx(6.0)
    assert integrate_energy([(0.0, 0.0), (2.0, 4.0)]) == pytest.approx(4.0)  # a ramp is exact
    assert integrate_energy([(0.0, 5.0)]) == 0.0


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the sampler thread took no samples"
        time.sleep(0.001)


def test_power_sampler_with_constant_power_gives_known_joules():
    ticks = itertools.count()  # a fake clock: every sample is 0.5 s after the previous one
    with PowerSampler(lambda: 3.0, interval_s=0.001, clock=lambda: next(ticks) * 0.5) as power:
        wait_until(lambda: len(power.samples) >= 4)
    n = len(power.samples)
    assert power.joules == pytest.approx(3.0 * 0.5 * (n - 1))
    summary = power.summary(inferences=4)
    assert summary["joules_per_inference"] == pytest.approx(3.0 * 0.5 * (n - 1) / 4)
    assert summary["mean_power_w"] == pytest.approx(3.0) and summary["samples"] == n


def test_power_sampler_bridges_failed_reads():
    reads = itertools.count()

    def flaky() -> float:
        if next(reads) % 2:
            raise OSError("busy")
        return 1.0
    with PowerSampler(flaky, interval_s=0.001) as power:
        wait_until(lambda: power.failed_reads >= 2)
    assert power.failed_reads >= 2 and power.summary(1)["mean_power_w"] == pytest.approx(1.0)


def test_profile_session_energy_from_fake_battery_files(tmp_path):
    current, voltage = tmp_path / "current_now", tmp_path / "voltage_now"
    current.write_text("-1000000\n")  # 1 A discharging
    voltage.write_text("4000000\n")  # 4 V: 4 W
    run = profile_session(Session(LENET), warmup=0, iters=3, power={"current": current, "voltage": voltage})
    energy = run["energy"]
    assert energy["mean_power_w"] == pytest.approx(4.0)
    assert energy["joules_per_inference"] == pytest.approx(4.0 * energy["duration_s"] / 3)
    assert energy["samples"] >= 2 and str(current) in energy["source"]
    assert 0 < energy["duration_s"] <= run["duration_s"]


def test_unreadable_power_sensor_is_a_note_not_a_failure(tmp_path):
    run = profile_session(Session(LENET), warmup=0, iters=1,
                          power={"current": tmp_path / "missing", "voltage": tmp_path / "missing"})
    assert run["energy"] is None
    assert len(run["notes"]) == 1 and str(tmp_path / "missing") in run["notes"][0]


def test_collection_imports_and_runs_without_matplotlib():
    """Boards have only the base install: profiling there must not need matplotlib."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "import edgesdk.profile.collect, edgesdk.profile.sensors, edgesdk.profile.report\n"
            "from edgesdk.models import default_model_path\n"
            "from edgesdk.runtime.session import Session\n"
            "run = edgesdk.profile.collect.profile_session(Session(default_model_path()), warmup=0, iters=1)\n"
            "print(run['schema'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "edgesdk.profile/1", proc.stderr
