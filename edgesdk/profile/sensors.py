"""What the machine was doing around a measurement: clocks, governors, temperatures, load, and
electrical power while it ran.

Everything comes from Linux sysfs/procfs and everything is optional: a file that is missing or
unreadable (a VM, a container, a locked-down phone) leaves its entry out instead of failing.
``root`` relocates the whole tree so tests can build a fake one. Standard library only: this runs
on boards that have nothing but the base install.
"""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import InputError

# devfreq device names that are GPUs: Mali ("ff9a0000.gpu", "13000000.mali"), Adreno ("kgsl-3d0"),
# Exynos ("11500000.g3d"), PowerVR ("pvrsrvkm").
_GPU_NAME = re.compile(r"gpu|mali|kgsl|g3d|pvr|sgx", re.IGNORECASE)


def read_environment(thermal_paths: Iterable[str | Path] | None = None, *, root: str | Path = "/") -> dict[str, Any]:
    """A snapshot: ``cpu_freq_mhz`` and ``cpu_governor`` per core, ``gpu`` (frequency of the GPU's
    devfreq/kgsl node, or None), ``devfreq`` (every devfreq device's MHz: GPU, memory bus...),
    ``temperatures_c`` by thermal-zone name plus each extra path in ``thermal_paths``, and
    ``load_avg`` (1, 5, 15 min). Keys are always present; what cannot be read is left out."""
    base = Path(root)
    cpus = _cpu_dirs(base)
    return {
        "cpu_freq_mhz": _per_cpu(cpus, "cpufreq/scaling_cur_freq", lambda text: int(text) / 1e3),
        "cpu_governor": _per_cpu(cpus, "cpufreq/scaling_governor", str),
        "gpu": _gpu(base),
        "devfreq": {name: info["freq_mhz"] for name, info in _devfreq(base).items()},
        "temperatures_c": {**_thermal_zones(base), **_extra_temperatures(thermal_paths or (), base)},
        "load_avg": _load_avg(base),
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):  # absent, EACCES, or EINVAL from a sleeping sensor
        return None


def _relocated(path: str | Path, root: Path) -> Path:
    """An absolute path inside ``root`` (the real tree when root is '/')."""
    return root / Path(path).relative_to("/") if Path(path).is_absolute() else Path(path)


def _cpu_dirs(root: Path) -> list[Path]:
    dirs = (root / "sys/devices/system/cpu").glob("cpu[0-9]*")
    return sorted((d for d in dirs if d.name[3:].isdigit()), key=lambda d: int(d.name[3:]))


def _per_cpu(cpus: list[Path], file: str, parse: Callable[[str], Any]) -> dict[str, Any]:
    values = {}
    for cpu in cpus:
        text = _read(cpu / file)
        try:
            if text:
                values[cpu.name] = parse(text)
        except ValueError:
            continue
    return values


