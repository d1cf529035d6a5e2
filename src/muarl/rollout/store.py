"""Run directories on disk: episodes as JSON lines, written as each episode ends, and atomic files.

Crash safety: an episode is one ``write`` of one full line on a file opened for appending, flushed and
fsynced, so a crash loses at most the episode being written; a torn last line is detected and dropped when
the run resumes. Resuming rewrites the file atomically with only finished, non-errored episodes (first one
wins for a key), so a resumed run has neither lost nor duplicated episodes; errored ones are run again.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from muarl.errors import InputError
from muarl.types import Episode

EPISODES_FILE = "episodes.jsonl"
RUN_FILE = "run.json"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a file so that readers see the old content or the new, never a mix (tmp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def writable_dir(path: str | Path) -> Path:
    """``path``, created if needed and checked writable; an InputError naming it when it is not (a bad ``--out``)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        raise InputError(f"cannot write to the output directory {str(path)!r}: {exc.strerror or exc}") from None
    return path


# what metrics do not need: dropped per line by ``read_episodes(outcomes_only=True)``
_TRANSCRIPT = {"messages": [], "tool_executions": [], "timings": [], "tokens": None}


def read_episodes(path: str | Path, outcomes_only: bool = False) -> tuple[list[Episode], int]:
    """Episodes of a JSONL file and the number of unreadable lines (a torn last line after a crash).

    ``outcomes_only`` drops each episode's transcript (messages, tool executions, timings, token trace) as it
    is read, keeping what metrics use, so that scoring a long run does not hold all its conversations in
    memory."""
    episodes, bad = [], 0
    path = Path(path)
    if not path.exists():
        return [], 0
    with path.open("rb") as f:  # bytes: a line that is not UTF-8 is one more unreadable line, not a crash
        for line in f:
            if not line.strip():
                continue
            try:
                episode = Episode.model_validate_json(line)
            except ValueError:
                bad += 1
                continue
            episodes.append(episode.model_copy(update=_TRANSCRIPT) if outcomes_only else episode)
    return episodes, bad


def episodes_path(run_dir_or_file: str | Path) -> Path:
    p = Path(run_dir_or_file)
    return p / EPISODES_FILE if p.is_dir() or not p.suffix else p


def latest_per_key(episodes: Iterable[Episode]) -> list[Episode]:
    """One episode per (task, trial): a finished one if any, else the last errored one."""
    chosen: dict[tuple[str, int], Episode] = {}
    for ep in episodes:
        old = chosen.get(ep.key)
        if old is None or old.errored:
            chosen[ep.key] = ep
    return list(chosen.values())


class EpisodeWriter:
    """Appends episodes to ``path``; ``resume=True`` keeps the finished ones already there."""

    def __init__(self, path: str | Path, resume: bool = False):
        self.path = Path(path)
        self.done: set[tuple[str, int]] = set()
        if self.path.exists() and self.path.stat().st_size > 0:
            if not resume:
                raise FileExistsError(f"{self.path} already has episodes: pass --resume to complete that run, or choose another --out")
            episodes, _ = read_episodes(self.path)
            kept = [ep for ep in latest_per_key(episodes) if not ep.errored]
            atomic_write_text(self.path, "".join(ep.model_dump_json() + "\n" for ep in kept))
            self.done = {ep.key for ep in kept}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, episode: Episode) -> None:
        os.write(self._fd, (episode.model_dump_json() + "\n").encode("utf-8"))
        os.fsync(self._fd)
        if not episode.errored:
            self.done.add(episode.key)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_run_info(run_dir: str | Path, info: dict) -> None:
    # keys in their own order: the tools' schemas must render the prompt training saw (properties keep their order)
    atomic_write_text(writable_dir(run_dir) / RUN_FILE, json.dumps(info, indent=2) + "\n")


def read_run_info(run_dir: str | Path) -> dict | None:
    """The run.json of a run directory, None if there is none; an InputError naming it if it cannot be read."""
    path = Path(run_dir) / RUN_FILE
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_bytes())
    except ValueError as exc:
        raise InputError(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(info, dict):
        raise InputError(f"{path} is not a JSON object")
    return info
