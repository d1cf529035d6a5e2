"""The world section (``muarl.rollout.world``) that rollout, synthesis and training share.

Specification: the same YAML world fields mean the same thing in ``RolloutConfig``, ``SynthConfig`` and
``GRPOConfig`` (only the training split differs); ``build_world`` selects tasks (split, ids, difficulty, limit)
and builds the named user, tool backend, reward and loop limits, with a one-line ConfigError for a bad name.
The reward, turn budget and parallel calls a section leaves unset are its domain's (the benchmark's own: τ²'s
criteria, BFCL's 60 turns and parallel calls), for every command, and the resolved section is what a run records.
"""

from __future__ import annotations

import asyncio

import pytest

from domain_data import load_or_skip

from muarl.config import ConfigError
from muarl.models.oracle import DoNothingAgent
from muarl.rollout.backends import LocalToolBackend
from muarl.rollout.config import RolloutConfig
from muarl.rollout.episode import run_episode
from muarl.rollout.world import WorldConfig, build_world
from muarl.synth.generate import SynthConfig
from muarl.train.config import GRPOConfig
from muarl.users.llm import LLMUser
from muarl.users.scripted import ScriptedUser

WORLD_YAML = """\
domain: clinic
split: train
max_difficulty: 1
limit: 5
user: llm:user-model
user_base_url: http://127.0.0.1:9/v1
user_strategy: react
user_temperature: 0.3
user_max_tokens: 64
tools: local
reward: turn_penalised
max_turns: 12
token_budget: 3000
timeout: 5
max_retries: 1
"""


def test_one_world_yaml_reads_the_same_in_rollout_synthesis_and_training(tmp_path):
    path = tmp_path / "world.yaml"
    path.write_text(WORLD_YAML)
    fields = set(WorldConfig.model_fields)
    configs = [RolloutConfig.load(path), SynthConfig.load(path), GRPOConfig.load(path)]
    worlds = [{k: v for k, v in c.model_dump().items() if k in fields} for c in configs]
    assert worlds[0] == worlds[1] == worlds[2]
    assert worlds[0]["user"] == "llm:user-model" and worlds[0]["max_turns"] == 12
    assert (GRPOConfig().split, RolloutConfig().split) == ("train", "test")  # training's own split
    assert GRPOConfig().max_turns is RolloutConfig().max_turns is None  # the domain's, in both


def test_build_world_selects_tasks_and_builds_user_tools_reward_and_limits(tmp_path):
    path = tmp_path / "world.yaml"
    path.write_text(WORLD_YAML)
    world = build_world(RolloutConfig.load(path))
    assert len(world.tasks) == 5 and all(t.split == "train" and (t.difficulty or 0) <= 1 for t in world.tasks)
    assert isinstance(world.user, LLMUser) and world.user.name == "llm:user-model+react"
    assert world.user.sampling == {"temperature": 0.3, "max_tokens": 64}
    assert world.backend_factory is LocalToolBackend
    assert (world.loop.max_turns, world.loop.token_budget) == (12, 3000)
    task = next(t for t in world.tasks if not t.outputs)
    info = world.reward_fn(world.domain, task, world.domain.gold_hash(task), [], 10)
    assert info.success and info.components["turn_penalty"] < 0  # the named reward, not the default
    scripted = build_world(RolloutConfig(task_ids=["clinic-test-0003"]))
    assert isinstance(scripted.user, ScriptedUser) and [t.id for t in scripted.tasks] == ["clinic-test-0003"]


@pytest.mark.parametrize(("field", "value", "says"), [
    ("domain", "atlantis", "unknown domain 'atlantis'"),
    ("split", "nope", "nope"),
    ("task_ids", ["clinic-test-9999"], "no task(s) ['clinic-test-9999']"),
    ("user", "psychic", "unknown user 'psychic'"),
    ("tools", "carrier-pigeon", "unknown tools backend 'carrier-pigeon'"),
    ("reward", "vibes", "unknown reward 'vibes'"),
])
def test_a_bad_world_is_a_config_error_that_names_it(field, value, says):
    with pytest.raises(ConfigError, match=None) as caught:
        build_world(RolloutConfig(**{field: value}))
    assert says in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("config", [RolloutConfig, GRPOConfig])
def test_unset_reward_turns_and_parallel_calls_are_the_domains_own(config):
    world = build_world(config(domain="clinic"))
    assert (world.config.reward, world.loop.max_turns, world.loop.parallel_tool_calls) == ("outcome", 30, False)
    assert type(world.config) is config and world.config.max_turns == 30  # resolved, as a run records it
    bfcl = {"domain": load_or_skip("bfcl-mt-base").name, "split": "test"}  # BFCL has no other split
    if config is GRPOConfig:
        bfcl["allow_test_split"] = True
    world = build_world(config(**bfcl))
    assert (world.config.reward, world.loop.max_turns, world.loop.parallel_tool_calls) == ("outcome", 60, True)
    world = build_world(config(**bfcl, max_turns=5, parallel_tool_calls=False, reward="turn_penalised"))
    assert (world.config.reward, world.loop.max_turns, world.loop.parallel_tool_calls) == ("turn_penalised", 5, False)


@pytest.mark.parametrize("name", ["tau2-retail", "tau2-airline", "tau2-telecom"])
def test_a_tau2_world_scores_with_tau2s_criteria_unless_told_otherwise(name):
    load_or_skip(name)
    world = build_world(RolloutConfig(domain=name))
    assert world.config.reward == "tau2"
    task = world.tasks[0]
    info = world.reward_fn(world.domain, task, world.domain.gold_hash(task), [], 0)
    assert set(info.components) == set(task.metadata["tau2"]["reward_basis"]) and "nl_judged" in info.details  # τ²'s checks
    assert build_world(RolloutConfig(domain=name, reward="outcome")).config.reward == "outcome"  # still there by name


def test_a_telecom_episode_without_the_required_transfer_fails_by_default():
    """The outcome reward passes it (the transfer changes no record); τ²'s ACTION criterion does not."""
    load_or_skip("tau2-telecom")
    world = build_world(RolloutConfig(domain="tau2-telecom", split="train"))
    task = next(t for t in world.tasks if [a.name for a in t.actions] == ["transfer_to_human_agents"])
    episode = asyncio.run(run_episode(world.domain, task, DoNothingAgent(), world.user, config=world.loop, reward_fn=world.reward_fn))
    assert episode.reward.components == {"ENV_ASSERTION": 1.0, "ACTION": 0.0} and episode.reward.reward == 0.0
