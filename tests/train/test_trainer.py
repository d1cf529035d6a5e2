"""The GRPO trainer end to end on a tiny random model: updates move log-probabilities the right way, and a
resumed run lands on the same weights as an uninterrupted one."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest
import torch

from muarl.domains import DOMAINS
from muarl.models import precision
from muarl.rollout.config import ConfigError
from muarl.rollout.store import read_episodes
from muarl.train.config import GRPOConfig, ModelConfig
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train import trainer as trainer_module
from muarl.train.trainer import GRPOTrainer, TrainingError, has_signal, next_step_fits
from muarl.types import Attribution, Episode, RewardInfo, TokenTrace


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(DOMAINS, "toy", "booking_world:load")


def parity_reward(domain, task, final_hash, messages, agent_turns=0):
    """1 when the policy's first reply has an odd length: arbitrary, but it varies within a group."""
    first = next((m for m in messages if m.role == "assistant"), None)  # none when the first turn failed
    r = float(len(first.content or "") % 2) if first is not None else 0.0
    return RewardInfo(reward=r, state_match=r > 0, final_hash=final_hash, gold_hash="")


def config(out, **changes) -> GRPOConfig:
    base = {"out": str(out), "domain": "toy", "model": ModelConfig(name="tiny-random", precision="fp32"), "steps": 2,
            "tasks_per_step": 1, "group_size": 4, "max_turns": 2, "max_new_tokens": 8, "max_context": 1024,
            "micro_batch_size": 2, "lr": 1e-3, "plot": False, "save_every": 1}
    return GRPOConfig(**{**base, **changes})


def weights(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def mean_logprob(trainer, ep):
    batch = pad_sequences([ep.tokens.input_ids], [ep.tokens.loss_mask], 2)
    with torch.no_grad():
        return float(supervised_logprobs(trainer.model, batch)[0].mean())


def test_update_raises_logprobs_of_positive_advantage_and_lowers_negative(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "run", lr=3e-3, kl_coef=0.0), progress=False)
    group = trainer.rollout(trainer.next_tasks())[0]
    good, bad = group[0], group[1]
    before = mean_logprob(trainer, good), mean_logprob(trainer, bad)
    stats = trainer.update([(good, 1.0), (bad, -1.0)])
    after = mean_logprob(trainer, good), mean_logprob(trainer, bad)
    assert after[0] > before[0] and after[1] < before[1]
    assert stats["grad_norm"] > 0 and stats["clip_fraction"] == 0.0  # on-policy: ratio 1, nothing clipped
    assert stats["sampler_logprob_gap"] < 1e-4  # the engine's logprobs are the trainer's


