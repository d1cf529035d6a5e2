"""Choosing the checkpoint on validation: the record, the pruning that spares the choice, and the trainer's loop
(candidate 0 is the starting weights, validation is outside the time box, a resume re-validates what a crash lost)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from muarl.train import trainer as trainer_module
from muarl.train.checkpoint import save_checkpoint
from muarl.train.config import GRPOConfig, ModelConfig
from muarl.train.selection import Selection, chosen_model
from muarl.train.trainer import GRPOTrainer
from test_trainer import parity_reward


def config(out, **changes) -> GRPOConfig:
    base = {"out": str(out), "domain": "clinic-lite", "model": ModelConfig(name="tiny-random", precision="fp32"), "steps": 3,
            "tasks_per_step": 1, "group_size": 2, "max_turns": 2, "max_new_tokens": 4, "max_context": 1024, "lr": 1e-3,
            "plot": False, "save_every": 1, "keep_checkpoints": 1, "val_holdout": 2, "val_every": 1,
            "select_checkpoint": "best_val"}
    return GRPOConfig(**{**base, **changes})


def test_the_best_is_the_highest_success_and_a_tie_keeps_the_earlier_candidate(tmp_path):
    sel = Selection()
    assert sel.best is None and sel.candidate(0) is None
    assert sel.add(0, 0.5, 0.5, 10.0, 20.0)
    assert not sel.add(1, 0.25, 0.25, 10.0, 20.0)
    assert sel.candidate(1)["success"] == 0.25 and sel.candidate(2) is None
    assert not sel.add(2, 0.5, 0.5, 10.0, 20.0)  # equal to the start: the start stays chosen
    assert sel.add(3, 0.75, 0.75, 10.0, 20.0) and sel.best_step == 3
    assert sel.add(3, 0.0, 0.0, 5.0, 5.0) is False and sel.best_step == 0  # a re-run of step 3 replaces its record
    assert sel.seconds() == (35.0, 65.0)
    sel.truncate_after(1)
    assert [r["step"] for r in sel.history] == [0, 1]
    (tmp_path / "checkpoints").mkdir()
    sel.save(tmp_path)
    assert Selection.load(tmp_path).history == sel.history
    assert json.loads((tmp_path / "checkpoints" / "selection.json").read_text())["best"]["step"] == 0
    assert chosen_model(tmp_path, "cold-start") == (0, "cold-start")  # step 0: the weights the run started from


def test_the_chosen_checkpoint_survives_pruning_and_its_loss_is_said(tmp_path):
    model = torch.nn.Linear(2, 2)
    model.save_pretrained = lambda path: (path.mkdir(parents=True), torch.save(model.state_dict(), path / "w.pt"))
    tokenizer = SimpleNamespace(save_pretrained=lambda path: None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, tokenizer, optimizer, scheduler, {}, keep=1, spare=1)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-000001", "step-000003"]
    save_checkpoint(tmp_path, 4, model, tokenizer, optimizer, scheduler, {}, keep=1, spare=4)  # a new choice frees the old
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-000004"]
    sel = Selection()
    sel.add(2, 1.0, 1.0, 0.0, 0.0)
    sel.save(tmp_path)
    with pytest.raises(FileNotFoundError, match="step-000002"):
        chosen_model(tmp_path, "cold-start")


def test_ranked_by_reward_a_shaped_run_keeps_the_step_that_solved_fewer_but_broke_no_rule(tmp_path):
    """process pays 0.25 for a success that wrote an unconfirmed value: 3 of 4 solved, all unconfirmed (0.1875)
    loses to 2 of 4 solved, all confirmed (0.5) when ranked by reward, and wins when ranked by success."""
    by_reward, by_success = Selection(metric="reward"), Selection()
    for sel in (by_reward, by_success):
        sel.add(0, 0.25, 0.25, 1.0, 1.0)
        sel.add(1, 0.5, 0.5, 1.0, 1.0)
        sel.add(2, 0.75, 0.1875, 1.0, 1.0)
    assert by_reward.best_step == 1 and by_success.best_step == 2
    (tmp_path / "checkpoints").mkdir()
    by_reward.save(tmp_path)
    assert Selection.load(tmp_path).best_step == 1  # the record keeps what it was ranked by
    old = {"best": None, "history": by_success.history}  # a record written before select_on existed
    (tmp_path / "checkpoints" / "selection.json").write_text(json.dumps(old))
    assert Selection.load(tmp_path).metric == "success"


def test_config_needs_a_validation_split_to_choose_on(tmp_path):
    with pytest.raises(ValueError, match="val_holdout and val_every"):
        config(tmp_path, val_holdout=0)
    with pytest.raises(ValueError, match="val_holdout and val_every"):
        config(tmp_path, val_every=0)
    with pytest.raises(ValueError, match="select_checkpoint: best_val too"):
        config(tmp_path, select_checkpoint="last", select_on="reward")


def scripted_validation(trainer, successes: list[float], paid: list[float] | None = None):
    """Run the real validation episodes, then give the i-th validation the success ``successes[i]``, each success
    paid ``paid[i]`` (1 unless given; less is a shaped reward's discount): which candidate is best is then known by
    construction."""
    real, calls = trainer.run_episodes, []

    def run(tasks, trials, temperature, seed, desc, out=None):
        episodes = real(tasks, trials, temperature, seed, desc, out)
        if temperature == 0.0:
            wins = round(successes[len(calls)] * len(episodes))
            calls.append(desc)
            for i, e in enumerate(episodes):
                pay = paid[len(calls) - 1] if paid else 1.0
                e.reward = e.reward.model_copy(update={"success": i < wins, "reward": pay * (i < wins)})
        return episodes

    trainer.run_episodes = run
    return calls


def test_a_run_hands_on_its_best_validated_step_and_keeps_its_weights(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "r"), progress=False)
    assert not {t.id for t in trainer.val_tasks} & {t.id for t in trainer.tasks} and len(trainer.val_tasks) == 2
    calls = scripted_validation(trainer, [0.5, 0.0, 1.0, 0.5])  # start, step 1, step 2, step 3
    trainer.start()
    trainer.train()
    assert calls == ["step 0 validation", "step 1 validation", "step 2 validation", "step 3 validation"]
    step, model = chosen_model(tmp_path / "r", "tiny-random")
    assert step == 2 and model.endswith("step-000002/model")
    assert sorted(p.name for p in (tmp_path / "r" / "checkpoints").glob("step-*")) == ["step-000002", "step-000003"]
    assert sorted(p.name for p in (tmp_path / "r" / "validation").iterdir())[0] == "step-000000.jsonl"
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["val/success_rate"] for r in rows] == [0.0, 1.0, 0.5] and all(r["val/seconds"] > 0 for r in rows)


def test_a_run_ranked_by_reward_chooses_on_the_reward_its_validation_paid(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "r", steps=2, select_on="reward"), progress=False)
    scripted_validation(trainer, [0.5, 1.0, 0.5], paid=[1.0, 0.25, 1.0])  # step 1 solves both, each paid a quarter
    trainer.start()
    trainer.train()
    assert [(r["success"], r["reward"]) for r in Selection.load(tmp_path / "r").history] == [(0.5, 0.5), (1.0, 0.25), (0.5, 0.5)]
    assert chosen_model(tmp_path / "r", "cold-start") == (0, "cold-start")  # by success it would be step 1


def test_a_run_whose_steps_only_got_worse_hands_back_its_start(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "r", steps=2), progress=False)
    scripted_validation(trainer, [0.5, 0.0, 0.5])
    trainer.start()
    trainer.train()
    assert chosen_model(tmp_path / "r", "cold-start") == (0, "cold-start")


def test_a_resume_revalidates_a_checkpoint_whose_validation_record_a_crash_lost(tmp_path):
    first = GRPOTrainer(config(tmp_path / "r", steps=1), progress=False)
    scripted_validation(first, [0.0, 0.5])
    first.start()
    first.train()
    record = tmp_path / "r" / "checkpoints" / "selection.json"
    saved = json.loads(record.read_text())
    saved["history"] = saved["history"][:1]  # killed after checkpointing step 1, before recording its validation
    record.write_text(json.dumps(saved))
    resumed = GRPOTrainer(config(tmp_path / "r", steps=2), progress=False)
    calls = scripted_validation(resumed, [0.5, 1.0])
    resumed.start(resume=True)
    resumed.train()
    assert calls == ["step 1 validation", "step 2 validation"]
    assert [r["step"] for r in Selection.load(tmp_path / "r").history] == [0, 1, 2]
    assert chosen_model(tmp_path / "r", "tiny-random")[0] == 2


def test_validation_does_not_count_against_the_time_box(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(
        monotonic=lambda: clock[0], perf_counter=lambda: clock[0], process_time=lambda: clock[0]))
    trainer = GRPOTrainer(config(tmp_path / "r", steps=10), progress=False)
    trainer.start()

    def slow_validation(tasks, trials, temperature, seed, desc, out=None):
        clock[0] += 500.0  # validation far slower than a step
        return []

    def step() -> dict[str, float]:  # a step of 100 s on the fake clock, then its validation
        clock[0] += 100.0
        trainer.step += 1
        return trainer.validate()

    monkeypatch.setattr(trainer, "run_episodes", slow_validation)
    monkeypatch.setattr(trainer, "train_step", step)
    trainer.train(time_limit_s=350.0)
    assert trainer.step == 3  # as without validation (three 100 s steps fit a 350 s box)
    assert trainer.validation_seconds == trainer.validation_cpu_seconds == 4 * 500.0  # the start and each step
    assert trainer.selection.history == []  # no validation episode was scored: no candidate (errors are not 0s)


def test_the_validation_split_is_a_seeded_draw_that_covers_every_kind(tmp_path):
    """The split's last tasks (the old rule) can all be one kind; a draw by kind in turn validates each."""
    kinds = ["difficulty", "changes_mind"]
    trainer = GRPOTrainer(config(tmp_path / "r", val_holdout=8, stratify_by=kinds), progress=False)
    picked = [trainer_module.task_kind(t, kinds) for t in trainer.val_tasks]
    assert len(set(picked)) == 4 and all(picked.count(k) == 2 for k in set(picked))
    again = GRPOTrainer(config(tmp_path / "s", val_holdout=8, stratify_by=kinds), progress=False)
    other = GRPOTrainer(config(tmp_path / "t", val_holdout=8, stratify_by=kinds, seed=1), progress=False)
    assert [t.id for t in again.val_tasks] == [t.id for t in trainer.val_tasks] != [t.id for t in other.val_tasks]
    for t in (trainer, again, other):
        t.close()


def trainable(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.params]


def learning(out, rollback_below: float | None = 0.25, **changes) -> GRPOTrainer:
    """A trainer whose groups carry signal (the parity reward varies within a group of 4; the context holds the
    clinic's system turn and a reply), so every step moves weights."""
    return GRPOTrainer(config(out, group_size=4, max_context=4096, rollback_below=rollback_below, **changes), reward_fn=parity_reward,
                       progress=False)


def test_a_step_that_falls_below_the_best_is_not_built_on_the_run_goes_back_to_its_start(tmp_path):
    """Issue 21: a first update that broke level 2 was trained on for the rest of the box. With rollback_below the
    next step starts from the best candidate instead: here the start (step 0), its weights and a fresh optimizer."""
    trainer = learning(tmp_path / "r", steps=1)
    start = trainable(trainer)
    scripted_validation(trainer, [0.5, 0.0])  # step 1 falls 0.5 under the start
    trainer.start()
    trainer.train()
    assert all(torch.equal(p, s) for p, s in zip(trainer.params, start)) and not trainer.optimizer.state
    assert trainer.step == 1 and trainer.position == 1  # the count and the data move on
    row = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["rolled_back_to"] == 0.0 and row["update_size"] > 0  # the step did move the weights


def test_after_a_roll_back_to_the_start_the_next_update_skips_the_reference_again(tmp_path):
    """Back at the starting weights the policy is the reference again (its KL 0 and the forward skipped, as at step
    1); a roll back to a later checkpoint is not, and a resumed run knows which it is."""
    from test_trainer import counting_reference

    trainer = learning(tmp_path / "r", steps=2, kl_coef=0.1)
    runs = counting_reference(trainer)
    scripted_validation(trainer, [0.5, 0.0, 0.5])  # step 1 falls under the start and is rolled back
    trainer.start()
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("rolled_back_to") for r in rows] == [0.0, None] and [r["kl"] for r in rows] == [0.0, 0.0]
    assert not runs and not trainer.policy_is_reference  # step 2's update moved it

    back = learning(tmp_path / "b", steps=3, kl_coef=0.1)
    runs = counting_reference(back)
    scripted_validation(back, [0.0, 1.0, 1.0, 0.5])  # step 3 falls under step 2: back to step 2's checkpoint
    back.start()
    back.train()
    assert runs and not back.policy_is_reference
    resumed = learning(tmp_path / "b", steps=3, kl_coef=0.1)
    resumed.start(resume=True)
    assert not resumed.policy_is_reference
    for t in (trainer, back, resumed):
        t.close()


