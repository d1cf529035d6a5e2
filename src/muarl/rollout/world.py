"""The world an episode runs in, configured once for every command that runs episodes.

``muarl rollout``, ``muarl synth`` and ``muarl train`` all run episodes through the same runner, so they
share one "world" section: which domain and tasks, which simulated user (and its own model and sampling),
where the tools run, how the trajectory is scored and when an episode is cut. :class:`WorldConfig` holds
those fields with one spelling and one meaning; each command's config inherits them (flat, so a YAML
written for a rollout reads the same in training) and adds only what is its own (the agent, trials,
the optimiser...). :func:`build_world` turns the section into live objects the same way for all of them,
so an LLM user, MCP tools or a reward variant that work in one command work in the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field
from typing_extensions import Self

from muarl.config import ConfigError, YamlConfig
from muarl.domains.base import Domain
from muarl.domains.spec import load_domain_spec
from muarl.models.hf_loading import ModelLoadError
from muarl.models.precision import Precision, resolve_precision
from muarl.reward import RewardFn, RewardSpec, reward_from_setting
from muarl.rollout.backends import BackendFactory, LocalToolBackend
from muarl.rollout.episode import LoopConfig
from muarl.types import Task
from muarl.users.base import UserSimulator


class WorldConfig(YamlConfig):
    """Domain, tasks, simulated user, tools, reward and episode limits (shared by rollout, synth and train)."""

    # what a resumed run may change: where and how patiently episodes run, never how each one is made (that
    # would mix two configurations in one run); each command adds its own (rollout: trials, limit, ...)
    RESUMABLE: ClassVar[frozenset[str]] = frozenset({"timeout", "max_retries", "user_base_url", "user_api_key_env"})

    domain: str = Field("clinic", description="domain name (see `muarl tasks list --domains`)")
    data_dir: str | None = Field(None, description="data directory for domains that load data (τ-bench ones)")
    split: str = Field("test", description="task split to run")
    task_ids: list[str] | None = Field(None, description="only these task ids")
    limit: int | None = Field(None, ge=1, description="only the first N tasks of the split (after the other filters)")
    max_difficulty: int | None = Field(None, ge=1, description="only tasks up to this difficulty (domains that grade them)")
    user: str = Field("scripted", description="scripted | scripted:cooperative | scripted:faulty[:RATE[:KINDS]] | llm:MODEL (with user_base_url) | local:PATH (a model in process)")
    user_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the user model")
    user_api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the user endpoint's key")
    user_strategy: str = Field("llm", description="LLM user strategy: llm | react | verify | reflection")
    user_temperature: float | None = Field(None, ge=0, description="user model sampling temperature (server default if unset)")
    user_max_tokens: int | None = Field(None, ge=1, description="user model completion tokens per reply")
    user_precision: Precision = Field("auto", description="local:PATH user: bf16 autocast or fp32 (auto: bf16 where the hardware has it)")
    tools: str = Field("local", description="local | mcp:COMMAND (stdio server) | mcp:URL (streamable HTTP server)")
    reward: str | RewardSpec | None = Field(None, description="reward: a name (outcome | turn_penalised | process | checklist | tau2) or "
                                            "{name: NAME, options: {...}} (docs/training.md); unset: the domain's (tau2 on τ² domains, else outcome)")
    max_turns: int | None = Field(None, ge=1, description="agent turns before an episode is cut; unset: the domain's (BFCL 60, ACEBench's one-response categories 1, else 30)")
    token_budget: int | None = Field(None, ge=1, description="cut an episode when a turn's prompt+completion tokens exceed it")
    parallel_tool_calls: bool | None = Field(None, description="run every tool call of a turn, not just the first; unset: the domain's (BFCL and ACEBench: yes)")
    timeout: float = Field(60.0, gt=0, description="seconds per model request (agent and user servers) and per MCP tool-server request")
    max_retries: int = Field(3, ge=0, description="retries per model request (and per MCP session opening) before the episode is recorded as errored")

    def for_domain(self, domain: Domain) -> Self:
        """This section with the settings left unset filled in from the domain's :class:`EpisodeDefaults` (the
        benchmark's own), as a run records and resumes it."""
        defaults = domain.defaults
        return self.model_copy(update={
            "reward": self.reward or defaults.reward,
            "max_turns": self.max_turns or defaults.max_turns,
            "parallel_tool_calls": defaults.parallel_tool_calls if self.parallel_tool_calls is None else self.parallel_tool_calls,
        })

    def resume_conflicts(self, previous: dict[str, Any]) -> list[str]:
        """The settings that differ from ``previous`` (the recorded config of the run being resumed) and may not,
        each as "name: there -> now" (a nested one by its path, ``model.precision``); a setting the recorded config
        lacks counts as its default."""
        now = self.model_dump(mode="json")
        defaults = type(self).model_construct().model_dump(mode="json")
        return [change for name in now if name not in self.RESUMABLE
                for change in _changes(name, previous.get(name, defaults[name]), now[name])]

    def with_user_precision_resolved(self) -> Self:
        """This section with a ``local:PATH`` user's ``user_precision: auto`` replaced by what this machine runs
        (as training records the policy's); a user served elsewhere keeps the setting, which does not apply to it."""
        if not self.user.startswith("local:"):
            return self
        return self.model_copy(update={"user_precision": resolve_precision(self.user_precision)})

    def loop_config(self) -> LoopConfig:
        """The episode limits; call on a section resolved by :meth:`for_domain`."""
        if self.max_turns is None or self.parallel_tool_calls is None:
            raise ValueError("the world section's domain defaults are not filled in: resolve it with for_domain(domain)")
        return LoopConfig(max_turns=self.max_turns, token_budget=self.token_budget, parallel_tool_calls=self.parallel_tool_calls)


