"""A user's mistake ends a command with one line naming the input and what was expected, exit code 2, and no
traceback: a missing, empty or malformed data directory, an unwritable --out, out-of-range options, a binary
episodes file, a --domain that names no domain factory, and malformed files given to ``muarl replay``.

Through click's runner an uncaught exception is kept in ``result.exception`` (exit code 1); a usage error is
a ``SystemExit(2)`` with the message in the output.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.data.store import find_root
from muarl.domains.spec import load_domain_spec
from muarl.types import Episode

CLINIC_TASK = "clinic-test-0000"


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_line(result) -> str:
    """The error, checked to be a usage error (exit 2, no exception escaped) on exactly one line."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert result.output.rstrip().endswith(errors[0]), result.output  # nothing after it: the message is one line
    return errors[0]


# ---------------------------------------------------------------- data directories


def _retail_copy(tmp_path: Path) -> Path:
    """A data directory holding a copy of the τ-bench retail files, to be damaged one at a time."""
    try:
        source = find_root("tau-bench") / "tau-bench" / "retail"
    except FileNotFoundError as exc:
        pytest.skip(f"τ-bench data not available ({exc})")
    target = tmp_path / "data" / "tau-bench" / "retail"
    shutil.copytree(source, target)
    return tmp_path / "data"


def _damage(root: Path, name: str, text: str) -> Path:
    path = root / "tau-bench" / "retail" / name
    path.write_text(text)
    return path


DAMAGE = [  # file, new content, what the one-line error must say besides the file's name
    ("users.json", '{"a": ', "not a readable JSON file"),
    ("orders.json", "[1, 2]", "expected a JSON object of records, got list"),
    ("products.json", '{"p1": 3}', "record 'p1' is not a JSON object"),
    ("tasks_test.json", '{"not": "a list"}', "expected a JSON list of tasks"),
    ("tasks_test.json", '[{"user_id": "u"}]', "task 0 is not a τ-bench task (missing field 'instruction')"),
    ("tasks_test.json", '[{"user_id": "u", "instruction": 5, "actions": []}]', "task 0 is not a τ-bench task"),
    ("tasks_test.json", '[{"user_id": "u", "instruction": "i", "actions": 7}]', "task 0 is not a τ-bench task"),
]


@pytest.mark.parametrize(("command", "name", "text", "message"), [
    (command, *damage) for command in ("tasks", "rollout", "serve-mcp") for damage in DAMAGE
    if not (command == "serve-mcp" and damage[0].startswith("tasks"))  # serve-mcp serves tools, never reads tasks
])
def test_a_corrupt_data_file_is_named(tmp_path, command, name, text, message):
    data = _retail_copy(tmp_path)
    path = _damage(data, name, text)
    args = {
        "tasks": ["tasks", "list", "--domain", "tau-retail", "--split", "test"],
        "rollout": ["rollout", "--domain", "tau-retail", "--out", tmp_path / "run"],
        "serve-mcp": ["serve-mcp", "--domain", "tau-retail"],
    }[command]
    line = error_line(invoke(*args, "--data-dir", data))
    assert str(path) in line and message in line


@pytest.mark.parametrize("command", ["tasks", "rollout", "serve-mcp"])
@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_missing_or_empty_data_dir_is_a_usage_error(tmp_path, command, kind):
    data = tmp_path / "data"
    if kind == "empty":
        data.mkdir()
    args = {
        "tasks": ["tasks", "list", "--domain", "tau-retail"],
        "rollout": ["rollout", "--domain", "tau-retail", "--out", tmp_path / "run"],
        "serve-mcp": ["serve-mcp", "--domain", "tau-retail"],
    }[command]
    line = error_line(invoke(*args, "--data-dir", data))
    assert str(data) in line


@pytest.mark.parametrize(("args", "message"), [
    (["--domain", "clinic", "--data-dir", "."], "drop --data-dir"),  # the domain's own refusal
    (["--domain", "no_such_world:load"], "cannot import domain module 'no_such_world'"),
    (["--domain", "atlantis"], "unknown domain 'atlantis'"),
])
def test_serve_mcp_reports_a_domain_that_cannot_load_in_one_line(args, message):
    assert message in error_line(invoke("serve-mcp", *args))


