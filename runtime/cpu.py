"""What this machine's CPU computes natively, read from ``/proc/cpuinfo`` (empty where it is absent).

The native engine (``dtype`` auto) and the trainer (``--precision auto``) choose bfloat16 only where the
CPU computes it natively: on an AVX2-only CPU a bfloat16 matmul is emulated and ~9x slower than float32
(measured on this project's 2-core CI-class VM), with AVX-512 BF16 a 150k-vocabulary output layer runs
~3x faster than in float32 (2-core AMD EPYC).
"""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
NATIVE_BF16 = {"amx_bf16": "AMX", "avx512_bf16": "AVX-512 BF16"}  # x86 flags; the first found names it


def cpuinfo_fields(cpuinfo: Path = CPUINFO) -> dict[str, str]:
    """Each field's first value in ``cpuinfo``, i.e. the first CPU's (empty where it is absent)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def flags_of(fields: dict[str, str]) -> set[str]:
    return set((fields.get("flags") or fields.get("Features", "")).split())


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """The first CPU's feature flags (empty where ``cpuinfo`` is absent)."""
    return flags_of(cpuinfo_fields(cpuinfo))


def native_bf16(flags: set[str] | None = None) -> str | None:
    """How the CPU computes bfloat16 natively (``AMX``, ``AVX-512 BF16``), or None where it does not."""
    flags = cpu_flags() if flags is None else flags
    return next((name for flag, name in NATIVE_BF16.items() if flag in flags), None)


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The CPU cores this process may use: its affinity mask, lowered by a cgroup v2 CPU quota (a
    container's ``--cpus``), rounded up; at least 1."""
    import math
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = cgroup.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit readable: the affinity mask decides
    return max(1, cores)
