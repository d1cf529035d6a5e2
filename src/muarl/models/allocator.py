"""Keep the CPU engine's memory bounded: large tensors straight from the OS, and back to it when freed.

A decoding KV cache grows by concatenation, so every step frees tensors a little smaller than the ones it
allocates next. glibc's allocator serves such sizes (up to its dynamic mmap threshold, 32 MB) from its heap
and cannot reuse the freed holes for the larger requests that follow, so the process's memory grows without
bound: measured here (bench/rollout_memory.py), 8 concurrent SmolLM2 episodes grew to 8.6 GB in two minutes
(a longer run was OOM-killed at 24 GB), while with the threshold fixed at 1 MB they peaked at 4.2 GB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


@functools.lru_cache(maxsize=None)
def large_tensors_from_mmap(threshold: int = 1 << 20) -> bool:
    """Ask glibc to mmap every allocation of ``threshold`` bytes or more (and so unmap it on free).

    Returns whether it took effect: False off glibc (macOS, musl), where nothing is changed."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False
