"""MUA-RL on verl: our episode loop as verl's agent loop, run by verl's own worker, with the real verl package.

Specification: a row that ``muarl export-verl`` wrote, read by verl's ``RLHFDataset`` and run by verl's
``AgentLoopWorker.generate_sequences`` (its config composed by Hydra, our loop registered by name through
``agent_loop_config_path``), with the policy sampled by a server manager over our local engine (real
forwards, real sampling and log-probs) and an LLM user served over real HTTP, gives a batch whose ids,
mask and log-probs are exactly what the policy sampled, and whose reward and token sequence are
``muarl rollout``'s for the same task and seed. SFT dialogues load with verl's ``MultiTurnSFTDataset``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

if os.environ.get("CI"):  # in CI verl must be there: a missing install fails instead of skipping
    import verl
else:
    verl = pytest.importorskip("verl", reason="the verl test dependencies are not installed (see the README's test command)")

from click.testing import CliRunner  # noqa: E402

from muarl.cli import main  # noqa: E402
from muarl.domains import DOMAINS  # noqa: E402
from muarl.models.batched_generation import GenerationRequest  # noqa: E402
from muarl.models.local_chat import LocalChatClient  # noqa: E402
from muarl.models.local_spec import export_model, local_policy  # noqa: E402
from muarl.models.openai_server import LocalModelServer  # noqa: E402
from muarl.rollout.store import read_episodes  # noqa: E402
from token_traces import mask_runs  # noqa: E402

WORLD = {"user": "llm:served-user", "user_temperature": 1.0, "user_max_tokens": 6, "max_turns": 3, "timeout": 60, "max_retries": 0}
MAX_NEW_TOKENS = 12


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(DOMAINS, "toy", "booking_world:load")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """The tiny model as a Hugging Face directory with its chat template (what verl's model.path must be)."""
    return export_model("tiny-random", tmp_path_factory.mktemp("verl") / "model")


class LocalServerManager:
    """verl's server-manager interface (``generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput``)
    over our in-process engine, recording every turn it sampled."""

    def __init__(self, client: LocalChatClient):
        self.client = client
        self.sampled: list[tuple[list[int], list[int], list[float]]] = []  # (prompt ids, sampled ids, log-probs)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        import torch
        from verl.workers.rollout.replica import TokenOutput

        policy = self.client.policy_for(temperature=sampling_params["temperature"], top_p=sampling_params["top_p"])
        request = GenerationRequest(cache=policy.kv_cache(), feed=list(prompt_ids), budget=sampling_params["max_tokens"],
                                    generator=torch.Generator().manual_seed(len(self.sampled)))
        done = await policy.generator.generate(request)
        self.sampled.append((list(prompt_ids), done.sampled, done.logprobs))
        return TokenOutput(token_ids=done.sampled, log_probs=done.logprobs if sampling_params.get("logprobs") else None)


def verl_config(model_dir: Path, loops_yaml: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=[
            "actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.rollout.calculate_log_probs=true",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops_yaml}",
            "actor_rollout_ref.rollout.prompt_length=1024", "actor_rollout_ref.rollout.response_length=1024",
            "data.max_prompt_length=1024", *overrides])


def run_row_in_verl(tmp_path: Path, model_dir: Path, world: dict):
    """The first row of ``tmp_path/data/rl_train.parquet`` through verl's AgentLoopWorker, our loop registered
    by name in the agent-loop YAML with ``world`` settings: (the output batch, the server manager)."""
    import yaml
    from verl.experimental.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    loops = tmp_path / "agent_loops.yaml"
    loops.write_text(yaml.safe_dump([{"name": "muarl", "_target_": "muarl.integrations.verl.MuarlAgentLoop",
                                      "chat_format": "chatml-hermes", "max_new_tokens": MAX_NEW_TOKENS, **world}]))
    config = verl_config(model_dir, loops)
    manager = LocalServerManager(LocalChatClient(local_policy(str(model_dir), precision="fp32")))
    worker = AgentLoopWorker(config, manager)
    dataset = RLHFDataset([str(tmp_path / "data" / "rl_train.parquet")], worker.tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[0]]))
    return asyncio.run(worker.generate_sequences(batch)), manager


