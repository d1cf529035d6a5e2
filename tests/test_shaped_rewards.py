"""Rewards shaped from the trajectory checks (``process``, ``checklist``) and the efficiency costs.

Specification: every shaped reward keeps ``success`` the benchmark's verdict. ``process`` pays a success in
full only when it passed the domain's hard process checks (confirmed before write, grounded claims), else
``violation_reward``; failures earn 0. ``checklist`` pays a success 1.0 and a failure ``partial_weight`` times
the share of its sub-tasks done (gold writes reached with their arguments, required outputs told from a
source), writes that match no gold write taking reached ones back. The costs apply where the reward is
positive: per agent turn, and per agent turn after the task was complete. Hand-built trajectories on a
clinic-lite task whose patient changes their mind (phone 555-323-4178, then 555-361-1921) and asks a fee (175).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from muarl.domains import load_domain
from muarl.domains.base import ToolError
from muarl.reward import RewardSpec, make_reward, outcome_reward, parse_reward_flag, reward_from_setting
from muarl.rollout.world import WorldConfig, build_world
from muarl.train.grpo import group_advantages
from muarl.types import Message, ToolCall

EMAIL, FIRST, FINAL, FEE = "benedikt.nakamura69@example.com", "555-323-4178", "555-361-1921", "175"
ASK = f"I'm Benedikt Nakamura, my email is {EMAIL}. I have a new phone number, {FIRST}. Can you update it?"


@pytest.fixture(scope="module")
def lite():
    return load_domain("clinic-lite")


@pytest.fixture(scope="module")
def task(lite):
    task = lite.task("clinic-lite-test-0001")
    assert task.metadata.get("changes_mind") and task.outputs == [FEE]  # the task the trajectories below are written for
    return task


class Dialogue:
    """A trajectory written by hand, its tool calls run on a real state (so the final hash is the real one)."""

    def __init__(self, domain, task):
        self.domain, self.state = domain, domain.new_state(task)
        self.messages = [Message(role="system", content=domain.system_prompt(task))]

    def user(self, text):
        self.messages.append(Message(role="user", content=text))
        return self

    def says(self, text):
        self.messages.append(Message(role="assistant", content=text))
        return self

    def calls(self, tool, **arguments):
        call = ToolCall(id=f"c{len(self.messages)}", name=tool, arguments=json.dumps(arguments))
        try:
            result = self.domain.run_tool(self.state, tool, arguments)
        except ToolError as exc:
            result = f"Error: {exc}"
        self.messages += [Message(role="assistant", content=None, tool_calls=[call]),
                          Message(role="tool", content=result, tool_call_id=call.id, name=tool)]
        return self

    @property
    def turns(self):
        return sum(m.role == "assistant" for m in self.messages)

    def score(self, fn, task):
        return fn(self.domain, task, self.state.hash(), self.messages, self.turns)


def opening(lite, task):
    return Dialogue(lite, task).user(ASK).calls("find_patient_by_email", email=EMAIL) \
        .says(f"I will change the phone number of P716 to {FIRST}. Shall I proceed?") \
        .user(f"Actually, wait: make it {FINAL} instead.")


def fee_answer(d, look_up=True):
    d.user("What would I pay for a visit with Dr. Hana Kowalski?")
    if look_up:
        d.calls("find_doctor", name="Dr. Hana Kowalski")
    return d.says(f"A visit with Dr. Hana Kowalski costs {FEE} dollars.").user("###STOP###")


def careful(lite, task):
    """Re-confirms the revised value, writes it, looks the fee up: what the clinic's policy asks."""
    d = opening(lite, task).says(f"I will change your phone number to {FINAL}. Shall I proceed?").user("Yes, please.")
    d.calls("update_contact_info", patient_id="P716", phone=FINAL).says("Your phone number has been updated.")
    return fee_answer(d)


def hasty(lite, task):
    """Writes the revised value without asking again: solved, against the policy (the outcome-trained habit)."""
    d = opening(lite, task).calls("update_contact_info", patient_id="P716", phone=FINAL).says("Your phone number has been updated.")
    return fee_answer(d)


def guessed_fee(lite, task):
    """Confirms and writes properly, then tells the fee without looking it up (right by luck: ungrounded)."""
    d = opening(lite, task).says(f"I will change your phone number to {FINAL}. Shall I proceed?").user("Yes.")
    d.calls("update_contact_info", patient_id="P716", phone=FINAL).says("Your phone number has been updated.")
    return fee_answer(d, look_up=False)