def counting_reference(trainer) -> list[int]:
    """Counts the times ``trainer`` runs its frozen reference (each entry into ``Reference.active``)."""
    entries, active = [], trainer.reference.active
    trainer.reference.active = lambda model: (entries.append(1), active(model))[1]
    return entries


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_the_reference_forward_is_skipped_while_the_policy_is_the_reference(tmp_path, finetune):
    """Issue 21's time box: at the first update the trainable weights are those the reference was built from, so the
    reference's log-probabilities are the policy's own. Its forward is skipped then (a fifth of an update's time), and the
    update lands on the same weights as one that runs it; once the policy has moved, the reference runs again."""
    model = ModelConfig(name="tiny-random", precision="fp32", finetune=finetune, lora_r=4)
    skipping, running = (GRPOTrainer(config(tmp_path / name, model=model, kl_coef=0.1), reward_fn=parity_reward, progress=False)
                         for name in ("a", "b"))
    running.policy_is_reference = False  # as though it had moved: the reference runs, as it did before the skip
    skipped, ran = counting_reference(skipping), counting_reference(running)
    group = skipping.rollout(skipping.next_tasks())[0]
    samples = list(zip(group, [1.0, -1.0, 0.5, -0.5]))
    first = skipping.update(samples)
    assert not skipped and first["kl"] == 0.0
    # the reference's own forward gives the policy's log-probs again, up to the round-off a second forward of the same
    # weights may add (the bench saw a KL of 1.6e-10 in 1 of 8 runs); the skip's KL is exactly 0
    assert running.update(samples)["kl"] < 1e-8 and ran
    for p, q in zip(skipping.params, running.params):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-5)
    assert not skipping.policy_is_reference
    assert skipping.update(samples)["kl"] > 0 and skipped  # the policy moved: KL is measured against the reference
    for t in (skipping, running):
        t.close()


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_two_steps_equal_one_step_save_resume_one_step(tmp_path, finetune):
    model = ModelConfig(name="tiny-random", precision="fp32", finetune=finetune, lora_r=4)
    straight = GRPOTrainer(config(tmp_path / "a", model=model), reward_fn=parity_reward, progress=False)
    straight.start()
    straight.train()

    first = GRPOTrainer(config(tmp_path / "b", model=model, steps=1), reward_fn=parity_reward, progress=False)
    first.start()
    first.train()
    resumed = GRPOTrainer(config(tmp_path / "b", model=model), reward_fn=parity_reward, progress=False)
    resumed.start(resume=True)
    assert resumed.step == 1 and resumed.position == 1
    resumed.train()

    a, b = weights(straight), weights(resumed)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(v, w) for v, w in zip(a.values(), weights(GRPOTrainer(config(tmp_path / "c", model=model), progress=False)).values()))
    rows_a = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    rows_b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows_b] == [1, 2]
    assert [r["reward_mean"] for r in rows_a] == [r["reward_mean"] for r in rows_b]
    assert any(0 < r["reward_mean"] < 1 and r["grad_norm"] > 0 for r in rows_a)  # some group had signal


def test_a_steps_logged_learning_rate_is_the_one_its_updates_used(tmp_path):
    """Under warmup the scheduler moves on after each optimizer step, so the rate it reports afterwards is the next
    step's: the metric must be the rate applied (with 2 mini-batches, the mean of the two optimizer steps')."""
    trainer = GRPOTrainer(config(tmp_path / "run", steps=2, warmup_steps=4, mini_batches=2), reward_fn=parity_reward,
                          progress=False)
    trainer.start()
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    applied = [(1 / 4 + 2 / 4) / 2 * 1e-3, (3 / 4 + 4 / 4) / 2 * 1e-3]
    assert [r["lr"] for r in rows] == pytest.approx(applied)


def test_a_first_adamw_step_moves_each_weight_by_lr_times_g_over_abs_g_plus_eps(tmp_path):
    """Issue 21: Adam's first step moves every weight by the full rate whatever its gradient's size (m/sqrt(v) =
    sign(g)); ``adam_eps`` is the floor under which a gradient counts as noise and moves its weight by lr * g / eps."""
    for eps in (1e-8, 1e-2):
        trainer = GRPOTrainer(config(tmp_path / f"run-{eps}", lr=1e-3, adam_eps=eps), progress=False)
        before = [p.detach().clone() for p in trainer.params]
        grads = [torch.full_like(p, 1e-2) * torch.linspace(-1, 1, p.numel()).reshape(p.shape) for p in trainer.params]
        for p, g in zip(trainer.params, grads):
            p.grad = g.clone()
        trainer.optimizer.step()
        for b, a, g in zip(before, trainer.params, grads):
            torch.testing.assert_close(a.detach(), b - 1e-3 * g / (g.abs() + eps), atol=1e-6, rtol=0)  # moves are up to 1e-3
        trainer.close()


def test_run_directory_guards(tmp_path):
    first = GRPOTrainer(config(tmp_path / "r", steps=1), progress=False)
    first.start()
    first.train()
    assert (tmp_path / "r" / "config.yaml").is_file() and (tmp_path / "r" / "checkpoints" / "latest").is_file()
    with pytest.raises(ConfigError, match="already holds a run"):
        GRPOTrainer(config(tmp_path / "r", steps=2), progress=False).start()
    with pytest.raises(ConfigError, match="lr: 0.001 -> 0.5"):
        GRPOTrainer(config(tmp_path / "r", steps=2, lr=0.5), progress=False).start(resume=True)


