"""Which floating-point precision the local engine computes in, chosen from the hardware.

bfloat16 autocast halves the memory traffic of matmuls, but it only pays where the CPU multiplies bf16
natively (AVX-512-BF16 or AMX). On an AVX2-only CPU every bf16 matmul is emulated: measured about 3x
slower than float32 on SmolLM2-sized matmuls. So the default, ``auto``, asks the hardware: a CUDA device
or a CPU flagged ``avx512_bf16`` / ``amx_bf16`` gets bf16, anything else float32. Weights always stay
float32; the setting only decides the autocast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

Precision = Literal["auto", "bf16", "fp32"]
FAST_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's feature flags (empty where /proc/cpuinfo is not there, e.g. macOS)."""
    flags = _first_processor(cpuinfo, "flags", "Features")
    return set(flags.split()) if flags else set()


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The first processor's model name (``AMD EPYC``, ``Intel(R) Xeon(R) ...``): runs that differ by machine say
    which one they ran on. None where /proc/cpuinfo does not name it."""
    return _first_processor(cpuinfo, "model name") or None


def _first_processor(cpuinfo: Path, *keys: str) -> str | None:
    """The value of the first line of ``cpuinfo`` keyed by one of ``keys`` (the first processor's), stripped;
    None where the file cannot be read or holds no such line."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def has_fast_bf16(flags: set[str] | None = None, cuda: bool | None = None) -> bool:
    """True where bf16 matmuls run natively: a CUDA device, or a CPU with AVX-512-BF16 or AMX."""
    if cuda is None:
        try:
            import torch

            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
    if cuda:
        return True
    flags = cpu_flags() if flags is None else flags
    return any(flag in flags for flag in FAST_BF16_CPU_FLAGS)


def resolve_precision(precision: Precision) -> Precision:
    """``bf16`` or ``fp32``: what ``precision`` runs as on this machine, as a run records it."""
    return "bf16" if use_bf16(precision) else "fp32"


def use_bf16(precision: Precision) -> bool:
    """Whether to run under bf16 autocast for the ``precision`` setting (``auto`` asks the hardware)."""
    if precision == "auto":
        return has_fast_bf16()
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"unknown precision {precision!r}: use auto, bf16 or fp32")
    return precision == "bf16"