def test_a_fall_within_the_tolerance_trains_on_and_a_fall_past_it_returns_to_the_best_checkpoint(tmp_path):
    within = learning(tmp_path / "w", rollback_below=0.5, steps=1)
    start = trainable(within)
    scripted_validation(within, [0.5, 0.0])  # exactly the tolerance: not more than it
    within.start()
    within.train()
    assert any(not torch.equal(p, s) for p, s in zip(within.params, start))
    assert "rolled_back_to" not in json.loads((tmp_path / "w" / "metrics.jsonl").read_text())

    back = learning(tmp_path / "b", steps=2)
    scripted_validation(back, [0.0, 1.0, 0.5])  # step 1 is best, step 2 falls 0.5 under it
    back.start()
    back.train()
    saved = learning(tmp_path / "b", steps=2)
    saved._load(tmp_path / "b" / "checkpoints" / "step-000001")
    assert all(torch.equal(p, q) for p, q in zip(back.params, saved.params))
    assert {s["step"].item() for s in back.optimizer.state.values()} == {1}  # step 1's optimizer, not step 2's
    assert back.step == 2 and back.position == 2
    saved.close()


def test_a_run_resumed_after_a_roll_back_lands_where_the_uninterrupted_run_does(tmp_path):
    straight = learning(tmp_path / "a", steps=3)
    scripted_validation(straight, [0.5, 0.0, 0.5, 0.5])
    straight.start()
    straight.train()

    first = learning(tmp_path / "b", steps=1)
    scripted_validation(first, [0.5, 0.0])
    first.start()
    first.train()
    resumed = learning(tmp_path / "b", steps=3)
    scripted_validation(resumed, [0.5, 0.5])  # steps 2 and 3
    resumed.start(resume=True)  # its checkpoint is step 1, which the run had rolled back from
    assert resumed.step == 1 and not resumed.optimizer.state
    resumed.train()
    for p, q in zip(straight.params, resumed.params):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)
    rows = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("rolled_back_to") for r in rows] == [0.0, None, None]