def test_config_refuses_the_test_split_and_reads_yaml(tmp_path):
    with pytest.raises(ValueError, match="leak the evaluation set"):
        GRPOConfig(split="test")
    assert GRPOConfig(split="test", allow_test_split=True).split == "test"
    path = tmp_path / "c.yaml"
    path.write_text("steps: 3\nmodel:\n  name: tiny-random\n  finetune: lora\n")
    cfg = GRPOConfig.load(path, out="x")
    assert (cfg.steps, cfg.model.finetune, cfg.out, cfg.group_size, cfg.kl_coef) == (3, "lora", "x", 8, 0.001)
    path.write_text("stepz: 3\n")
    with pytest.raises(ConfigError, match="stepz"):
        GRPOConfig.load(path)


@pytest.mark.parametrize("temperature", [0.5, 0.7, 1.0])
def test_trainer_logprobs_are_the_samplers_at_every_temperature(tmp_path, temperature):
    """Sampler and trainer compute the same distribution, softmax(logits / T): before the update the trainer's
    log-probabilities of the sampled tokens equal the engine's (float32), and the ratio is 1."""
    trainer = GRPOTrainer(config(tmp_path / "run", temperature=temperature), progress=False)
    group = trainer.rollout(trainer.next_tasks())[0]
    stats = trainer.update(list(zip(group, [1.0, -1.0, 0.5, -0.5])))
    assert stats["sampler_logprob_gap"] < 1e-4
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and stats["kl"] == pytest.approx(0.0, abs=1e-7)


def scored_episode(reward: float, success: bool, trial: int) -> Episode:
    return Episode(task_id="t", domain="toy", split="train", trial=trial, termination="user_stop",
                   reward=RewardInfo(reward=reward, success=success, state_match=success, final_hash="", gold_hash=""),
                   tokens=TokenTrace(input_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0]))


def test_a_uniform_group_is_one_with_zero_reward_variance_and_success_is_the_reward_functions(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "run", drop_uniform=True), progress=False)
    shaped = [scored_episode(0.98, True, 0), scored_episode(0.96, True, 1)]  # all solved, rewards differ: signal
    solved = [scored_episode(1.0, True, 0), scored_episode(1.0, True, 1)]
    failed = [scored_episode(0.0, False, 0), scored_episode(0.0, False, 1)]
    samples, stats = trainer.training_samples([shaped, solved, failed])
    assert [e for e, _ in samples] == shaped and samples[0][1] > 0 > samples[1][1]
    assert stats["all_correct_ratio"] == pytest.approx(2 / 3) and stats["all_wrong_ratio"] == pytest.approx(1 / 3)
    assert stats["uniform_ratio"] == pytest.approx(2 / 3) and stats["groups_dropped"] == 2


def test_advantage_std_verdict_divides_by_the_std_of_the_verdicts(tmp_path):
    """A success paid a fraction (a process breach) in a group with no clean success: standardised by the rewards'
    own std it gets the outcome's advantage; by the verdicts' std, that fraction of it."""
    group = [scored_episode(0.25, True, 0), scored_episode(0.0, False, 1), scored_episode(0.0, False, 2), scored_episode(0.0, False, 3)]
    rewards_std = GRPOTrainer(config(tmp_path / "rewards"), progress=False).training_samples([group])[0]
    verdict_std = GRPOTrainer(config(tmp_path / "verdict", advantage_std="verdict"), progress=False).training_samples([group])[0]
    assert [a for _, a in rewards_std] == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-4)
    # centred [0.1875, -0.0625, ...] over the verdicts' std 0.5
    assert [a for _, a in verdict_std] == pytest.approx([0.375, -0.125, -0.125, -0.125], abs=1e-5)
    with pytest.raises(ValueError, match="advantage_std"):
        config(tmp_path / "x", advantage_std="verdicts")


