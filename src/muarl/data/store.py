"""Where benchmark data is found, and whether what is there is the pinned data.

Every command looks for a benchmark's folder (``tau-bench/``, ``tau2-bench/``, ``acebench/``) in the directory
given with ``--data-dir`` (and there only), else in ``$MUARL_DATA``, else in the user's cache
(``$XDG_CACHE_HOME/muarl/data``, by default ``~/.cache/muarl/data``). ``muarl data pull`` writes to
``$MUARL_DATA`` when it is set, else to the cache. A directory that is missing the data gives an error that
says which ``muarl data pull`` to run.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from muarl.data.sources import BENCHMARKS, Benchmark, tree_digest
from muarl.errors import InputError

ENV = "MUARL_DATA"


class DataNotFound(InputError, FileNotFoundError):
    """A benchmark's data is not where it is looked for; the message says where it looked and how to get it."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "muarl" / "data"


def data_home() -> Path:
    """Where ``muarl data pull`` keeps what it fetches: ``$MUARL_DATA``, else the cache."""
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else cache_dir()


def search_path(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The directories looked in, in order: ``data_dir`` alone when given, else ``$MUARL_DATA`` and the cache."""
    if data_dir is not None:
        return [Path(data_dir).expanduser()]
    env = os.environ.get(ENV)
    return [Path(env).expanduser(), cache_dir()] if env else [cache_dir()]


def pull_hint(name: str) -> str:
    return f"run `muarl data pull {name}` (or pass --data-dir DIR, or set {ENV}=DIR, a directory holding {name}/)"


def find_root(name: str, data_dir: str | os.PathLike[str] | None = None, *, also: tuple[str, ...] = ()) -> Path:
    """The first directory of :func:`search_path` that holds ``name/`` (or one of the other folder names ``also``,
    e.g. a τ-bench checkout's ``tau_bench/``); a given ``data_dir`` is returned as it is, for the caller to say
    what in it is missing. Else :class:`DataNotFound`, naming the pull to run."""
    if data_dir is not None:
        root = Path(data_dir).expanduser()
        if not root.is_dir():
            raise DataNotFound(f"data directory {str(root)!r} does not exist")
        return root
    roots = search_path()
    for root in roots:
        if any((root / folder).is_dir() for folder in (name, *also)):
            return root
    raise DataNotFound(f"no {name} data found (looked in {', '.join(map(str, roots))}): {pull_hint(name)}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Present:
    """What a directory holds of one benchmark, checked against its pins."""

    benchmark: Benchmark
    folder: Path
    checksums: dict[str, str]  # pinned path -> SHA-256 of the file there (absent files left out)

    @property
    def missing(self) -> list[str]:
        return [f.path for f in self.benchmark.files if f.path not in self.checksums]

    @property
    def changed(self) -> list[str]:
        return [f.path for f in self.benchmark.files if self.checksums.get(f.path, f.sha256) != f.sha256]

    @property
    def digest(self) -> str:
        return tree_digest(self.checksums)

    @property
    def verified(self) -> bool:
        return not self.missing and not self.changed


def inspect(name: str, data_dir: str | os.PathLike[str] | None = None) -> Present | None:
    """The benchmark's files in the first directory of the search path that holds its folder; None if none does."""
    benchmark = BENCHMARKS[name]
    for root in search_path(data_dir):
        folder = root / name
        if folder.is_dir():
            files = {f.path: folder / f.path for f in benchmark.files}
            return Present(benchmark, folder, {p: file_sha256(path) for p, path in files.items() if path.is_file()})
    return None