# ---------------------------------------------------------------------------- process

def test_process_pays_a_careful_success_in_full(lite, task):
    info = careful(lite, task).score(make_reward("process"), task)
    assert (info.reward, info.success, info.components) == (1.0, True, {"outcome": 1.0, "process": 1.0})
    assert "violations" not in info.details


def test_process_pays_nothing_for_a_success_that_wrote_the_unconfirmed_revision(lite, task):
    d = hasty(lite, task)
    assert d.score(outcome_reward, task).reward == 1.0  # the bit cannot see it
    info = d.score(make_reward("process"), task)
    assert info.reward == 0.0 and info.success  # shaping never changes what counts as solved
    assert info.components == {"outcome": 1.0, "process": 0.0}
    assert [v.split(":")[0] for v in info.details["violations"]] == ["confirmed_before_write"]
    assert d.score(make_reward("process", violation_reward=0.25), task).reward == 0.25
    # the gates are the domain's to name: a world whose policy does not make confirmation a hard rule pays it in full
    lenient = replace(lite, process_checks=("grounded_actions", "grounded_facts"))
    assert make_reward("process")(lenient, task, d.state.hash(), d.messages, d.turns).reward == 1.0


def test_process_pays_nothing_for_an_ungrounded_fact_unless_that_gate_is_dropped(lite, task):
    d = guessed_fee(lite, task)
    info = d.score(make_reward("process"), task)
    assert info.reward == 0.0 and info.success and [v.split(":")[0] for v in info.details["violations"]] == ["grounded_facts"]
    assert d.score(make_reward("process", checks=["confirmed_before_write"]), task).reward == 1.0


def test_a_fraction_for_a_breach_is_the_outcome_in_a_group_with_no_clean_success(lite, task):
    """GRPO standardises rewards within a group, and (r - mean) / std does not change when every reward is scaled:
    in a group whose only successes broke the policy, ``violation_reward: 0.1`` gives the breach exactly the
    outcome's advantage, and only 0 takes it away. The fraction acts in groups that also hold a clean success."""
    failure = opening(lite, task).user("###STOP###")
    group = (hasty(lite, task), failure, failure, failure)
    rewards = {"outcome": make_reward("outcome"), "process10": make_reward("process", violation_reward=0.1), "process0": make_reward("process")}
    paid = {name: [d.score(fn, task).reward for d in group] for name, fn in rewards.items()}
    assert paid == {"outcome": [1.0, 0, 0, 0], "process10": [0.1, 0, 0, 0], "process0": [0.0, 0, 0, 0]}
    adv = {k: group_advantages(torch.tensor([v]))[0] for k, v in paid.items()}
    assert adv["outcome"][0].item() == pytest.approx(1.5, abs=1e-4)  # (1 - 1/4) / std, std = 1/2 (Bessel)
    assert torch.allclose(adv["process10"], adv["outcome"], atol=1e-4)
    assert torch.count_nonzero(adv["process0"]) == 0
    # beside a clean success the fraction does act: the breach sits just above the failures, far below the clean one
    mixed = [d.score(rewards["process10"], task).reward for d in (careful(lite, task), hasty(lite, task), failure, failure)]
    a = group_advantages(torch.tensor([mixed]))[0]
    assert mixed == [1.0, 0.1, 0, 0] and a[0] > 0 and a[1] < 0 and a[1] > a[2]


def test_scaled_by_the_verdicts_std_a_fraction_for_a_breach_keeps_its_size(lite, task):
    """``advantage_std: verdict``: the same group as above, standardised by the spread of the benchmark's verdicts
    (1, 0, 0, 0) rather than of the rewards, pays the breach a tenth of the outcome's advantage, not all of it."""
    failure = opening(lite, task).user("###STOP###")
    group = (hasty(lite, task), failure, failure, failure)
    infos = [d.score(make_reward("process", violation_reward=0.1), task) for d in group]
    rewards, verdicts = torch.tensor([[i.reward for i in infos]]), torch.tensor([[float(i.success) for i in infos]])
    assert verdicts.tolist() == [[1.0, 0, 0, 0]]  # shaping never changes what counts as solved
    outcome = group_advantages(verdicts)[0]
    assert torch.allclose(group_advantages(rewards, std_of=verdicts)[0], 0.1 * outcome, atol=1e-5)
    # beside a clean success the breach still sits between it and the failures
    mixed = [d.score(make_reward("process", violation_reward=0.1), task) for d in (careful(lite, task), hasty(lite, task), failure, failure)]
    a = group_advantages(torch.tensor([[i.reward for i in mixed]]), std_of=torch.tensor([[float(i.success) for i in mixed]]))[0]
    assert a[0] > a[1] > a[2] and a[1] < 0