def test_rollback_needs_a_validated_choice(tmp_path):
    with pytest.raises(ValueError, match="rollback_below"):
        config(tmp_path, select_checkpoint="last", rollback_below=0.1)


def test_a_candidate_that_lost_a_kind_is_never_the_best_however_it_scores_overall(tmp_path):
    """Issue 21, seed 0 on the Intel machine: step 1 took level 2 from 16 to 10 of 16 validation tasks while other
    kinds gained, so overall it fell only 9.4 points. Hand-computed with a limit of 0.25 (more than 4 of 16)."""
    sel = Selection(kind_fall_limit=0.25)
    assert sel.add(0, 0.5, 0.5, 1.0, 1.0, {"level 1": 0.5, "level 2": 1.0})
    assert not sel.add(1, 0.75, 0.75, 1.0, 1.0, {"level 1": 1.0, "level 2": 0.625})  # level 2 fell 0.375: lost
    assert sel.lost_kinds(1) == ["level 2"] and sel.best_step == 0
    assert sel.add(2, 0.625, 0.625, 1.0, 1.0, {"level 1": 0.5, "level 2": 0.75})  # a fall of exactly 0.25 is kept
    assert sel.lost_kinds(2) == [] and sel.lost_kinds(5) == [] and sel.best_step == 2
    (tmp_path / "checkpoints").mkdir()
    sel.save(tmp_path)
    again = Selection.load(tmp_path)  # the record carries its limit: a resume ranks as the run did
    assert again.kind_fall_limit == 0.25 and again.best_step == 2
    assert Selection(history=sel.history).best_step == 1  # without the limit, overall success alone decides