def test_a_row_runs_through_verls_worker_as_muarl_rollout_runs_it(tmp_path, model_dir):
    import yaml

    runner = CliRunner()
    exported = runner.invoke(main, ["export-verl", "--domain", "toy", "--split", "train", "--seed", "7", "--out", str(tmp_path / "data")])
    assert exported.exit_code == 0, exported.output
    user_model = LocalChatClient(local_policy("tiny-random", precision="fp32", max_new_tokens=6))
    with LocalModelServer(user_model) as server:
        # a reward with options, named in the agent-loop YAML entry as in any world section
        world = {**WORLD, "user_base_url": server.base_url, "reward": {"name": "checklist", "options": {"partial_weight": 0.5, "turn_cost": 0.01}}}
        # muarl's own rollout of the same task and seed, greedy policy
        (tmp_path / "rollout.yaml").write_text(yaml.safe_dump({**world, "domain": "toy", "split": "train", "seed": 7,
                                                                "agent": f"local:{model_dir}", "temperature": 0.0, "precision": "fp32",
                                                                "max_tokens": MAX_NEW_TOKENS}))
        rolled = runner.invoke(main, ["rollout", "--config", str(tmp_path / "rollout.yaml"), "--out", str(tmp_path / "run"), "--quiet"])
        assert rolled.exit_code == 0, rolled.output
        (ours,), _ = read_episodes(tmp_path / "run" / "episodes.jsonl")
        out, manager = run_row_in_verl(tmp_path, model_dir, world)

    assert not ours.errored and ours.agent_turns >= 2 and ours.user_usage.requests >= 2  # several turns; the user spoke over HTTP
    prompts, responses = out.batch["prompts"][0], out.batch["responses"][0]
    attention, mask = out.batch["attention_mask"][0], out.batch["response_mask"][0]
    n_prompt = int(attention[: prompts.numel()].sum())
    n_response = int(attention[prompts.numel():].sum())
    prompt_ids = prompts[prompts.numel() - n_prompt:].tolist()
    response_ids, response_mask = responses[:n_response].tolist(), mask[:n_response].tolist()
    logprobs = out.batch["rollout_log_probs"][0][:n_response].tolist()
    # the policy's turns are exactly what the server manager sampled, with its log-probs; nothing else is masked in
    runs = mask_runs(response_mask)
    assert len(runs) == len(manager.sampled) == ours.agent_turns
    for (a, b), (context, sampled, sampled_logprobs) in zip(runs, manager.sampled):
        assert response_ids[a:b] == sampled and logprobs[a:b] == pytest.approx(sampled_logprobs, abs=0)
        assert (prompt_ids + response_ids)[: len(prompt_ids) + a] == context  # each turn saw the sequence so far
    assert all(lp == 0.0 for lp, m in zip(logprobs, response_mask) if not m)
    # ... and the sequence, mask and reward are muarl rollout's for the task and seed
    assert prompt_ids + response_ids == ours.tokens.input_ids
    assert [0] * len(prompt_ids) + response_mask == ours.tokens.loss_mask
    assert out.batch["rm_scores"][0].sum().item() == pytest.approx(ours.reward.reward, abs=1e-6)
    assert {"outcome", "writes", "outputs", "credit"} <= set(ours.reward.components)  # scored by the checklist the YAML named
    assert out.non_tensor_batch["muarl_termination"][0] == ours.termination
    assert out.non_tensor_batch["muarl_agent_turns"][0] == ours.agent_turns
    # turns in the tokens: up to the policy's last turn (the user's closing line is never rendered for it)
    last = max(i for i, m in enumerate(ours.messages) if m.role == "assistant")
    assert out.non_tensor_batch["__num_turns__"][0] == last < len(ours.messages) - 1


