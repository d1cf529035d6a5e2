"""The world section (``muarl.rollout.world``) that rollout, synthesis and training share.

Specification: the same YAML world fields mean the same thing in ``RolloutConfig``, ``SynthConfig`` and
``GRPOConfig`` (only the training defaults differ: train split, 8 turns); ``build_world`` selects tasks
(split, ids, difficulty, limit) and builds the named user, tool backend, reward and loop limits, with a
one-line ConfigError for a bad name.
"""

from __future__ import annotations

import pytest

from muarl.config import ConfigError
from muarl.rollout.backends import LocalToolBackend
from muarl.rollout.config import RolloutConfig
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
    assert (GRPOConfig().split, GRPOConfig().max_turns) == ("train", 8)  # training's own defaults
    assert (RolloutConfig().split, RolloutConfig().max_turns) == ("test", 30)


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