def scripted_kinds(trainer, failing: list[set]) -> None:
    """Run the real validation episodes, then let the i-th validation solve every task except those of the kinds
    (:func:`task_kind` tuples) in ``failing[i]``."""
    real, calls = trainer.run_episodes, []

    def run(tasks, trials, temperature, seed, desc, out=None):
        episodes = real(tasks, trials, temperature, seed, desc, out)
        if temperature == 0.0:
            kind = {t.id: trainer_module.task_kind(t, trainer.cfg.stratify_by) for t in tasks}
            fails = failing[len(calls)]
            calls.append(desc)
            for e in episodes:
                win = kind[e.task_id] not in fails
                e.reward = e.reward.model_copy(update={"success": win, "reward": float(win)})
        return episodes

    trainer.run_episodes = run


def test_with_a_pool_mix_candidates_are_ranked_as_the_split_is_mixed(tmp_path):
    """Issue 21: validation holds each kind equally (2 of 8 here), so its plain success weights the kinds a change of
    mind is in (74% of clinic-lite's train tasks) at one half. The start solves only the kinds without a change of
    mind, step 1 only those with one: a tie on plain success (the start stays chosen), but with stratify_mix: pool
    step 1 is ranked by the split's mix and chosen."""
    kinds = ["difficulty", "changes_mind"]
    chosen = {}
    for mix in ("even", "pool"):
        trainer = learning(tmp_path / mix, rollback_below=None, stratify_by=kinds, stratify_mix=mix, val_holdout=8, steps=1)
        found = {trainer_module.task_kind(t, kinds) for t in trainer.val_tasks}
        assert sorted(trainer_module.task_kind(t, kinds) for t in trainer.val_tasks) == sorted(list(found) * 2)
        scripted_kinds(trainer, [{k for k in found if k[1]}, {k for k in found if not k[1]}])
        trainer.start()
        trainer.train()
        record = json.loads((tmp_path / mix / "checkpoints" / "selection.json").read_text())
        chosen[mix] = record["best"]["step"]
        row = json.loads((tmp_path / mix / "metrics.jsonl").read_text().splitlines()[0])
        assert row["val/success_rate"] == 0.5
        if mix == "pool":
            pool = trainer.world.tasks
            changing = sum(bool(t.metadata["changes_mind"]) for t in pool) / len(pool)
            assert 0.7 < changing < 0.8
            assert [r["success"] for r in record["history"]] == pytest.approx([1 - changing, changing])
            assert row["val/success_pool_weighted"] == pytest.approx(changing)
        trainer.close()
    assert chosen == {"even": 0, "pool": 1}