def test_an_episode_whose_user_server_fails_trains_nothing_and_does_not_stop_the_step(tmp_path, model_dir):
    from muarl.models.loopback_server import HTTPFailure, LoopbackServer

    def broken(request):
        raise HTTPFailure(503)

    exported = CliRunner().invoke(main, ["export-verl", "--domain", "toy", "--out", str(tmp_path / "data")])
    assert exported.exit_code == 0, exported.output
    with LoopbackServer(broken) as server:
        out, _ = run_row_in_verl(tmp_path, model_dir, {**WORLD, "user_base_url": server.base_url})
    assert out.non_tensor_batch["muarl_errored"][0] and "503" in out.non_tensor_batch["muarl_error"][0]
    assert not out.batch["response_mask"][0].any() and out.batch["rm_scores"][0].sum().item() == 0.0


def test_export_verl_refuses_a_test_split_unless_forced(tmp_path):
    refused = CliRunner().invoke(main, ["export-verl", "--domain", "clinic", "--split", "test", "--out", str(tmp_path)])
    assert refused.exit_code == 2 and "split 'test'" in refused.output and not any(tmp_path.iterdir())
    forced = CliRunner().invoke(main, ["export-verl", "--domain", "clinic", "--split", "test", "--limit", "3", "--force", "--out", str(tmp_path)])
    assert forced.exit_code == 0, forced.output
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "rl_test.parquet").to_pylist()
    assert [r["extra_info"]["split"] for r in rows] == ["test"] * 3 and {r["agent_name"] for r in rows} == {"muarl"}


def transformers_above_verls_cap() -> bool:
    """verl 0.9.1 requires transformers < 5.11: the one known reason its SFT dataset may not import."""
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__) >= Version("5.11")