def _int_file(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _devfreq(root: Path) -> dict[str, dict[str, Any]]:
    devices = {}
    for device in sorted((root / "sys/class/devfreq").glob("*")):
        hz = _int_file(device / "cur_freq")
        if hz is not None:
            devices[device.name] = {"freq_mhz": hz / 1e6, "governor": _read(device / "governor"),
                                    "source": str(device / "cur_freq")}
    return devices


def _gpu(root: Path) -> dict[str, Any] | None:
    """Adreno's kgsl node first (its devfreq is often not under /sys/class/devfreq), then the
    first devfreq device named like a GPU."""
    kgsl = root / "sys/class/kgsl/kgsl-3d0"
    for file in (kgsl / "devfreq/cur_freq", kgsl / "gpuclk"):
        hz = _int_file(file)
        if hz is not None:
            return {"name": "kgsl-3d0", "freq_mhz": hz / 1e6, "governor": _read(kgsl / "devfreq/governor"),
                    "source": str(file)}
    for name, info in _devfreq(root).items():
        if _GPU_NAME.search(name):
            return {"name": name, **info}
    return None


def _celsius(text: str | None) -> float | None:
    """Thermal zones and hwmon report millidegrees; a few drivers report degrees."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    if value is None:
        return None
    return value / 1000 if abs(value) >= 1000 else value


def _thermal_zones(root: Path) -> dict[str, float]:
    zones = sorted((root / "sys/class/thermal").glob("thermal_zone*"),
                   key=lambda z: int(z.name[12:]) if z.name[12:].isdigit() else 0)
    temperatures: dict[str, float] = {}
    for zone in zones:
        celsius = _celsius(_read(zone / "temp"))
        if celsius is None:
            continue
        name = _read(zone / "type") or zone.name
        temperatures[name if name not in temperatures else f"{name} ({zone.name})"] = celsius
    return temperatures


def _extra_temperatures(paths: Iterable[str | Path], root: Path) -> dict[str, float]:
    temperatures = {}
    for path in paths:
        celsius = _celsius(_read(_relocated(path, root)))
        if celsius is not None:
            temperatures[str(path)] = celsius
    return temperatures


def _load_avg(root: Path) -> list[float] | None:
    text = _read(root / "proc/loadavg")
    try:
        return [float(x) for x in text.split()[:3]] if text else None
    except ValueError:
        return None


# -- power ------------------------------------------------------------------------------------
def battery_watts(current: float, voltage: float) -> float:
    """Power from a power-supply node's ``current_now`` and ``voltage_now``. The kernel ABI says
    µA and µV, but some drivers use mA/mV: the voltage's magnitude (a battery is 1-60 V) tells
    which, and the current is taken in the same unit. Drivers disagree on the sign of a
    discharge current, so it is dropped."""
    volts = abs(voltage)
    scale = 1e-6 if volts > 100_000 else 1e-3 if volts > 100 else 1.0
    return abs(current) * scale * volts * scale


def integrate_energy(samples: list[tuple[float, float]]) -> float:
    """Joules from (seconds, watts) samples, by the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


class PowerSampler:
    """Samples power in a background thread while the ``with`` block runs; one sample is taken
    on entry and one on exit, so the integral covers exactly the block.

    >>> with PowerSampler.from_sysfs("/sys/class/power_supply/battery/current_now",
    ...                              "/sys/class/power_supply/battery/voltage_now") as power:
    ...     run_many_times()
    >>> power.summary(inferences=20)["joules_per_inference"]
    """

    def __init__(self, read_watts: Callable[[], float], *, interval_s: float = 0.01, source: str = "",
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.read_watts = read_watts
        self.interval_s = interval_s
        self.source = source
        self.clock = clock
        self.samples: list[tuple[float, float]] = []
        self.failed_reads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_sysfs(cls, current_path: str | Path, voltage_path: str | Path, **options: Any) -> "PowerSampler":
        """A sampler of ``current_now`` x ``voltage_now`` files (see :func:`battery_watts`). Reads
        them once now: raises InputError naming the file when one is missing or not a number."""
        current, voltage = Path(current_path), Path(voltage_path)

        def read() -> float:
            return battery_watts(float(current.read_text()), float(voltage.read_text()))

        for path in (current, voltage):
            try:
                float(path.read_text())
            except (OSError, ValueError) as exc:
                raise InputError(f"power sensor {path} is not readable as a number "
                                 f"({getattr(exc, 'strerror', None) or exc})") from None
        return cls(read, source=f"{current} x {voltage}", **options)

    def __enter__(self) -> "PowerSampler":
        self.samples, self.failed_reads = [], 0
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="edgesdk-power", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            watts = self.read_watts()
        except (OSError, ValueError):  # a driver busy for a moment: skip, the next sample bridges it
            self.failed_reads += 1
            return
        self.samples.append((self.clock(), watts))

    @property
    def joules(self) -> float:
        return integrate_energy(self.samples)

    @property
    def duration_s(self) -> float:
        return self.samples[-1][0] - self.samples[0][0] if len(self.samples) > 1 else 0.0

    def summary(self, inferences: int) -> dict[str, Any] | None:
        """Energy per inference and the time-weighted mean power; None with fewer than 2 samples."""
        if len(self.samples) < 2 or self.duration_s <= 0:
            return None
        return {"joules_per_inference": self.joules / inferences, "mean_power_w": self.joules / self.duration_s,
                "samples": len(self.samples), "duration_s": self.duration_s, "failed_reads": self.failed_reads,
                "source": self.source}