def test_a_pool_mix_needs_kinds(tmp_path):
    with pytest.raises(ValueError, match="stratify_mix"):
        config(tmp_path, stratify_mix="pool")


def test_a_step_that_lost_a_kind_is_rolled_back_though_it_gained_overall(tmp_path):
    kinds = ["difficulty", "changes_mind"]
    trainer = learning(tmp_path / "r", rollback_below=None, kind_fall_limit=0.25, stratify_by=kinds, val_holdout=8, steps=1)
    start = trainable(trainer)
    found = sorted({trainer_module.task_kind(t, kinds) for t in trainer.val_tasks})
    assert len(found) == 4
    kept, others = found[0], set(found[1:])
    scripted_kinds(trainer, [others, {kept}])  # the start solves one kind only; step 1 every kind but that one
    trainer.start()
    trainer.train()
    row = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["val/success_rate"] == 0.75 and row["val/kinds_lost"] == 1.0 and row["rolled_back_to"] == 0.0
    assert all(torch.equal(p, s) for p, s in zip(trainer.params, start)) and not trainer.optimizer.state
    record = json.loads((tmp_path / "r" / "checkpoints" / "selection.json").read_text())
    assert record["best"]["step"] == 0 and record["kind_fall_limit"] == 0.25
    assert len(record["history"][1]["kinds"]) == 4
    assert chosen_model(tmp_path / "r", "cold-start") == (0, "cold-start")


def test_kinds_are_compared_only_on_a_validated_choice_by_kind(tmp_path):
    with pytest.raises(ValueError, match="kind_fall_limit"):
        config(tmp_path, kind_fall_limit=0.25)  # no stratify_by: no kinds
    with pytest.raises(ValueError, match="kind_fall_limit"):
        config(tmp_path, select_checkpoint="last", stratify_by=["difficulty"], kind_fall_limit=0.25)


