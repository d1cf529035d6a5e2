"""``muarl data pull|list`` and where every command finds benchmark data.

The shared folder (``../shared/data``, which holds the pinned files) serves as the local mirror, and as the source
of an upstream look-alike served over loopback HTTP for the download path: there a checksum mismatch or a cut
download must leave nothing behind. No test touches the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from servers import file_server
from tau_sources import tau_task_source

from muarl.cli import main
from muarl.data.sources import BENCHMARKS
from muarl.data.store import DataNotFound, find_root, inspect
from muarl.domains import load_domain


@pytest.fixture(scope="module")
def mirror() -> Path:
    try:
        root = find_root("tau-bench").resolve()
    except FileNotFoundError as exc:
        pytest.skip(f"no benchmark data mirror ({exc})")
    if not all(inspect(name, root) and inspect(name, root).verified for name in BENCHMARKS):
        pytest.skip(f"{root} does not hold the pinned data of every benchmark")
    return root


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty data directory that pulls write to (and the only one commands look in)."""
    monkeypatch.setenv("MUARL_DATA", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "home"


def data(*args: str):
    return CliRunner().invoke(main, ["data", *args], catch_exceptions=False)


def upstream_files(mirror: Path) -> dict[str, bytes]:
    """What each pinned file's upstream URL path serves, made from the mirror: the kept bytes, except τ-bench's
    task files, which upstream are Python source."""
    served = {}
    for bench in BENCHMARKS.values():
        for pin in bench.files:
            kept = (mirror / bench.name / pin.path).read_bytes()
            body = tau_task_source(json.loads(kept)).encode() if pin.convert == "tau_tasks" else kept
            served[f"{bench.repo}/{pin.commit}/{pin.upstream}"] = body
    return served


def left_behind(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir()) if home.exists() else []


def test_pull_from_a_mirror_then_every_command_finds_it(mirror, home):
    result = data("pull", "tau-bench", "tau2-bench", "--from", str(mirror))
    assert result.exit_code == 0, result.output
    assert "tau-bench: 13 files of sierra-research/tau-bench@59a200c verified" in result.output
    assert left_behind(home) == ["tau-bench", "tau2-bench"]  # no staging folder left
    listed = data("list").output
    assert f"tau-bench: {home / 'tau-bench'} · sierra-research/tau-bench@59a200c, verified · sha256 {BENCHMARKS['tau-bench'].digest[:12]}" in listed
    assert "acebench: not present; run `muarl data pull acebench`" in listed
    assert load_domain("tau2-airline").tasks("test")  # its own files and τ-bench's airline tables, from $MUARL_DATA
    again = data("pull", "tau-bench", "--from", str(mirror))
    assert "already present and verified" in again.output


def test_pull_downloads_the_pinned_files_and_they_load_as_the_mirrors_do(mirror, home):
    with file_server(upstream_files(mirror)) as url:
        result = data("pull", "tau-bench", "tau2-bench", "acebench", "--url", url)
    assert result.exit_code == 0, result.output
    assert all(inspect(name).verified for name in BENCHMARKS)  # τ-bench's tasks converted byte for byte
    assert load_domain("tau-retail", str(home)).tasks("dev") == load_domain("tau-retail", str(mirror)).tasks("dev")
    assert len(load_domain("acebench-normal", str(home)).tasks("atom_bool")) == len(load_domain("acebench-normal", str(mirror)).tasks("atom_bool"))


def test_a_checksum_mismatch_keeps_nothing(mirror, home):
    served = upstream_files(mirror)
    bench = BENCHMARKS["acebench"]
    damaged = f"{bench.repo}/{bench.commit}/data_all/data_en/data_normal_atom_bool.json"
    served[damaged] = served[damaged].replace(b"true", b"True", 1)
    with file_server(served) as url:
        result = data("pull", "acebench", "--url", url)
    assert result.exit_code == 2
    assert "acebench/data_en/data_normal_atom_bool.json: checksum mismatch" in result.output and "nothing was installed" in result.output
    assert left_behind(home) == []
    with pytest.raises(DataNotFound, match="muarl data pull acebench"):
        load_domain("acebench-normal")


def test_a_cut_download_keeps_nothing_and_a_verified_copy_survives_a_failed_refresh(mirror, home):
    served = upstream_files(mirror)
    bench = BENCHMARKS["tau2-bench"]
    cut = f"{bench.repo}/{bench.commit}/data/tau2/domains/retail/db.json"
    with file_server(served, cut={cut}) as url:
        result = data("pull", "tau2-bench", "--url", url)
        assert result.exit_code == 2 and "was cut after" in result.output
        assert left_behind(home) == []
        assert data("pull", "tau2-bench", "--from", str(mirror)).exit_code == 0
        refreshed = data("pull", "tau2-bench", "--url", url, "--force")  # cut again: the verified copy stays
    assert refreshed.exit_code == 2
    assert left_behind(home) == ["tau2-bench"] and inspect("tau2-bench").verified


def test_a_mirror_without_a_file_or_with_a_changed_one_is_refused(mirror, home, tmp_path):
    partial = tmp_path / "partial" / "acebench"
    for pin in BENCHMARKS["acebench"].files[1:]:
        (partial / pin.path).parent.mkdir(parents=True, exist_ok=True)
        (partial / pin.path).write_bytes((mirror / "acebench" / pin.path).read_bytes())
    result = data("pull", "acebench", "--from", str(partial.parent))
    assert result.exit_code == 2 and "acebench/LICENSE.md is not in" in result.output
    (partial / "LICENSE.md").write_text("changed\n")
    assert "acebench/LICENSE.md: checksum mismatch" in data("pull", "acebench", "--from", str(partial.parent)).output
    assert left_behind(home) == []
    listed = data("list", "--data-dir", str(partial.parent)).output
    assert "acebench: " in listed and "not the pinned ACEBench/ACEBench@e6db74b: 1 changed of 35 files" in listed


def test_data_is_found_in_data_dir_then_muarl_data_then_the_cache(tmp_path, monkeypatch):
    for place in ("given", "env", "cache/muarl/data"):
        (tmp_path / place / "acebench").mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("MUARL_DATA", str(tmp_path / "env"))
    assert find_root("acebench", tmp_path / "given") == tmp_path / "given"
    assert find_root("acebench") == tmp_path / "env"
    monkeypatch.setenv("MUARL_DATA", str(tmp_path / "elsewhere"))  # set, but without the benchmark: the cache has it
    assert find_root("acebench") == tmp_path / "cache" / "muarl" / "data"
    monkeypatch.delenv("MUARL_DATA")
    assert find_root("acebench") == tmp_path / "cache" / "muarl" / "data"
    with pytest.raises(DataNotFound, match=r"no tau2-bench data found \(looked in .*cache/muarl/data\): run `muarl data pull tau2-bench`"):
        find_root("tau2-bench")


def test_pull_from_an_upstream_checkout_converts_tau_benchs_task_files(mirror, home, tmp_path):
    checkout = tmp_path / "tau-bench-checkout"
    bench = BENCHMARKS["tau-bench"]
    served = upstream_files(mirror)
    for pin in bench.files:  # the repository's own layout: tau_bench/envs/<domain>/..., task files as Python
        (checkout / pin.upstream).parent.mkdir(parents=True, exist_ok=True)
        (checkout / pin.upstream).write_bytes(served[f"{bench.repo}/{pin.commit}/{pin.upstream}"])
    result = data("pull", "tau-bench", "--from", str(checkout))
    assert result.exit_code == 0, result.output
    assert inspect("tau-bench").verified and left_behind(home) == ["tau-bench"]
