"""Configuration of ``muarl rollout``: the shared world section plus the agent and the run's own settings."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from muarl.config import ConfigError
from muarl.models.precision import Precision
from muarl.rollout.world import WorldConfig

__all__ = ["ConfigError", "RolloutConfig"]


class RolloutConfig(WorldConfig):
    """A rollout: the world (domain, tasks, user, tools, reward, limits), the agent, and how many episodes."""

    # besides the world's: how fast episodes run, the agent's endpoint, and which and how many episodes
    RESUMABLE: ClassVar[frozenset[str]] = WorldConfig.RESUMABLE | {
        "resume", "out", "concurrency", "agent_base_url", "agent_api_key_env", "trials", "limit", "task_ids", "max_difficulty",
    }

    agent: str = Field("oracle", description="oracle | none | openai:MODEL (with agent_base_url) | local:PATH (a model in process, docs/training.md)")
    agent_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the agent model")
    agent_api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the agent endpoint's key")
    temperature: float | None = Field(None, ge=0, description="agent sampling temperature (server default if unset)")
    max_tokens: int | None = Field(None, ge=1, description="agent completion tokens per turn")
    precision: Precision = Field("auto", description="local:PATH agent: bf16 autocast or fp32 (auto: bf16 where the hardware has it)")
    max_context: int | None = Field(None, ge=64, description="local:PATH agent: tokens per episode (default: the model's context length)")
    trials: int = Field(1, ge=1, description="episodes per task (n of pass^k)")
    concurrency: int = Field(8, ge=1, description="episodes running at once")
    seed: int = Field(0, description="run seed; each (task, trial) derives its own")
    out: str = Field("runs/rollout", description="run directory (episodes.jsonl, run.json)")
    resume: bool = Field(False, description="complete an interrupted run in `out` instead of refusing to overwrite it")