def blamed_on_user(episode: Episode) -> Episode:
    return episode.model_copy(update={"checks": [], "attribution": Attribution(label="user", reason="stop: ended early")})


def test_quarantine_rescores_a_group_without_the_episodes_the_user_spoiled(tmp_path):
    group = [scored_episode(1.0, True, 0), scored_episode(0.0, False, 1), blamed_on_user(scored_episode(0.0, False, 2)),
             scored_episode(1.0, True, 3)]
    off = GRPOTrainer(config(tmp_path / "off"), progress=False)
    samples, stats = off.training_samples([group])
    assert len(samples) == 4 and "quarantined" not in stats  # off by default: the spoiled failure is a label like any other
    assert [round(a, 4) for _, a in samples] == [0.866, -0.866, -0.866, 0.866]
    on = GRPOTrainer(config(tmp_path / "on", quarantine_user_faults=True), progress=False)
    samples, stats = on.training_samples([group])
    # rescored from [1, 0, 1]: mean 2/3, sample std 0.57735
    assert [e.trial for e, _ in samples] == [0, 1, 3]
    assert [a for _, a in samples] == pytest.approx([0.57735, -1.154701, 0.57735], abs=1e-5)
    assert stats["quarantined"] == 1 and stats["quarantine_dropped_groups"] == 0 and stats["groups"] == 1
    # dynamic sampling counts a group's signal after the quarantine, as the update will see it
    spoiled_only = [scored_episode(1.0, True, 0), blamed_on_user(scored_episode(0.0, False, 1)), scored_episode(1.0, True, 2)]
    assert has_signal(spoiled_only) and not has_signal(on.trainable(spoiled_only)) and off.trainable(spoiled_only) == spoiled_only


def test_quarantine_drops_a_group_left_under_its_minimum_and_counts_it(tmp_path):
    spoiled = [scored_episode(1.0, True, 0), blamed_on_user(scored_episode(0.0, False, 1)),
               blamed_on_user(scored_episode(0.0, False, 2)), scored_episode(0.0, False, 3)]
    clean = [scored_episode(1.0, True, 0), scored_episode(0.0, False, 1), scored_episode(0.0, False, 2), scored_episode(1.0, True, 3)]
    trainer = GRPOTrainer(config(tmp_path / "r", quarantine_user_faults=True, quarantine_min_group=3), progress=False)
    samples, stats = trainer.training_samples([spoiled, clean])
    assert {id(e) for e, _ in samples} == {id(e) for e in clean}
    assert (stats["quarantined"], stats["quarantine_dropped_groups"], stats["groups_dropped"], stats["groups"]) == (2, 1, 1, 1)
    with pytest.raises(ValueError, match=r"quarantine_min_group \(5\) cannot exceed group_size \(4\)"):
        config(tmp_path / "x", quarantine_user_faults=True, quarantine_min_group=5)


def test_a_steps_metrics_count_the_quarantined_episodes_and_the_user_fault_rate(tmp_path, monkeypatch):
    trainer = GRPOTrainer(config(tmp_path / "r", quarantine_user_faults=True), progress=False)
    trainer.start()
    group = [e.model_copy(update={"checks": []}) for e in
             (scored_episode(1.0, True, 0), scored_episode(0.0, False, 1), scored_episode(1.0, True, 3))]
    group.insert(2, blamed_on_user(scored_episode(0.0, False, 2)))
    monkeypatch.setattr(trainer, "collect_groups", lambda: ([group], 1))
    metrics = trainer.train_step()
    assert metrics["quarantined"] == 1 and metrics["user_fault_rate"] == 0.25 and metrics["trained_tokens"] == 6
    trainer.close()


