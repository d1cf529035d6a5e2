"""Fetching a benchmark's pinned files into the data directory: from the upstream repositories over HTTPS, or
from a local mirror or checkout, every file checked against its pinned SHA-256 before any is kept.

The files are gathered in a hidden staging folder beside the target and the folder is renamed into place only
when all of them have been verified, so a checksum mismatch, a cut download or an interrupt leaves the data
directory as it was: no half-written benchmark is ever found by a command.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from muarl.data.sources import Benchmark, PinnedFile
from muarl.data.store import Present, data_home, inspect
from muarl.errors import InputError

RAW_URL = "https://raw.githubusercontent.com"  # serves <owner>/<repo>/<commit>/<path>

Reader = Callable[[PinnedFile], bytes]  # a pinned file's kept bytes


class PullError(InputError):
    """A pull that could not complete; nothing of it was kept."""


def tau_tasks_json(source: str, filename: str) -> bytes:
    """A τ-bench ``tasks_<split>.py`` as the JSON list muarl keeps (``id`` = position in the file), its literals read
    with :mod:`ast` and never run."""
    from muarl.domains.tau.loader import tasks_from_python

    rows = [{"id": i, "user_id": t["user_id"], "actions": t["actions"], "instruction": t["instruction"], "outputs": t.get("outputs", [])}
            for i, t in enumerate(tasks_from_python(source, filename))]
    return json.dumps(rows, indent=1).encode()


def kept_bytes(pin: PinnedFile, upstream: bytes, where: str) -> bytes:
    """The file as kept, from the upstream file's bytes."""
    if pin.convert == "tau_tasks":
        return tau_tasks_json(upstream.decode("utf-8"), where)
    return upstream


def url_reader(bench: Benchmark, base_url: str = RAW_URL, timeout: float = 60.0) -> Reader:
    """Each file from ``<base_url>/<repo>/<commit>/<upstream path>``."""

    def read(pin: PinnedFile) -> bytes:
        url = f"{base_url.rstrip('/')}/{bench.repo}/{pin.commit}/{pin.upstream}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body = response.read()
        except http.client.IncompleteRead as exc:
            raise PullError(f"the download of {url} was cut after {len(exc.partial)} bytes") from None
        except urllib.error.HTTPError as exc:
            raise PullError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PullError(f"cannot download {url}: {getattr(exc, 'reason', exc)}") from None
        return kept_bytes(pin, body, url)

    return read


def dir_reader(bench: Benchmark, source: str | os.PathLike[str]) -> Reader:
    """Each file from a local directory: a mirror in muarl's layout (a data directory holding ``<name>/``, or the
    benchmark's folder itself), else a checkout of the upstream repository (files at their upstream paths)."""
    root = Path(source).expanduser()
    if not root.is_dir():
        raise PullError(f"--from {str(root)!r} is not a directory")

    def read(pin: PinnedFile) -> bytes:
        for kept in (root / bench.name / pin.path, root / pin.path):
            if kept.is_file():
                return kept.read_bytes()
        checkout = root / pin.upstream
        if checkout.is_file():
            return kept_bytes(pin, checkout.read_bytes(), str(checkout))
        raise PullError(f"{bench.name}/{pin.path} is not in {str(root)!r} (looked for {bench.name}/{pin.path}, {pin.path} "
                        f"and, as in a checkout of {bench.repo}, {pin.upstream})")

    return read


def install(bench: Benchmark, read: Reader, home: Path | None = None) -> Present:
    """Gather every pinned file with ``read``, check its size and SHA-256, and put the set in place as
    ``<home>/<name>/`` (replacing what was there) only once all of them have been verified."""
    home = home or data_home()
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{bench.name}.partial-", dir=home))
    try:
        for pin in bench.files:
            body = read(pin)
            got = hashlib.sha256(body).hexdigest()
            if got != pin.sha256 or len(body) != pin.size:
                raise PullError(f"{bench.name}/{pin.path}: checksum mismatch ({len(body)} bytes, sha256 {got[:16]}…; pinned: "
                                f"{pin.size} bytes, {pin.sha256[:16]}… at {bench.repo}@{pin.commit[:7]}); nothing was installed")
            target = staging / pin.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
        _swap_in(staging, home / bench.name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    present = inspect(bench.name, home)
    assert present is not None and present.verified, "an installed benchmark must verify"
    return present


def _swap_in(staging: Path, target: Path) -> None:
    if not target.exists():
        staging.rename(target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    target.rename(old / target.name)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
