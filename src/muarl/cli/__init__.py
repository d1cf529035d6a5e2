"""The ``muarl`` command. Each subcommand lives in its own module of this package and is thin: it parses
options, builds objects from the library, and prints; the logic lives in the library.

A user's mistake found anywhere below a command (:class:`muarl.errors.InputError`) ends the command here,
in one place, as a one-line ``Error: ...`` and exit code 2; commands need no try/except of their own for it.
"""

from __future__ import annotations

import importlib

import click

from muarl.errors import InputError

# subcommand name -> "module:function" (a click command), imported only when that command runs
COMMANDS: dict[str, str] = {
    "rollout": "muarl.cli.rollout:rollout",
    "eval": "muarl.cli.evaluate:evaluate",
    "eval-suite": "muarl.cli.eval_suite:eval_suite",
    "tasks": "muarl.cli.tasks:tasks",
    "synth": "muarl.cli.synth:synth",
    "serve-mcp": "muarl.cli.serve_mcp:serve_mcp",
    "replay": "muarl.cli.replay:replay",
    "train": "muarl.cli.train:train",
    "sft": "muarl.cli.train:sft",
    "plot": "muarl.cli.train:plot",
    "export": "muarl.cli.export:export",
    "export-verl": "muarl.cli.export_verl:export_verl",
    "serve": "muarl.cli.serve:serve",
    "demo": "muarl.cli.demo:demo",
    "data": "muarl.cli.data:data",
}


class InputFailure(click.ClickException):
    """An :class:`InputError` as the command line reports it: ``Error: <message>`` on one line, exit code 2."""

    exit_code = 2


class _LazyGroup(click.Group):
    def invoke(self, ctx: click.Context):  # noqa: ANN201 - whatever the subcommand returns
        try:
            return super().invoke(ctx)
        except InputError as exc:
            raise InputFailure(" ".join(str(exc).split())) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="muarl")
def main() -> None:
    """muarl: train tool-using agents with RL while a simulated user talks to them (MUA-RL)."""
