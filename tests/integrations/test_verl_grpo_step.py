"""A GRPO step of MUA-RL through verl's own code, as a GPU run drives it, on CPU.

Specification: rows that ``muarl export-verl`` wrote (clinic-lite and τ-retail train tasks), read by verl's
``RLHFDataset``, repeated n times with a uid per row as verl's trainer repeats them, go through verl 0.9.1's
``AgentLoopWorker.generate_sequences`` with our loop registered by several entries of one agent-loop YAML.
A server manager implementing verl's interface over the tiny model samples the policy (real forwards and
log-probs); for the first sample of each task it replays the oracle's turns instead, so groups have mixed
rewards. One row's user server is down, one row's policy rambles past ``response_length``. Then verl's
advantage (``muarl_grpo`` over verl's GRPO), verl's policy loss and its KL, and one optimizer step.

Every row keeps its YAML entry's settings, the entry's ``tools:`` is honoured, masks and rewards sit where
verl expects them, rollout log-probs equal a recomputation, errored rows train nothing and leave their
group, and the update moves the weights.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import numpy as np
import pytest

if not os.environ.get("CI"):  # in CI verl must be there: a missing install fails instead of skipping
    pytest.importorskip("verl", reason="the verl test dependencies are not installed (see the README's test command)")

import torch  # noqa: E402
import yaml  # noqa: E402

import muarl.integrations  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from muarl.cli import main  # noqa: E402
from domain_data import load_or_skip  # noqa: E402
from muarl.data.store import find_root  # noqa: E402
from muarl.integrations.verl import VerlPolicy  # noqa: E402
from muarl.models.batched_generation import GenerationRequest  # noqa: E402
from muarl.models.local_chat import LocalChatClient  # noqa: E402
from muarl.models.local_spec import export_model, local_policy  # noqa: E402
from muarl.models.oracle import OracleAgent  # noqa: E402
from muarl.models.token_session import TokenFormat  # noqa: E402
from muarl.rollout.episode import run_episode  # noqa: E402
from muarl.rollout.world import WorldConfig, build_world  # noqa: E402
from muarl.seeds import sample_seed  # noqa: E402
from servers import PYTHONPATH, free_port  # noqa: E402
from token_traces import mask_runs  # noqa: E402

N = 2  # samples per row
PROMPT_LENGTH, RESPONSE_LENGTH = 12800, 2048
MAX_NEW_TOKENS, MAX_TURNS = 256, 8  # tokens per turn: enough for every oracle turn
FORMAT = "chatml-hermes"
CLINIC_SEED, TAU_SEED = 5, 3
RAMBLE_ID = 97  # a token id the rambling policy repeats until its turn budget runs out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return export_model("tiny-random", tmp_path_factory.mktemp("verl-grpo") / "model")


class ReplayOrSampleServer:
    """verl's server-manager interface (``generate(request_id, *, prompt_ids, sampling_params)``).

    The first episode of each task to arrive replays the oracle's turns for its opening (log-probs from a
    forward pass of the model: what the policy gives those tokens); tasks in ``ramble`` fill every turn's
    budget with one token; every other episode is sampled by our engine."""

    def __init__(self, model_dir: Path, fmt: TokenFormat, replays: dict[tuple[int, ...], list[list[int]]], ramble: set[str]):
        from transformers import AutoModelForCausalLM

        self.client = LocalChatClient(local_policy(str(model_dir), precision="fp32", max_context=PROMPT_LENGTH + RESPONSE_LENGTH))
        self.lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.fmt, self.replays, self.ramble = fmt, replays, ramble
        self.plans: dict[str, list[list[int]] | None] = {}  # request id -> the turns it replays (None: sampled)
        self.replayed_tasks: set[str] = set()
        self.sampled: list[tuple[list[int], list[int]]] = []

    def forced_logprobs(self, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
        with torch.no_grad():
            logits = self.lm(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1].float()
        return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        task = request_id[len("muarl-"):].rsplit("-", 1)[0]
        budget, temperature = sampling_params["max_tokens"], sampling_params["temperature"] or 1.0
        if request_id not in self.plans:
            plan = self.replays.get(tuple(prompt_ids)) if task not in self.replayed_tasks else None
            if plan is not None:
                self.replayed_tasks.add(task)
            self.plans[request_id] = list(plan) if plan is not None else None
        plan = self.plans[request_id]
        if task in self.ramble or plan:
            tokens = [RAMBLE_ID] * budget if task in self.ramble else plan.pop(0)[:budget]
            logprobs = self.forced_logprobs(list(prompt_ids), tokens, temperature)
        else:
            policy = self.client.policy_for(temperature=temperature, top_p=sampling_params.get("top_p") or 1.0)
            request = GenerationRequest(cache=policy.kv_cache(), feed=list(prompt_ids), budget=budget,
                                        generator=torch.Generator().manual_seed(len(self.sampled)))
            done = await policy.generator.generate(request)
            tokens, logprobs = done.sampled, done.logprobs
        self.sampled.append((list(prompt_ids), tokens))
        return TokenOutput(token_ids=tokens, log_probs=logprobs if sampling_params.get("logprobs") else None)


def oracle_replays(fmt: TokenFormat, worlds: dict[str, WorldConfig], rows: list[dict]) -> dict[tuple[int, ...], list[list[int]]]:
    """For each row and sample, the oracle's episode under that sample's user seed: its opening as the loop
    renders it (the key the server recognises) and each oracle turn as the ids the policy would sample."""
    replays = {}
    for row in rows:
        cfg = worlds[row["agent_name"]].model_copy(update={"domain": row["extra_info"]["domain"], "split": "train"})
        world = build_world(cfg, 4)
        task = next(t for t in world.tasks if t.id == row["extra_info"]["task_id"])
        for k in range(N):
            episode = asyncio.run(run_episode(world.domain, task, OracleAgent(), world.user, seed=sample_seed(int(row["extra_info"]["seed"]), k),
                                              config=world.loop, reward_fn=world.reward_fn))
            assert episode.reward and episode.reward.success, f"the oracle fails {task.id}: {episode.error}"
            greeting = 1 if world.domain.greeting else 0  # the domain's greeting is rendered, never sampled
            sampled = [i for i, m in enumerate(episode.messages) if m.role == "assistant" and i != greeting]
            first = sampled[0]
            session = VerlPolicy(None, fmt, {}, prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH).new_session(
                task, world.domain.task_tools(task).specs(), 0)
            session._extend_context(episode.messages[:first])
            turns = [fmt.encode(fmt.chat_format.assistant_body(episode.messages[i])) + [fmt.end_of_turn_id] for i in sampled]
            replays[tuple(session.ids)] = turns
    return replays


def test_a_grpo_step_runs_through_verls_worker_advantage_loss_and_optimizer(tmp_path, model_dir, monkeypatch):
    from hydra import compose, initialize_config_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.experimental.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo import core_algos
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    import verl

    load_or_skip("tau-retail")  # the τ-retail row needs the benchmark's data
    data = str(find_root("tau-bench"))
    runner = CliRunner()
    for args in (["--domain", "clinic-lite", "--limit", "4", "--seed", str(CLINIC_SEED), "--out", str(tmp_path / "clinic")],
                 ["--domain", "tau-retail", "--data-dir", data, "--limit", "1", "--seed", str(TAU_SEED), "--out", str(tmp_path / "tau")]):
        done = runner.invoke(main, ["export-verl", "--split", "train", *args])
        assert done.exit_code == 0, done.output

    marker = tmp_path / "mcp-server-started"
    serve = tmp_path / "serve-mcp.sh"  # an MCP stdio server that leaves a mark when it starts
    serve.write_text(f"touch {marker}\nexec env PYTHONPATH={PYTHONPATH} {sys.executable} -c 'from muarl.cli import main; main()' serve-mcp --domain clinic-lite\n")
    base = {"chat_format": FORMAT, "max_new_tokens": MAX_NEW_TOKENS, "max_turns": MAX_TURNS, "user": "scripted"}
    entries = {
        "muarl": base,
        "muarl_tau": {**base, "data_dir": data},
        "muarl_mcp": {**base, "tools": f"mcp:sh {serve}", "timeout": 60},
        "muarl_deaduser": {**base, "user": "llm:user", "user_base_url": f"http://127.0.0.1:{free_port()}/v1", "max_retries": 0, "timeout": 5},
        "muarl_long": {**base, "max_new_tokens": None, "max_turns": 30},
    }
    loops = tmp_path / "agent_loops.yaml"
    loops.write_text(yaml.safe_dump([{"name": name, "_target_": "muarl.integrations.verl.MuarlAgentLoop", **{k: v for k, v in e.items() if v is not None}}
                                     for name, e in entries.items()]))
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose("ppo_trainer", overrides=[
            "actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.temperature=1.0", "actor_rollout_ref.rollout.calculate_log_probs=true",
            f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
            f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}", f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            f"data.max_prompt_length={PROMPT_LENGTH}", "data.filter_overlong_prompts=false",
            "algorithm.adv_estimator=muarl_grpo", "actor_rollout_ref.actor.clip_ratio=0.2",
            "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.001",
            "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"])

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dataset = RLHFDataset([str(tmp_path / "clinic" / "rl_train.parquet"), str(tmp_path / "tau" / "rl_train.parquet")], tokenizer, config.data)
    rows = [dataset[i] for i in range(len(dataset))]  # clinic-lite 0..3, τ-retail
    rows = [dict(rows[i]) for i in (0, 1, 4, 2, 0, 3)]
    names = ["muarl", "muarl", "muarl_tau", "muarl_mcp", "muarl_deaduser", "muarl_long"]
    for row, name in zip(rows, names):
        row["agent_name"] = name
    fmt = TokenFormat(tokenizer, FORMAT)
    worlds = {name: WorldConfig(**{k: v for k, v in e.items() if k in WorldConfig.model_fields and k != "tools"}) for name, e in entries.items()}
    replays = oracle_replays(fmt, worlds, rows[:4])
    long_task = rows[5]["extra_info"]["task_id"]
    server = ReplayOrSampleServer(model_dir, fmt, replays, ramble={long_task})

    # a verl worker process imports our module on its first row, after loading the YAML: so must this one
    monkeypatch.delitem(sys.modules, "muarl.integrations.verl")
    monkeypatch.delattr(muarl.integrations, "verl")
    batch = DataProto.from_single_dict(collate_fn(rows))
    batch.non_tensor_batch["uid"] = np.array([f"row{i}" for i in range(len(rows))], dtype=object)
    batch = batch.repeat(repeat_times=N, interleave=True)
    out = asyncio.run(AgentLoopWorker(config, server).generate_sequences(batch))

    entry = np.repeat(names, N)
    uids = out.non_tensor_batch["uid"]
    fields = out.non_tensor_batch
    prompts, responses = out.batch["prompts"], out.batch["responses"]
    attention, mask = out.batch["attention_mask"], out.batch["response_mask"]
    P = prompts.shape[1]
    assert prompts.shape == (len(rows) * N, PROMPT_LENGTH) and responses.shape == (len(rows) * N, RESPONSE_LENGTH)
    assert list(uids) == [f"row{i}" for i in range(len(rows)) for _ in range(N)]

    # every row ran with its own entry's settings
    errored = np.array([bool(x) for x in fields["muarl_errored"]])
    assert list(errored) == [e == "muarl_deaduser" for e in entry], list(fields["muarl_error"])
    assert all("UserError" in fields["muarl_error"][i] for i in np.flatnonzero(errored))
    for i in np.flatnonzero((entry == "muarl") | (entry == "muarl_tau")):
        turns = mask_runs(mask[i].tolist())
        assert 1 <= fields["muarl_agent_turns"][i] <= MAX_TURNS and len(turns) == fields["muarl_agent_turns"][i]
        assert max(b - a for a, b in turns) <= MAX_NEW_TOKENS, f"row {i} sampled turns longer than its entry's max_new_tokens"
    assert not errored[entry == "muarl_tau"].any()  # the τ-retail rows found their entry's data_dir
    for i in range(len(entry)):  # and every row was rendered in its entry's chat format (qwen3 would open a think block)
        assert "<think>" not in tokenizer.decode(out.batch["input_ids"][i][attention[i].bool()])
    # the entry's tools: ran through the MCP server it names, and the replayed episode still succeeded
    assert marker.exists()
    assert any(fields["muarl_success"][i] for i in np.flatnonzero(entry == "muarl_mcp"))
    # the rambling row overflowed response_length: cut to it, ended context_full, and the batch still assembled
    for i in np.flatnonzero(entry == "muarl_long"):
        assert fields["muarl_termination"][i] == "context_full"
        assert int(attention[i, P:].sum()) == RESPONSE_LENGTH
    # mixed rewards: each replayed task succeeded once, the sampled episodes failed
    rewards = out.batch["rm_scores"].sum(-1)
    for row in range(4):
        group = rewards[row * N:(row + 1) * N].tolist()
        assert sorted(group) == [0.0, 1.0], (row, group)

    # verl's layout: the response mask inside the attention mask, the reward on the last valid token only
    assert bool((mask <= attention[:, P:]).all())
    last = attention[:, P:].sum(-1) - 1
    nonzero = out.batch["rm_scores"] != 0
    assert all(set(torch.nonzero(nonzero[i]).flatten().tolist()) <= {int(last[i])} for i in range(len(entry)))
    assert not mask[torch.from_numpy(errored)].any()

    # rollout log-probs: 0 off the mask, the model's own on it (a recomputation, as verl's actor does)
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    before = [p.detach().clone() for p in lm.parameters()]
    rollout_logprobs = out.batch["rollout_log_probs"]
    assert bool((rollout_logprobs[mask == 0] == 0).all())

    def logprobs() -> torch.Tensor:
        rows_lp = []
        for i in range(len(entry)):
            keep = attention[i].bool()
            ids = out.batch["input_ids"][i][keep]
            n_prompt = int(attention[i, :P].sum())
            logits = lm(ids[None]).logits[0, n_prompt - 1:-1]
            lp = torch.log_softmax(logits.float(), -1).gather(-1, ids[n_prompt:, None])[:, 0]
            rows_lp.append(torch.nn.functional.pad(lp, (0, RESPONSE_LENGTH - lp.numel())))
        return torch.stack(rows_lp)

    current = logprobs()
    on = mask.bool()
    assert on.sum() > 0 and float((current.detach()[on] - rollout_logprobs[on]).abs().max()) <= 1e-5

    # verl's advantage through the registered name: errored rows leave their group, every group's mean is 0
    estimator = core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator)
    advantages, _ = estimator(token_level_rewards=out.batch["rm_scores"], response_mask=mask, index=uids, config=config.algorithm)
    per_row = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    for uid in set(uids):
        group = per_row[torch.from_numpy(uids == uid)]
        assert abs(float(group.mean())) < 1e-6
    assert not advantages[torch.from_numpy(errored)].any()
    assert bool((per_row[:4 * N] != 0).all())  # mixed groups carry signal

    # verl's policy loss and KL, one optimizer step
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    policy_loss = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    pg_loss, _ = policy_loss(old_log_prob=rollout_logprobs, log_prob=current, advantages=advantages, response_mask=mask,
                             loss_agg_mode=actor.loss_agg_mode, config=actor)
    kl = core_algos.kl_penalty(current, rollout_logprobs, actor.kl_loss_type)
    loss = pg_loss + actor.kl_loss_coef * core_algos.agg_loss(kl, mask, actor.loss_agg_mode)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-3)
    loss.backward()
    assert torch.isfinite(loss)
    assert sum(float(p.grad.abs().sum()) for p in lm.parameters() if p.grad is not None) > 0
    optimizer.step()
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, lm.parameters()))
