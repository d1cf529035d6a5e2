"""Configuration of ``muarl rollout``: one pydantic model, loadable from YAML, every field documented."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from muarl.config import ConfigError, YamlConfig

__all__ = ["ConfigError", "RolloutConfig"]


class RolloutConfig(YamlConfig):
    # what a resumed run may change: where and how fast episodes are run, and how many, but not how each one
    # is produced (agent, user, domain, seed, ...), which would mix two configurations in one episodes file
    RESUMABLE: ClassVar[frozenset[str]] = frozenset({
        "resume", "out", "concurrency", "timeout", "max_retries", "agent_base_url", "user_base_url",
        "agent_api_key_env", "user_api_key_env", "trials", "limit", "task_ids",
    })

    domain: str = Field("clinic", description="domain name (see `muarl tasks list --domains`)")
    data_dir: str | None = Field(None, description="data directory for domains that load data (τ-bench ones)")
    split: str = Field("test", description="task split to run")
    task_ids: list[str] | None = Field(None, description="only these task ids")
    limit: int | None = Field(None, ge=1, description="only the first N tasks of the split")
    agent: str = Field("oracle", description="oracle | none | openai:MODEL (with agent_base_url)")
    agent_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the agent model")
    agent_api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the agent endpoint's key")
    temperature: float | None = Field(None, ge=0, description="agent sampling temperature (server default if unset)")
    max_tokens: int | None = Field(None, ge=1, description="agent completion tokens per turn")
    user: str = Field("scripted", description="scripted | llm:MODEL (with user_base_url)")
    user_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the user model")
    user_api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the user endpoint's key")
    user_strategy: str = Field("llm", description="LLM user strategy: llm | react | verify | reflection")
    user_temperature: float | None = Field(None, ge=0, description="user model sampling temperature")
    tools: str = Field("local", description="local | mcp:COMMAND (stdio server) | mcp:URL (streamable HTTP server)")
    trials: int = Field(1, ge=1, description="episodes per task (n of pass^k)")
    concurrency: int = Field(8, ge=1, description="episodes running at once")
    max_turns: int = Field(30, ge=1, description="agent turns before an episode is cut")
    token_budget: int | None = Field(None, ge=1, description="cut an episode when a turn's prompt+completion tokens exceed it")
    parallel_tool_calls: bool = Field(False, description="run every tool call of a turn, not just the first")
    reward: str = Field("outcome", description="reward function (outcome | turn_penalised)")
    timeout: float = Field(60.0, gt=0, description="seconds per model request")
    max_retries: int = Field(3, ge=0, description="retries per model request before the episode is recorded as errored")
    seed: int = Field(0, description="run seed; each (task, trial) derives its own")
    out: str = Field("runs/rollout", description="run directory (episodes.jsonl, run.json)")
    resume: bool = Field(False, description="complete an interrupted run in `out` instead of refusing to overwrite it")

    def resume_conflicts(self, previous: dict[str, Any]) -> list[str]:
        """The settings that differ from ``previous`` (the config of the run being resumed, as in its run.json)
        and may not, each as "name: there -> now"; a setting the old run.json lacks counts as its default."""
        now = self.model_dump(mode="json")
        return [
            f"{name}: {previous.get(name, field.default)!r} -> {now[name]!r}"
            for name, field in type(self).model_fields.items()
            if name not in self.RESUMABLE and previous.get(name, field.default) != now[name]
        ]