def test_precision_auto_is_resolved_for_this_machine_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda *_: {"avx2", "fma"})  # an AVX2-only CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ModelConfig().precision == "auto" and ModelConfig().bf16 is False
    trainer = GRPOTrainer(config(tmp_path / "run", model=ModelConfig(name="tiny-random")), progress=False)
    trainer.start()
    assert trainer.cfg.model.precision == "fp32"
    assert GRPOConfig.load(tmp_path / "run" / "config.yaml").model.precision == "fp32"
    monkeypatch.setattr(precision, "cpu_flags", lambda *_: {"avx2", "avx512_bf16"})
    assert ModelConfig().resolved().precision == "bf16"


def test_every_step_keeps_its_episodes_and_a_resume_replaces_the_steps_it_reruns(tmp_path):
    first = GRPOTrainer(config(tmp_path / "r", steps=1), progress=False)
    first.start()
    first.train()
    kept, torn = read_episodes(tmp_path / "r" / "rollouts" / "step-000001.jsonl")
    assert torn == 0 and sorted(e.trial for e in kept) == [0, 1, 2, 3]
    assert all(e.tokens is not None and e.reward is not None for e in kept)
    stale = tmp_path / "r" / "rollouts" / "step-000002.jsonl"
    stale.write_text('{"torn": ')  # what a run killed during step 2 leaves behind
    resumed = GRPOTrainer(config(tmp_path / "r", steps=2), progress=False)
    resumed.start(resume=True)
    assert not stale.exists()
    resumed.train()
    assert len(read_episodes(stale)[0]) == 4


def test_a_step_whose_every_episode_errored_stops_and_says_what_failed(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    trainer = GRPOTrainer(config(tmp_path / "r", user="llm:gone", user_base_url=url, max_retries=0, timeout=2), progress=False)
    trainer.start()
    with pytest.raises(TrainingError, match=r"all 4 episodes errored.*UserError"):
        trainer.train_step()
    trainer.close()


def test_episodes_that_outgrow_the_context_stay_in_their_group_as_failures(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "run", max_context=655), progress=False)
    group = trainer.rollout(trainer.next_tasks())[0]
    assert {e.termination for e in group} == {"context_full"}
    assert all(e.reward is not None and not e.reward.success and e.tokens is not None for e in group)
    samples, stats = trainer.training_samples([group])
    assert len(samples) == 4 and stats["all_wrong_ratio"] == 1.0  # scored and kept, not dropped as errored


def test_dynamic_sampling_rolls_out_fresh_tasks_until_enough_groups_carry_signal(tmp_path):
    calls = []

    def late_signal(domain, task, final_hash, messages, agent_turns=0):
        """0 for the first group's 4 episodes; then alternating 1 / 0, so the next group has signal."""
        calls.append(1)
        r = float(len(calls) > 4 and len(calls) % 2 == 1)
        return RewardInfo(reward=r, success=r > 0, state_match=r > 0, final_hash=final_hash, gold_hash="")

    trainer = GRPOTrainer(config(tmp_path / "r", dynamic_sampling=True, max_sampling_rounds=3), reward_fn=late_signal, progress=False)
    trainer.start()
    groups, rounds = trainer.collect_groups()
    assert rounds == 2 and [has_signal(g) for g in groups] == [False, True]
    assert {p.name for p in (tmp_path / "r" / "rollouts").iterdir()} == {"step-000001.jsonl", "step-000001.round-2.jsonl"}
    samples, stats = trainer.training_samples(groups)
    assert {id(e) for e, _ in samples} == {id(e) for e in groups[1]} and stats["groups_dropped"] == 1

    def never(domain, task, final_hash, messages, agent_turns=0):
        return RewardInfo(reward=0.0, success=False, state_match=False, final_hash=final_hash, gold_hash="")

    hopeless = GRPOTrainer(config(tmp_path / "n", dynamic_sampling=True, max_sampling_rounds=3), reward_fn=never, progress=False)
    hopeless.start()
    assert hopeless.collect_groups()[1] == 3  # gives up after max_sampling_rounds