def test_process_earns_nothing_on_a_failure_however_well_behaved(lite, task):
    d = opening(lite, task).says(f"I will change your phone number to {FINAL}. Shall I proceed?").user("Yes.") \
        .calls("update_contact_info", patient_id="P716", phone=FINAL).says("Your phone number has been updated.").user("###STOP###")
    info = d.score(make_reward("process"), task)  # the fee was never told
    assert (info.reward, info.success, info.components) == (0.0, False, {"outcome": 0.0, "process": 0.0})


# ---------------------------------------------------------------------------- checklist

def test_checklist_pays_a_success_most(lite, task):
    info = careful(lite, task).score(make_reward("checklist"), task)
    assert info.reward == 1.0 and info.success
    assert info.components == {"outcome": 1.0, "writes": 1.0, "extra_writes": 0.0, "outputs": 1.0, "credit": 1.0}


def test_checklist_gives_half_credit_for_the_right_write_without_the_fee(lite, task):
    d = opening(lite, task).says(f"I will change your phone number to {FINAL}. Shall I proceed?").user("Yes.") \
        .calls("update_contact_info", patient_id="P716", phone=FINAL).says("Done.").user("###STOP###")
    info = d.score(make_reward("checklist", partial_weight=0.5), task)
    assert not info.success and info.reward == pytest.approx(0.5 * 1 / 2)  # 1 of 2 sub-tasks, at half weight
    assert info.components["writes"] == 1.0 and info.components["outputs"] == 0.0
    explicit = opening(lite, task).calls("update_contact_info", patient_id="P716", phone=FINAL, email=None).says("Done.").user("###STOP###")
    assert explicit.score(make_reward("checklist"), task).components["writes"] == 1.0  # an explicit null is no other value
    nothing = opening(lite, task).says("Goodbye.").user("###STOP###").score(make_reward("checklist"), task)
    assert nothing.reward == 0.0 and nothing.components["credit"] == 0.0


def test_checklist_gives_no_credit_for_the_first_value_the_patient_took_back(lite, task):
    d = opening(lite, task).calls("update_contact_info", patient_id="P716", phone=FIRST).says("Updated.").user("###STOP###")
    info = d.score(make_reward("checklist"), task)
    assert info.reward == 0.0 and info.components["writes"] == 0.0 and info.components["extra_writes"] == 1.0


def naive_credit(task, messages):
    """The naive checklist the real one must not be: a gold write counts if any call made it, an output if it was said."""
    calls = [(c.name, json.loads(c.arguments)) for m in messages if m.tool_calls for c in m.tool_calls]
    wanted = [a for a in task.actions if a.name == "update_contact_info"]
    said = " ".join(m.content for m in messages if m.role == "assistant" and m.content and not m.tool_calls)
    done = sum((a.name, a.kwargs) in calls for a in wanted) + sum(o in said for o in task.outputs)
    return done / (len(wanted) + len(task.outputs))


def test_checklist_gamed_by_saying_the_output_without_doing_anything_earns_nothing(lite, task):
    d = Dialogue(lite, task).user(ASK).says(f"Visits here cost {FEE} dollars. Goodbye!").user("###STOP###")
    assert naive_credit(task, d.messages) == 0.5  # the naive checklist would pay a guessed fee and no work
    info = d.score(make_reward("checklist"), task)
    assert info.reward == 0.0 and info.components["outputs"] == 0.0 and not info.success


