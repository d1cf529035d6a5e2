"""``bench/unrequested_writes.py``: which episodes propose a write unasked, and its per-kind count of a GRPO round,
on episodes made by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from muarl.types import Episode, Message, RewardInfo

BENCH = Path(__file__).resolve().parents[2] / "bench" / "unrequested_writes.py"


def module():
    spec = importlib.util.spec_from_file_location("unrequested_writes_bench", BENCH)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def episode(task_id: str, solved: bool, proposes: bool) -> Episode:
    after_lookup = "I will update your phone to 555-0100, please confirm." if proposes else "What would you like to know?"
    messages = [Message(role="system", content="policy"), Message(role="user", content="I'm jo@x.org"),
                Message(role="assistant", content="Looking you up."), Message(role="tool", content="{...}"),
                Message(role="assistant", content=after_lookup), Message(role="user", content="What is the fee?")]
    return Episode(task_id=task_id, domain="clinic-lite", split="train", messages=messages, termination="user_stop",
                   reward=RewardInfo(reward=float(solved), success=solved, state_match=solved, final_hash="f",
                                     gold_hash="f" if solved else "g"))


def test_a_proposal_counts_only_between_the_first_tool_result_and_the_users_next_message():
    bench = module()
    assert bench.proposes_write_unasked(episode("t", True, proposes=True))
    assert not bench.proposes_write_unasked(episode("t", True, proposes=False))
    late = episode("t", True, proposes=False)
    late.messages.append(Message(role="assistant", content="Shall I update it? Please confirm."))  # after the user spoke
    assert not bench.proposes_write_unasked(late)


def test_a_grpo_round_is_counted_by_kind_with_the_groups_that_carry_signal():
    bench = module()
    episodes = [episode("a", True, True), episode("a", False, True),  # kind x: a group with signal
                episode("b", True, False), episode("b", True, False),  # kind x: all solved, no signal
                episode("c", False, True), episode("c", False, False)]  # kind y: none solved
    rows = bench.grpo_round(episodes, {"a": "x", "b": "x", "c": "y"})
    assert rows == {"x": {"groups": 2, "signal": 1, "episodes": 4, "solved": 3, "proposing": 2},
                    "y": {"groups": 1, "signal": 0, "episodes": 2, "solved": 0, "proposing": 1}}