def test_next_step_fits_on_the_mean_step_time():
    assert next_step_fits(300.0, 3, 400.0)  # 3 steps of 100 s: a 4th ends at 400 s, inside a 400 s box
    assert not next_step_fits(300.0, 3, 399.0)
    assert not next_step_fits(250.0, 1, 480.0)  # one 250 s step: a second would end at 500 s


def test_a_time_box_stops_before_a_step_that_would_not_end_inside_it(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(monotonic=lambda: clock[0], perf_counter=lambda: clock[0]))
    trainer = GRPOTrainer(config(tmp_path / "r", steps=10, save_every=5), progress=False)
    trainer.start()

    def step() -> dict[str, float]:  # a step of 100 s on the fake clock
        clock[0] += 100.0
        trainer.step += 1
        return {"reward_mean": 0.0}

    monkeypatch.setattr(trainer, "train_step", step)
    trainer.train(time_limit_s=350.0)
    assert trainer.step == 3 and clock[0] == 300.0  # the old box, checked after the crossing step, ran a 4th to 400 s
    assert (tmp_path / "r" / "checkpoints" / "latest").read_text().strip().endswith("3")  # the last step is checkpointed


def test_a_local_users_precision_is_recorded_resolved(tmp_path):
    # as the policy's is: "auto" says nothing about the run, the precision this machine gave it does
    trainer = GRPOTrainer(config(tmp_path / "run", user="local:tiny-random", user_precision="auto"), progress=False)
    trainer.start()
    resolved = "bf16" if precision.use_bf16("auto") else "fp32"
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["user_settings"]["user_precision"] == resolved
    assert GRPOConfig.load(tmp_path / "run" / "config.yaml").user_precision == resolved


def test_a_resume_may_move_the_endpoints_and_names_what_else_differs(tmp_path):
    first = GRPOTrainer(config(tmp_path / "r", steps=1), progress=False)
    first.start()
    first.train()
    # where and how patiently episodes run may change, as in `muarl rollout --resume`
    moved = GRPOTrainer(config(tmp_path / "r", steps=2, timeout=5.0, max_retries=0, user_base_url="http://127.0.0.1:9/v1"), progress=False)
    moved.start(resume=True)
    assert moved.step == 1
    assert GRPOConfig.load(tmp_path / "r" / "config.yaml").timeout == 5.0  # the run records where it runs now
    with pytest.raises(ConfigError) as refused:
        GRPOTrainer(config(tmp_path / "r", steps=2, lr=0.5, max_turns=3), progress=False).start(resume=True)
    assert "lr: 0.001 -> 0.5" in str(refused.value) and "max_turns: 2 -> 3" in str(refused.value)
    # only what differs and may not is named; a nested setting by its path
    recorded = config(tmp_path).model_dump(mode="json")
    assert config(tmp_path, lr=0.5, timeout=1.0).resume_conflicts(recorded) == ["lr: 0.001 -> 0.5"]
    assert config(tmp_path, model=ModelConfig(name="tiny-random", precision="bf16")).resume_conflicts(recorded) == ["model.precision: 'fp32' -> 'bf16'"]


def kinds_task(i: int, level: int, changes: bool):
    from muarl.types import Task, UserScenario

    return Task(id=f"t{i:03d}", domain="toy", split="train", user=UserScenario(instruction=""), difficulty=level,
                metadata={"changes_mind": changes})