def test_a_tau2_db_of_the_wrong_shape_is_named(tmp_path):
    try:
        source = find_root("tau2-bench") / "tau2-bench" / "retail"
    except FileNotFoundError as exc:
        pytest.skip(f"τ²-bench data not available ({exc})")
    target = tmp_path / "tau2-bench" / "retail"
    target.mkdir(parents=True)
    for name in ("tasks.json", "split_tasks.json", "policy.md"):
        shutil.copy(source / name, target / name)
    (target / "db.json").write_text('{"users": {}, "orders": [], "products": {}}')
    line = error_line(invoke("tasks", "list", "--domain", "tau2-retail", "--data-dir", tmp_path))
    assert f"{target / 'db.json'} table 'orders'" in line and "expected a JSON object of records" in line


# ---------------------------------------------------------------- options and outputs


@pytest.mark.parametrize("command", ["rollout", "synth", "sft", "train"])
def test_an_unwritable_out_is_a_usage_error(tmp_path, command):
    blocker = tmp_path / "a-file"  # a directory cannot be made under a file, whoever runs the test (root too)
    blocker.write_text("")
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n")
    args = {
        "rollout": ["rollout", "--limit", "1", "--quiet"],
        "synth": ["synth", "--limit", "1", "--quiet"],
        "sft": ["sft", "--data", chat, "--model", "tiny-random", "--quiet"],
        "train": ["train", "--model", "tiny-random", "--quiet"],
    }[command]
    line = error_line(invoke(*args, "--out", blocker / "run"))
    assert str(blocker / "run") in line and "cannot write" in line


@pytest.mark.parametrize(("option", "value"), [("--k", "0"), ("--bootstrap", "-5")])
def test_eval_option_ranges(tmp_path, option, value):
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("")
    line = error_line(invoke("eval", episodes, option, value))
    assert option in line


