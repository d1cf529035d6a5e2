"""``muarl data pull|list``: fetch the benchmarks' public data (pinned, checksummed) and show what is present."""

from __future__ import annotations

import click

from muarl.data.pull import RAW_URL, dir_reader, install, url_reader
from muarl.data.sources import BENCHMARKS
from muarl.data.store import data_home, inspect, pull_hint


@click.group()
def data() -> None:
    """Benchmark data: τ-bench, τ²-bench and ACEBench, kept in $MUARL_DATA (default: ~/.cache/muarl/data)."""


@data.command()
@click.argument("names", nargs=-1, required=True, type=click.Choice(list(BENCHMARKS)))
@click.option("--from", "source", type=click.Path(file_okay=False), help="Copy from this local mirror or upstream checkout instead of downloading.")
@click.option("--url", default=RAW_URL, show_default=True, help="Download from this mirror of GitHub's raw files (<url>/<repo>/<commit>/<path>).")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per download.")
@click.option("--force", is_flag=True, help="Fetch again even when the pinned data is already present.")
def pull(names: tuple[str, ...], source: str | None, url: str, timeout: float, force: bool) -> None:
    """Fetch each benchmark's files at its pinned upstream commit, verify their checksums, and keep them."""
    home = data_home()
    for name in dict.fromkeys(names):
        bench = BENCHMARKS[name]
        present = inspect(name, home)
        if present is not None and present.verified and not force:
            click.echo(f"{name}: already present and verified in {present.folder} ({bench.version}); --force fetches it again")
            continue
        read = dir_reader(bench, source) if source else url_reader(bench, url, timeout)
        installed = install(bench, read, home)
        click.echo(f"{name}: {len(bench.files)} files of {bench.version} verified, kept in {installed.folder} (sha256 {installed.digest[:12]})")
        if bench.note:
            click.echo(f"  note: {bench.note}")


@data.command(name="list")
@click.option("--data-dir", help="Look only in this directory (default: $MUARL_DATA, then ~/.cache/muarl/data).")
def list_data(data_dir: str | None) -> None:
    """What is present of each benchmark, where, its version and checksum, and whether it matches the pinned files."""
    for name, bench in BENCHMARKS.items():
        present = inspect(name, data_dir)
        if present is None:
            click.echo(f"{name}: not present; {pull_hint(name)}")
            continue
        if present.verified:
            state = f"{bench.version}, verified"
        else:
            problems = [f"{len(present.missing)} missing"] * bool(present.missing) + [f"{len(present.changed)} changed"] * bool(present.changed)
            state = f"not the pinned {bench.version}: {' and '.join(problems)} of {len(bench.files)} files"
        click.echo(f"{name}: {present.folder} · {state} · sha256 {present.digest[:12]}")