def _changes(name: str, there: Any, now: Any) -> list[str]:
    if isinstance(there, dict) and isinstance(now, dict):
        return [change for key in dict.fromkeys([*there, *now]) for change in _changes(f"{name}.{key}", there.get(key), now.get(key))]
    return [] if there == now else [f"{name}: {there!r} -> {now!r}"]


def select_tasks(cfg: WorldConfig, domain: Domain) -> list[Task]:
    """The tasks the section names: the split, then task ids, difficulty, and the first ``limit``."""
    try:
        tasks = domain.tasks(cfg.split)
    except ValueError as exc:  # an unknown split: the domain's message names the ones it has
        raise ConfigError(str(exc)) from None
    if cfg.task_ids:
        wanted = set(cfg.task_ids)
        tasks = [t for t in tasks if t.id in wanted]
        missing = wanted - {t.id for t in tasks}
        if missing:
            raise ConfigError(f"no task(s) {sorted(missing)} in {cfg.domain}/{cfg.split}; see `muarl tasks list`")
    if cfg.max_difficulty is not None:
        tasks = [t for t in tasks if (t.difficulty or 0) <= cfg.max_difficulty]
    return tasks[: cfg.limit] if cfg.limit else tasks


def make_backend_factory(spec: str, timeout: float, max_retries: int) -> BackendFactory:
    """Where tool calls run: ``local`` (in process) or ``mcp:COMMAND`` / ``mcp:URL`` (an MCP server, whose
    requests get ``timeout`` seconds each and whose session opening is retried ``max_retries`` times)."""
    if spec == "local":
        return LocalToolBackend
    if spec.startswith("mcp:"):
        from muarl.integrations.mcp_client import backend_factory_from_spec

        return backend_factory_from_spec(spec, timeout=timeout, max_retries=max_retries)
    raise ConfigError(f"unknown tools backend {spec!r}: use local, mcp:COMMAND or mcp:URL")


def make_world_user(cfg: WorldConfig, concurrency: int = 8) -> UserSimulator:
    """The section's user simulator, with its own model, endpoint and sampling settings."""
    from muarl.users.factory import make_user

    try:
        return make_user(cfg.user, base_url=cfg.user_base_url, api_key_env=cfg.user_api_key_env, timeout=cfg.timeout,
                         max_retries=cfg.max_retries, concurrency=concurrency, strategy=cfg.user_strategy,
                         precision=cfg.user_precision, temperature=cfg.user_temperature, max_tokens=cfg.user_max_tokens)
    except (ValueError, ModelLoadError) as exc:  # ModelLoadError: a local:PATH that names no model
        raise ConfigError(str(exc)) from None


@dataclass
class World:
    """The live objects of a :class:`WorldConfig`: what ``rollout.runner.run_many`` needs besides the agent, and the
    section they were built from with the domain's defaults filled in (what a run records)."""

    config: WorldConfig
    domain: Domain
    tasks: list[Task]
    user: UserSimulator
    backend_factory: BackendFactory
    reward_fn: RewardFn
    loop: LoopConfig

    async def aclose(self) -> None:
        await self.user.aclose()


def build_world(cfg: WorldConfig, concurrency: int = 8, user: UserSimulator | None = None) -> World:
    """Load the domain, fill in its defaults for what the section leaves unset, select its tasks and build the user,
    tool backend and reward the section names. ``world.config`` is the section resolved, of ``cfg``'s own type.

    ``user``: one already built from this section's user settings, for a caller that runs several worlds with
    one user (``muarl eval-suite``: a local user model is loaded once, not once per category); its owner closes it."""
    try:
        domain = load_domain_spec(cfg.domain, cfg.data_dir)
        cfg = cfg.for_domain(domain)
        reward_fn = reward_from_setting(cfg.reward)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    tasks = select_tasks(cfg, domain)
    return World(cfg, domain, tasks, user or make_world_user(cfg, concurrency), make_backend_factory(cfg.tools, cfg.timeout, cfg.max_retries),
                 reward_fn, cfg.loop_config())