def test_sft_parquet_loads_with_verls_multi_turn_sft_dataset(tmp_path, model_dir):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from muarl.domains.spec import load_domain_spec

    try:
        from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    except ImportError as exc:  # verl 0.9.1 caps transformers < 5.11; newer ones lack a Qwen2-VL class it imports
        if "Qwen2VL" not in str(exc) or not transformers_above_verls_cap():
            raise
        pytest.skip(f"verl's MultiTurnSFTDataset does not import with this transformers: {exc}")

    tools = [t.to_openai() for t in load_domain_spec("toy").tools.specs()]
    call = {"id": "c0", "type": "function", "function": {"name": "find_patient", "arguments": json.dumps({"name": "Ann Lee"})}}
    dialogue = {"messages": [{"role": "system", "content": "You book appointments."}, {"role": "user", "content": "Book mon-9 for Ann Lee."},
                             {"role": "assistant", "content": None, "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": "c0", "content": '{"patient_id": "p1"}'},
                             {"role": "assistant", "content": "Booked."}],
                "tools": tools, "task_id": "t0", "split": "train", "task_split": "train"}
    (tmp_path / "sft_train.jsonl").write_text(json.dumps(dialogue) + "\n")
    test_line = {**dialogue, "task_split": "test"}
    (tmp_path / "sft_leak.jsonl").write_text(json.dumps(test_line) + "\n")
    refused = CliRunner().invoke(main, ["export-verl", "--domain", "toy", "--sft", str(tmp_path / "sft_leak.jsonl"), "--out", str(tmp_path / "out")])
    assert refused.exit_code == 2 and "split 'test'" in refused.output and "--force" in refused.output
    done = CliRunner().invoke(main, ["export-verl", "--domain", "toy", "--sft", str(tmp_path / "sft_train.jsonl"), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dataset = MultiTurnSFTDataset(str(tmp_path / "out" / "sft_train.parquet"), tokenizer,
                                  OmegaConf.create({"max_length": 2048, "truncation": "error"}))
    assert len(dataset) == 1 and isinstance(dataset.tools[0], list)
    assert [t["function"]["name"] for t in dataset.tools[0]] == [t["function"]["name"] for t in tools]
    item = dataset[0]
    assert int(item["loss_mask"].sum()) > 0  # the assistant turns are what it trains on


def test_with_quarantine_on_the_episodes_the_user_spoiled_train_nothing_and_keep_their_verdict(tmp_path, model_dir):
    """Several rows, two samples each, three entries: a user who faults in every reply with quarantine on and
    off, and the clean scripted user with it on. Only the episodes the attribution blames on the user lose
    their mask (so ``muarl_grpo`` leaves them out of their group); their reward is still the verdict."""
    import numpy as np
    import torch
    import yaml
    from verl.experimental.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from muarl.integrations.verl_advantage import muarl_grpo_advantage
    from muarl.integrations.verl_metrics import step_metrics

    exported = CliRunner().invoke(main, ["export-verl", "--domain", "clinic-lite", "--split", "train", "--limit", "2", "--seed", "3",
                                         "--out", str(tmp_path / "data")])
    assert exported.exit_code == 0, exported.output
    base = {"_target_": "muarl.integrations.verl.MuarlAgentLoop", "chat_format": "chatml-hermes", "max_new_tokens": MAX_NEW_TOKENS,
            "max_turns": 3}
    entries = {"faulty_q": {"user": "scripted:faulty:1.0", "quarantine_user_faults": True},
               "faulty": {"user": "scripted:faulty:1.0"},
               "clean_q": {"user": "scripted", "quarantine_user_faults": True}}
    loops = tmp_path / "agent_loops.yaml"
    loops.write_text(yaml.safe_dump([{"name": name, **base, **e} for name, e in entries.items()]))
    config = verl_config(model_dir, loops, "actor_rollout_ref.rollout.prompt_length=4096", "data.max_prompt_length=4096")
    worker = AgentLoopWorker(config, LocalServerManager(LocalChatClient(local_policy(str(model_dir), precision="fp32"))))
    dataset = RLHFDataset([str(tmp_path / "data" / "rl_train.parquet")], worker.tokenizer, config.data)
    names = [name for name in entries for _ in range(2)]  # each entry on both tasks
    rows = [dict(dataset[i % 2]) for i in range(len(names))]
    for row, name in zip(rows, names):
        row["agent_name"] = name
    batch = DataProto.from_single_dict(collate_fn(rows))
    batch.non_tensor_batch["uid"] = np.array([f"row{i}" for i in range(len(rows))], dtype=object)
    out = asyncio.run(worker.generate_sequences(batch.repeat(repeat_times=2, interleave=True)))

    entry = np.repeat(names, 2)
    fields = out.non_tensor_batch
    fault = np.array([bool(x) for x in fields["muarl_user_fault"]])
    quarantined = np.array([bool(x) for x in fields["muarl_quarantined"]])
    trained = out.batch["response_mask"].sum(-1) > 0
    assert fault[entry != "clean_q"].all() and not fault[entry == "clean_q"].any()  # every faulty episode was blamed on the user
    assert list(quarantined) == list(fault & (entry != "faulty"))
    assert list(trained.numpy()) == list(~quarantined)
    assert not any(bool(x) for x in fields["muarl_errored"])
    for i in np.flatnonzero(quarantined):  # the verdict stays on the row: the episode failed, and was scored
        assert not fields["muarl_success"][i] and out.batch["rm_scores"][i].sum().item() == 0.0
    adv, _ = muarl_grpo_advantage(out.batch["rm_scores"], out.batch["response_mask"], fields["uid"])
    assert not adv[torch.from_numpy(quarantined)].any()
    metrics = step_metrics({k: v for k, v in fields.items() if k.startswith("muarl_")})
    assert metrics["muarl/quarantined"] == 4 and metrics["muarl/user_fault_rate"] == pytest.approx(8 / 12)
