"""Trajectory rewards: MUA-RL's outcome bit, and rewards shaped from the trajectory checks.

Rewards receive the final state's hash rather than the state, so that tools executed elsewhere (an MCP
server) are scored the same way as in-process ones.

- ``outcome`` (:mod:`muarl.reward.outcome`): 1.0 when the final state is the gold one and every required
  output was said; else 0.0. MUA-RL's reward.
- ``turn_penalised``: the outcome minus a cost per agent turn on successes.
- ``process`` (:mod:`muarl.reward.process`): the outcome, gated by the hard process checks the domain names
  (confirmed before write, grounded claims): a success that broke the policy earns a configurable fraction.
- ``checklist`` (:mod:`muarl.reward.checklist`): partial credit over the task's sub-tasks (each gold write
  reached with the right arguments, each required output told from a source), a success worth the most.
- ``tau2``: τ²-bench's criteria (:mod:`muarl.domains.tau.tau2_criteria`).

Every reward also takes the efficiency options of :mod:`muarl.reward.efficiency` (``turn_cost``,
``late_turn_cost``, ``cost_floor``). Every reward function sets ``RewardInfo.success`` to the benchmark's own
verdict, the bit pass^k and training's group statistics read, so shaping the reward never changes what counts
as solved; variants record their terms in ``components``.

A reward is named in a config as a string (``reward: process``) or a mapping with options
(``reward: {name: process, options: {violation_reward: 0.25}}``): :func:`reward_from_setting`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from muarl.config import validation_problems
from muarl.domains.base import Domain, RewardFn
from muarl.reward.checklist import checklist_reward
from muarl.reward.efficiency import COST_OPTIONS, with_costs
from muarl.reward.outcome import normalise_output, outcome_reward, said_to_user
from muarl.reward.process import process_reward
from muarl.types import Message, RewardInfo, Task

__all__ = ["REWARDS", "RewardFn", "RewardSpec", "make_reward", "normalise_output", "outcome_reward", "reward_from_setting",
           "said_to_user", "turn_penalised"]


def turn_penalised(penalty: float = 0.01, floor: float = 0.0) -> RewardFn:
    """Outcome reward minus ``penalty`` per agent turn on successes only (never below ``floor``)."""

    def reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
        info = outcome_reward(domain, task, final_hash, messages, agent_turns)
        if info.reward > 0:
            cost = penalty * agent_turns
            info.components = {"outcome": info.reward, "turn_penalty": -cost}
            info.reward = max(floor, info.reward - cost)
        return info

    return reward


def _tau2(**options: str | float | None) -> RewardFn:
    """τ²-bench's criteria (DB, COMMUNICATE, ACTION, NL assertions); see :mod:`muarl.domains.tau.tau2_criteria`."""
    from muarl.domains.tau.tau2_criteria import tau2_reward

    return tau2_reward(**options)  # type: ignore[arg-type]


REWARDS: dict[str, Callable[..., RewardFn]] = {
    "outcome": lambda: outcome_reward,
    "turn_penalised": turn_penalised,
    "process": process_reward,
    "checklist": checklist_reward,
    "tau2": _tau2,
}


def _option_names(factory: Callable[..., RewardFn]) -> list[str] | None:
    """The options a reward factory takes by name; None when it takes any (``**options``: it checks them itself)."""
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params]


def make_reward(name: str = "outcome", **options: Any) -> RewardFn:
    """A reward by name; options are passed to the variant's factory, except the efficiency costs
    (:data:`~muarl.reward.efficiency.COST_OPTIONS`), which wrap any reward. Unknown names and options are
    refused in one line."""
    try:
        factory = REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; choose one of {sorted(REWARDS)}") from None
    costs = {k: options.pop(k) for k in COST_OPTIONS if k in options}
    known = _option_names(factory)
    unknown = [k for k in options if known is not None and k not in known]
    if unknown:
        raise ValueError(f"reward {name!r} has no option {unknown[0]!r}; its options are {sorted([*(known or []), *COST_OPTIONS])}")
    fn = factory(**options)
    return with_costs(fn, **costs) if costs else fn


class RewardSpec(BaseModel):
    """A reward with options, as a config writes it: ``{name: process, options: {violation_reward: 0.25}}``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="a name of muarl.reward.REWARDS")
    options: dict[str, Any] = Field(default_factory=dict, description="the reward's options (and the efficiency costs)")


def reward_from_setting(setting: str | Mapping[str, Any] | RewardSpec | None) -> RewardFn:
    """The reward a config's ``reward`` names: a name, a ``{name, options}`` mapping or a :class:`RewardSpec`
    (None: ``outcome``)."""
    if setting is None:
        return make_reward()
    if isinstance(setting, str):
        return make_reward(setting)
    try:
        spec = setting if isinstance(setting, RewardSpec) else RewardSpec.model_validate(dict(setting))
    except ValidationError as exc:
        raise ValueError(f"invalid reward {dict(setting)!r}: {validation_problems(exc, 'reward')}") from None
    return make_reward(spec.name, **spec.options)


def parse_reward_flag(text: str) -> str | dict[str, Any]:
    """A command line's ``--reward``: a name, or an inline YAML mapping (``'{name: process, options: {...}}'``)."""
    if not text.lstrip().startswith("{"):
        return text.strip()
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"--reward {text!r} is not a YAML mapping: {' '.join(str(exc).split())}") from None
    if not isinstance(value, dict) or "name" not in value:
        raise ValueError(f"--reward {text!r}: give a name, or a mapping {{name: NAME, options: {{...}}}}")
    return value


def describe_reward(setting: str | Mapping[str, Any] | RewardSpec | None) -> str:
    """A reward setting in one phrase for tables: ``process (violation_reward=0.25)``."""
    if setting is None or isinstance(setting, str):
        return setting or "outcome"
    spec = setting if isinstance(setting, RewardSpec) else RewardSpec.model_validate(dict(setting))
    options = ", ".join(f"{k}={v}" for k, v in spec.options.items())
    return f"{spec.name} ({options})" if options else spec.name
