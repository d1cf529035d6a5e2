"""How much of the host's CPU other processes used while a GRPO step or a demo stage ran.

The control is matched to GRPO by CPU time, and CPU time is not the same currency on a busy host as on an idle
one: issue 21's run 14 trained its control beside another run, where each SFT step cost 74-108 CPU seconds
against 112-145 on the idle host of the same cold start's earlier control, so the same budget bought 23 steps
instead of 18, and those 5 steps took the control from 68.0% to 52.7% on the held-out tasks. A stage therefore
records the CPUs other processes kept busy while it ran (from the kernel's counters, less its own CPU time), and
the report says when the control ran on a host busier or quieter than GRPO's. Each GRPO step records its own, so
a stage resumed after an interruption is judged by every attempt's steps.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (guest time is inside user)
UNEVEN_LOAD_CPUS = 0.5  # a control whose host was this much busier or quieter than GRPO's is not matched


def busy_seconds(stat: str, ticks_per_second: float) -> float:
    """CPU seconds the whole host has spent busy since boot, from the text of /proc/stat (its aggregate line)."""
    fields = stat.splitlines()[0].split()
    if fields[0] != "cpu":
        raise ValueError(f"/proc/stat does not open with the aggregate cpu line: {stat.splitlines()[0]!r}")
    counts = [int(v) for v in fields[1:]]
    return sum(counts[i] for i in BUSY_FIELDS if i < len(counts)) / ticks_per_second


def others_cpus(host_busy_s: float, own_cpu_s: float, wall_s: float) -> float:
    """The mean number of CPUs processes other than this one kept busy over ``wall_s`` (never below 0: the
    kernel's tick counts and the process's own clock round differently)."""
    return max(0.0, (host_busy_s - own_cpu_s) / wall_s) if wall_s > 0 else 0.0


@dataclass
class HostLoad:
    """Started when a stage starts; ``others()`` when it ends. None where the host has no /proc/stat."""

    busy: float | None
    cpu: float
    wall: float

    @classmethod
    def start(cls) -> HostLoad:
        return cls(_read_busy(), time.process_time(), time.monotonic())

    def others(self) -> float | None:
        busy = _read_busy()
        if busy is None or self.busy is None:
            return None
        return others_cpus(busy - self.busy, time.process_time() - self.cpu, time.monotonic() - self.wall)


def uneven_load(grpo: dict, control: dict) -> tuple[float, float] | None:
    """(GRPO's, the control's) CPUs used by other processes when they differ by more than ``UNEVEN_LOAD_CPUS``;
    None when they do not, or when either stage did not record it."""
    a, b = grpo.get("others_cpus"), control.get("others_cpus")
    if a is None or b is None or abs(a - b) <= UNEVEN_LOAD_CPUS:
        return None
    return a, b


def _read_busy() -> float | None:
    try:
        return busy_seconds(PROC_STAT.read_text(encoding="ascii"), os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None