def test_a_binary_episodes_file(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(bytes(range(256)) * 8)
    line = error_line(invoke("eval", path))
    assert str(path) in line and "unreadable line" in line


# ---------------------------------------------------------------- --domain names only domains


def test_a_domain_spec_that_names_another_callable_is_refused_without_calling_it(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    module = tmp_path / "not_a_world.py"
    module.write_text(f"def make(data_dir):\n    open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in ("json:loads", "not_a_world:make"):
        line = error_line(invoke("serve-mcp", "--domain", spec))
        assert spec in line and "not a muarl domain factory" in line
    config = tmp_path / "world.yaml"
    config.write_text("domain: not_a_world:make\n")
    for command in ("synth", "rollout"):  # a config file names the domain for every command that runs episodes
        assert "not a muarl domain factory" in error_line(invoke(command, "--config", config, "--out", tmp_path / command))
    assert not marker.exists()


def test_a_domain_spec_is_refused_before_its_module_is_imported(tmp_path, monkeypatch):
    """Importing runs a module's code (``this`` prints the Zen of Python): an unmarked factory is refused from the
    source alone; a marked one (decorated, or wrapped) is imported and loaded."""
    monkeypatch.delitem(sys.modules, "this", raising=False)
    line = error_line(invoke("rollout", "--domain", "this:x", "--out", tmp_path / "zen"))
    assert "'this:x' is not a muarl domain factory" in line and "Zen of Python" not in line
    assert "this" not in sys.modules
    marker = tmp_path / "imported"
    (tmp_path / "side_effect_world.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef make(data_dir):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "not a muarl domain factory" in error_line(invoke("serve-mcp", "--domain", "side_effect_world:make"))
    assert not marker.exists() and "side_effect_world" not in sys.modules
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.delitem(sys.modules, "shop_world", raising=False)
    assert load_domain_spec("shop_world:load").name == "shop"  # @domain_factory in its source: imported, then checked
    (tmp_path / "wrapped_world.py").write_text("from muarl.domains.spec import domain_factory\nfrom shop_world import load as _load\n"
                                               "make = domain_factory(_load)\n")
    assert load_domain_spec("wrapped_world:make").name == "shop"


def test_plugins_register_domains_through_entry_points(tmp_path, monkeypatch):
    """An installed distribution's ``muarl.domains`` entry point is a domain name like the built-in ones."""
    dist = tmp_path / "muarl_toy_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: muarl-toy-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[muarl.domains]\ntoy-booking = booking_world:load\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    listed = invoke("tasks", "list", "--domains")
    assert "toy-booking" in listed.output.split()
    shown = invoke("tasks", "list", "--domain", "toy-booking")
    assert shown.exit_code == 0 and shown.output.startswith("toy"), shown.output


# ---------------------------------------------------------------- muarl replay


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _simulation(**fields) -> str:
    return json.dumps({"simulations": [{"task_id": CLINIC_TASK, "messages": [], **fields}]})


def _message(**fields) -> str:
    return _simulation(messages=[{"role": "assistant", "content": None, **fields}])


MALFORMED = {  # name: file text (every one must give exit 2 with one line naming the file)
    "prose": "this is not json\nnor is this\n",
    "number": "42",
    "string": '"hello"',
    "null": "null",
    "boolean": "true",
    "empty object": "{}",
    "only whitespace": "  \n\n ",
    "simulations not a list": '{"simulations": 5}',
    "simulation not an object": '{"simulations": [5]}',
    "simulation without task_id": '{"simulations": [{"messages": []}]}',
    "simulation without messages": json.dumps({"simulations": [{"task_id": CLINIC_TASK}]}),
    "messages a string": _simulation(messages="hello"),
    "message a number": _simulation(messages=[5]),
    "message without role": _simulation(messages=[{"content": "hi"}]),
    "unknown role": _simulation(messages=[{"role": "wizard", "content": "hi"}]),
    "task_id a list": json.dumps({"simulations": [{"task_id": ["x"], "messages": []}]}),
    "trial a string": _simulation(trial="one"),
    "reward_info a list": _simulation(reward_info=[1]),
    "reward a string": _simulation(reward_info={"reward": "high"}),
    "tool_calls a string": _message(tool_calls="call"),
    "tool call a number": _message(tool_calls=[5]),
    "function a number": _message(tool_calls=[{"id": "c", "function": 5}]),
    "content a number": _simulation(messages=[{"role": "user", "content": 123}]),
    "conversation messages an object": json.dumps({"task_id": CLINIC_TASK, "messages": {"role": "user"}}),
    "conversation without task": json.dumps({"messages": []}),
    "results with task_id an object": json.dumps([{"task_id": {"a": 1}, "traj": []}]),
    "results with traj a number": json.dumps([{"task_id": 0, "traj": 5}]),
    "results with a stray number": json.dumps([{"task_id": CLINIC_TASK, "traj": []}, 7]),
    "bare messages without --task": json.dumps([{"role": "user", "content": "hi"}]),
    "deeply nested list": _deep(100_000),
    "deeply nested message content": '{"task_id": "x", "messages": [{"role": "user", "content": ' + _deep(100_000) + "}]}",
    "episode line of the wrong shape": json.dumps({"task_id": CLINIC_TASK, "termination": "bogus"}),
    "episode lines, one nested deeply": Episode(task_id=CLINIC_TASK, domain="clinic", split="test", termination="user_stop")
    .model_dump_json() + "\n" + _deep(5_000) + "\n",
}


def test_replay_rejects_malformed_files_in_one_line(tmp_path):
    failures = {}
    for i, (name, text) in enumerate(MALFORMED.items()):
        path = tmp_path / f"bad-{i}.json"
        path.write_text(text)
        result = invoke("replay", path, "--domain", "clinic")
        try:
            assert str(path) in error_line(result)
        except AssertionError:
            failures[name] = result.exception if not isinstance(result.exception, SystemExit) else result.output
    assert not failures, failures
    assert len(MALFORMED) >= 30


def test_replay_rejects_a_binary_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    assert str(path) in error_line(invoke("replay", path, "--domain", "clinic"))

