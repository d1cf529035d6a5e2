"""The verl launch scripts compose against verl's own trainer config, with verl's entry point.

Specification: ``bash examples/verl/<script> --cfg job`` runs ``python -m verl.trainer.main_ppo`` with every
override of the script, and Hydra prints the composed job config (verl's module imports included, so the
installed dependencies can start a run); the config names muarl's advantage estimator, which verl knows
through muarl's plugin entry point, and muarl's rollout manager, which verl can load; the agent-loop YAML
entries are valid muarl world settings.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

if not os.environ.get("CI"):
    pytest.importorskip("verl", reason="the verl test dependencies are not installed (see the README's test command)")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verl"


@pytest.mark.parametrize("script", ["run_qwen3_8b_tau.sh", "smoke_qwen3_0.6b.sh"])
def test_the_recipe_composes_with_verls_entry_point(script, tmp_path):
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.utils.import_utils import load_class_from_fqn

    env = {**os.environ, "DATA": str(tmp_path / "data")}
    done = subprocess.run(["bash", str(EXAMPLES / script), "--cfg", "job"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    job = yaml.safe_load(done.stdout)
    assert job["algorithm"]["adv_estimator"] == "muarl_grpo" and job["trainer"]["use_v1"] is False
    get_adv_estimator_fn("muarl_grpo")
    agent = job["actor_rollout_ref"]["rollout"]["agent"]
    assert load_class_from_fqn(agent["agent_loop_manager_class"], "AgentLoopManager").__name__ == "MuarlAgentLoopManager"
    assert Path(agent["agent_loop_config_path"]).is_file() and agent["default_agent_loop"] == "muarl"


@pytest.mark.parametrize("loops", ["agent_loops.yaml", "agent_loops_smoke.yaml"])
def test_agent_loop_entries_are_valid_world_settings(loops):
    from muarl.rollout.world import WorldConfig

    for entry in yaml.safe_load((EXAMPLES / loops).read_text()):
        assert entry["_target_"] == "muarl.integrations.verl.MuarlAgentLoop"
        settings = {k: v for k, v in entry.items() if k not in ("name", "_target_", "chat_format", "max_new_tokens", "concurrency", "quarantine_user_faults")}
        WorldConfig(**settings)
