"""``muarl.models.allocator``: on glibc the engine asks for large tensors to be mmapped, so memory freed by a
growing KV cache goes back to the OS (measured effect in docs/benchmarks.md: 8.6 GB and rising -> 4.2 GB peak over two minutes)."""

from __future__ import annotations

import platform

import pytest

from muarl.models.allocator import large_tensors_from_mmap


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_accepts_the_mmap_threshold():
    assert large_tensors_from_mmap(1 << 20) is True
    assert large_tensors_from_mmap(1 << 20) is True  # asking again is harmless (and cached)