def test_the_rollbacks_of_a_record_are_counted_as_the_trainer_decided_them():
    """Hand-computed, limit 0.25 on kinds and a tolerance of 0.2 overall. Step 1 loses level 2 (a roll back); step 2
    is the new best; step 3 falls 0.25 under step 2 (a roll back, though it is above the start); step 4 falls 0.25
    under the best *now* (step 2), not under the best at the end of the record (step 5), so it is counted too."""
    sel = Selection(kind_fall_limit=0.25)
    sel.add(0, 0.5, 0.5, 1.0, 1.0, {"level 2": 1.0})
    sel.add(1, 0.75, 0.75, 1.0, 1.0, {"level 2": 0.5})
    sel.add(2, 0.875, 0.875, 1.0, 1.0, {"level 2": 1.0})
    sel.add(3, 0.625, 0.625, 1.0, 1.0, {"level 2": 1.0})
    sel.add(4, 0.625, 0.625, 1.0, 1.0, {"level 2": 1.0})
    sel.add(5, 1.0, 1.0, 1.0, 1.0, {"level 2": 1.0})
    assert [sel.falls(s, 0.2) for s in range(6)] == [False, True, False, True, True, False]
    assert sel.rollbacks(0.2) == 3 and sel.rollbacks(None) == 1  # without a tolerance only the lost kind counts
    sel.truncate_after(2)
    assert sel.rollbacks(0.2) == 1


def test_each_roll_back_multiplies_the_rate_of_every_later_step_and_a_resume_keeps_it(tmp_path):
    """Issue 21, bf16 seed 1: every update from the cold start was rolled back, and each retry, again AdamW's first
    (sign) step at the same rate, landed where the last had. With rollback_lr_factor 0.5 the retry after a roll back
    takes half the rate, the one after a second roll back a quarter; a run resumed after the roll back does too."""
    straight = learning(tmp_path / "a", steps=3, rollback_lr_factor=0.5)
    scripted_validation(straight, [0.5, 0.0, 0.0, 0.5])  # steps 1 and 2 fall under the start
    straight.start()
    straight.train()
    rows = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("rolled_back_to") for r in rows] == [0.0, 0.0, None]
    assert [r["lr"] for r in rows] == pytest.approx([1e-3, 5e-4, 2.5e-4])

    first = learning(tmp_path / "b", steps=1, rollback_lr_factor=0.5)
    scripted_validation(first, [0.5, 0.0])
    first.start()
    first.train()
    resumed = learning(tmp_path / "b", steps=2, rollback_lr_factor=0.5)
    scripted_validation(resumed, [0.5])
    resumed.start(resume=True)
    resumed.train()
    rows = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in rows] == pytest.approx([1e-3, 5e-4])
    for t in (straight, first, resumed):
        t.close()


def test_with_recovery_each_kept_step_takes_the_rate_back_up_to_the_configured_one(tmp_path):
    """rollback_lr_recovery: the cut is for the retry, not the rest of the run. A kept step multiplies the rate by
    1 / rollback_lr_factor, never over lr: step 1 falls (step 2 at half), step 2 is kept (step 3 at the full rate);
    and a resumed run counts the same way from the record."""
    run = learning(tmp_path / "a", steps=3, rollback_lr_factor=0.5, rollback_lr_recovery=True)
    scripted_validation(run, [0.5, 0.0, 0.5, 0.5])
    run.start()
    run.train()
    rows = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("rolled_back_to") for r in rows] == [0.0, None, None]
    assert [r["lr"] for r in rows] == pytest.approx([1e-3, 5e-4, 1e-3])
    resumed = learning(tmp_path / "a", steps=4, rollback_lr_factor=0.5, rollback_lr_recovery=True)
    resumed.start(resume=True)
    assert resumed.lr_scale == 1.0
    sel = Selection(history=[{"step": s, "success": v, "reward": v, "seconds": 0.0, "cpu_seconds": 0.0}
                             for s, v in enumerate([0.5, 0.0, 0.0, 0.5, 0.5, 0.5])])
    resumed.selection = sel  # two falls (a quarter), then two kept steps: a half, then the full rate again
    assert resumed.lr_scale == 1.0
    sel.truncate_after(3)
    assert resumed.lr_scale == 0.5
    sel.truncate_after(2)
    assert resumed.lr_scale == 0.25
    for t in (run, resumed):
        t.close()


def test_a_rate_cut_on_roll_back_needs_a_roll_back(tmp_path):
    with pytest.raises(ValueError, match="rollback_lr_factor"):
        config(tmp_path, rollback_lr_factor=0.5)  # neither rollback_below nor kind_fall_limit
    assert config(tmp_path, rollback_lr_factor=0.5, rollback_below=0.1).rollback_lr_factor == 0.5
    with pytest.raises(ValueError, match="rollback_lr_recovery"):
        config(tmp_path, rollback_below=0.1, rollback_lr_recovery=True)  # nothing to recover from
