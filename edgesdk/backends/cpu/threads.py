"""How many threads the cpu backend uses when the Session does not say: the physical cores this
process may run on (SMT siblings share one core's SIMD units, so a second thread per core only
adds synchronisation to compute-bound kernels)."""
from __future__ import annotations

import functools
import os
from pathlib import Path


def _allowed_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


@functools.cache
def physical_cores() -> int:
    """Distinct (package, core) pairs among the CPUs in this process's affinity mask; the
    affinity mask's size where the topology is not readable."""
    allowed = _allowed_cpus()
    cores = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return max(1, len(allowed))
        cores.add((package, core))
    return max(1, len(cores))