def test_checklist_gamed_by_spraying_writes_earns_less_than_one_honest_write(lite, task):
    d = opening(lite, task)
    for value in (FIRST, FINAL, FINAL, "555-000-0000", FINAL):  # every candidate, and the right one again and again
        d.calls("update_contact_info", patient_id="P716", phone=value)
    d.says("Updated.").user("###STOP###")
    assert naive_credit(task, d.messages) == 0.5
    info = d.score(make_reward("checklist"), task)
    assert info.components["writes"] == 1.0 and info.components["extra_writes"] == 4.0
    assert info.reward == 0.0  # four extra writes take the one reached back
    assert d.score(outcome_reward, task).state_match  # the state even ended right: only the sprayed calls tell


# ---------------------------------------------------------------------------- efficiency costs

def test_turn_cost_on_any_reward_and_only_where_it_is_positive(lite, task):
    d = careful(lite, task)
    info = d.score(make_reward("process", turn_cost=0.02), task)
    assert info.reward == pytest.approx(1.0 - 0.02 * d.turns) and info.success
    assert info.components == {"outcome": 1.0, "process": 1.0, "base": 1.0, "turn_cost": pytest.approx(-0.02 * d.turns)}
    failed = opening(lite, task).says("Goodbye.").user("###STOP###").score(make_reward("outcome", turn_cost=0.02), task)
    assert failed.reward == 0.0 and failed.components == {}  # a cost on failures would pay for failing fast
    assert d.score(make_reward("outcome", turn_cost=0.5, cost_floor=0.3), task).reward == 0.3


def test_late_turn_cost_counts_only_the_turns_after_the_task_was_complete(lite, task):
    d = careful(lite, task)
    assert d.score(make_reward("outcome", late_turn_cost=0.1), task).reward == 1.0  # it stopped when done
    chatty = careful(lite, task)
    chatty.messages.pop()  # the user's stop: the agent talks on
    for _ in range(3):
        chatty.says("Is there anything else I can help you with?").user("No, thanks.")
    info = chatty.score(make_reward("outcome", late_turn_cost=0.1), task)
    assert info.reward == pytest.approx(0.7) and info.components["late_turn_cost"] == pytest.approx(-0.3) and info.success


# ---------------------------------------------------------------------------- naming rewards in configs

def test_rewards_by_spec_and_one_line_errors():
    assert reward_from_setting(None) is outcome_reward and reward_from_setting("outcome") is outcome_reward
    assert reward_from_setting({"name": "process", "options": {"violation_reward": 0.5}}) is not None
    assert reward_from_setting(RewardSpec(name="checklist")) is not None
    refusals = [
        (lambda: make_reward("process", bogus=1), r"reward 'process' has no option 'bogus'; its options are \['checks', 'cost_floor'"),
        (lambda: make_reward("process", violation_reward=1.0), r"violation_reward must be in \[0, 1\)"),
        (lambda: make_reward("process", checks=["turn_limit"]), r"'turn_limit' cannot gate a reward; choose from"),
        (lambda: make_reward("checklist", partial_weight=-0.1), r"partial_weight must be in \[0, 1\)"),
        (lambda: make_reward("outcome", turn_cost="a lot"), r"turn_cost must be a number >= 0"),
        (lambda: reward_from_setting({"name": "process", "option": {}}), r"invalid reward .*option: Extra inputs are not permitted"),
        (lambda: make_reward("procces"), r"unknown reward 'procces'; choose one of \['checklist', 'outcome', 'process'"),
    ]
    for call, message in refusals:
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert "\n" not in str(err.value)


def test_cli_flag_takes_a_name_or_an_inline_mapping():
    assert parse_reward_flag("process") == "process"
    assert parse_reward_flag("{name: process, options: {violation_reward: 0.2}}") == {"name": "process", "options": {"violation_reward": 0.2}}
    with pytest.raises(ValueError, match="give a name, or a mapping"):
        parse_reward_flag("{options: {}}")


def test_world_yaml_names_a_reward_with_options(tmp_path, lite, task):
    path = tmp_path / "world.yaml"
    path.write_text("domain: clinic-lite\nreward:\n  name: process\n  options: {violation_reward: 0.25, late_turn_cost: 0.1}\n")
    world = build_world(WorldConfig.load(path))
    assert world.config.reward == RewardSpec(name="process", options={"violation_reward": 0.25, "late_turn_cost": 0.1})
    assert hasty(lite, task).score(world.reward_fn, task).reward == 0.25
    assert build_world(WorldConfig(domain="clinic-lite", reward="checklist")).config.reward == "checklist"  # the plain form
