from pathlib import Path

import pytest

from muarl.models.precision import cpu_flags, cpu_model, has_fast_bf16, use_bf16

AVX2_ONLY = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t: fpu avx2\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_cpu_flags_reads_the_first_processor(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(AVX2_ONLY)
    assert cpu_flags(info) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_cpu_model_names_the_first_processor_or_nothing(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(AVX2_ONLY)
    assert cpu_model(info) == "AMD EPYC"
    info.write_text(SAPPHIRE)  # no model name line (some VMs, ARM kernels)
    assert cpu_model(info) is None
    assert cpu_model(tmp_path / "missing") is None


def test_bf16_only_where_the_hardware_multiplies_it() -> None:
    assert not has_fast_bf16({"avx2", "fma"}, cuda=False)
    assert has_fast_bf16({"avx2", "avx512_bf16"}, cuda=False)
    assert has_fast_bf16({"amx_bf16"}, cuda=False)
    assert has_fast_bf16(set(), cuda=True)


def test_explicit_settings_win_and_unknown_ones_fail() -> None:
    assert use_bf16("bf16") is True
    assert use_bf16("fp32") is False
    assert use_bf16("auto") == has_fast_bf16()
    with pytest.raises(ValueError, match="unknown precision"):
        use_bf16("fp16")  # type: ignore[arg-type]