def test_a_pool_mix_keeps_every_kind_in_each_step_and_restores_the_pools_proportions():
    """Issue 21: taken in turn, the clinic's kinds get a quarter of GRPO's draws each though a change of mind is in 74%
    of its train tasks (and of the test tasks). With ``mix="pool"`` and 4-task steps over a pool of 10 tasks of
    one kind and 30 of another, each step takes one of each kind (the floor), then the kind furthest below its share:
    1 and 3, the pool's own proportions, in every step; in turn they come 2 and 2 until the small kind runs out."""
    from collections import Counter

    from muarl.train.trainer import epoch_order

    tasks = [kinds_task(i, 1, i % 4 != 0) for i in range(40)]
    by = ["difficulty", "changes_mind"]
    pool = epoch_order(tasks, 3, 0, by, "pool", 4)
    assert sorted(pool) == list(range(40)) and pool == epoch_order(tasks, 3, 0, by, "pool", 4)
    steps = [Counter(tasks[i].metadata["changes_mind"] for i in pool[s:s + 4]) for s in range(0, 40, 4)]
    assert all(step == {False: 1, True: 3} for step in steps)
    even = epoch_order(tasks, 3, 0, by)
    assert [Counter(tasks[i].metadata["changes_mind"] for i in even[s:s + 4]) for s in range(0, 20, 4)] == [{False: 2, True: 2}] * 5
    # a step smaller than the kinds: no floor, and every prefix stays within one task of the pool's proportions
    single = epoch_order(tasks, 3, 0, by, "pool", 1)
    assert sorted(single) == list(range(40))
    for n in range(1, 41):
        assert abs(sum(not tasks[i].metadata["changes_mind"] for i in single[:n]) - n / 4) <= 1


def test_pool_shares_and_the_weighted_mean_by_kind():
    from muarl.train.trainer import pool_shares, weighted_by_kind

    tasks = [kinds_task(i, 1 + (i % 2), i < 6) for i in range(8)]  # changes: 0-5; level 2: the odd ones
    shares = pool_shares(tasks, ["difficulty", "changes_mind"])
    assert shares == {"difficulty=1,changes_mind=False": 0.125, "difficulty=1,changes_mind=True": 0.375,
                      "difficulty=2,changes_mind=False": 0.125, "difficulty=2,changes_mind=True": 0.375}
    values = {"difficulty=1,changes_mind=False": 1.0, "difficulty=1,changes_mind=True": 0.5,
              "difficulty=2,changes_mind=False": 1.0, "difficulty=2,changes_mind=True": 0.0}
    assert weighted_by_kind(values, shares) == 0.125 + 0.1875 + 0.125  # 0.4375, where the plain mean is 0.625
    del values["difficulty=2,changes_mind=True"]  # a kind none of whose episodes was scored: the rest reweighted
    assert weighted_by_kind(values, shares) == (0.125 + 0.1875 + 0.125) / 0.625


def test_a_stratified_order_covers_every_kind_in_each_run_of_that_many_tasks():
    """Issue 21: a plain shuffle of a pool where one kind is 7 tasks in 100 leaves it out of whole steps; taking the
    kinds in turn puts each in every run of 4 tasks, while the order stays a seeded permutation of the pool, and
    a run without stratify_by keeps the old order (a resumed run draws what it drew before)."""
    import random

    from muarl.train.trainer import epoch_order

    tasks = [kinds_task(i, 2 if i % 10 in (0, 5) else 1, i % 3 == 0) for i in range(100)]
    kinds = {(t.difficulty, t.metadata["changes_mind"]) for t in tasks}
    assert len(kinds) == 4 and sum(t.difficulty == 2 and t.metadata["changes_mind"] for t in tasks) == 7
    old = list(range(100))
    random.Random("7/epoch/0").shuffle(old)
    assert epoch_order(tasks, 7, 0) == old
    plain = [{(tasks[i].difficulty, tasks[i].metadata["changes_mind"]) for i in old[s:s + 8]} for s in range(0, 40, 8)]
    assert any(len(step) < 4 for step in plain)  # the plain shuffle misses a kind in some step of 8
    order = epoch_order(tasks, 7, 0, ["difficulty", "changes_mind"])
    assert sorted(order) == list(range(100)) and order == epoch_order(tasks, 7, 0, ["difficulty", "changes_mind"])
    assert order != epoch_order(tasks, 7, 1, ["difficulty", "changes_mind"])
    rarest = min(sum((t.difficulty, t.metadata["changes_mind"]) == k for t in tasks) for k in kinds)
    for start in range(0, 4 * rarest, 4):
        assert {(tasks[i].difficulty, tasks[i].metadata["changes_mind"]) for i in order[start:start + 4]} == kinds
