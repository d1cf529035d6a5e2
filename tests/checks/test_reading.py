"""The shortcuts the checks take to read a conversation cheaply give exactly what the plain reading gives.

Each shortcut is compared with the plain form it replaces (a full split into sentences, a regular-expression
search) on a seeded random corpus built from the characters and words where they could differ: sentence ends,
every kind of white space, the words of each pattern and near misses of them.
"""

from __future__ import annotations

import random
import re

import pytest

from muarl.checks import conversation as reading
from muarl.checks import grounding
from muarl.domains.base import GoldReplayError
from muarl.types import Message, ToolCall
from domain_data import load_or_skip

PLAIN_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")  # how sentences were split before the shortcut
PIECES = ["a", "b", " ", "  ", "\n", "\n\n", ".", "!", "?", ";", "\t", "\r\n", "\u00a0", "\x1c", "\x85", "\u2028",
          "x" * 40, "word " * 12]


def _plain_sentences(text: str) -> list[str]:
    return [p for p in PLAIN_BREAK.split(text.strip()) if p.strip()]


def test_last_sentences_are_the_last_of_a_full_split():
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 90)))
        plain = _plain_sentences(text)
        assert reading.sentences(text) == plain
        for n in (1, 2, 3):
            assert reading.last_sentences(text, n) == plain[-n:], (text, n)


WORDS = ["yes", "yeah", "yep", "yup", "sure", "correct", "confirm", "confirmed", "go ahead", "please do", "proceed", "ok",
         "okay", "that's right", "that is right", "sounds good", "do it", "no", "nope", "not", "don't", "do not", "instead",
         "actually", "wait", "hold on", "changed my mind", "rather", "never mind", "shall i", "should i", "would you like",
         "do you want", "is that correct", "is that right", "does this look", "does that look", "does everything look",
         "yes or no", "yes/no", "please", "let me know", "kindly", "updated", "changed", "modified", "edited", "cancelled",
         "canceled", "booked", "reserved", "rescheduled", "moved", "refilled", "refunded", "exchanged", "returned", "paid",
         "sent", "issued", "?", " ", ".", "ly", "un", "s", "x"]


@pytest.mark.parametrize("name", ["_ASKS_CONFIRMATION", "_REQUEST_WORDS", "_AFFIRMS", "_DENIES", "_ANY_CLAIM_VERB"])
def test_word_patterns_find_what_their_regular_expression_finds(name):
    words = getattr(reading, name)
    rng = random.Random(name)
    for _ in range(20_000):
        text = "".join(rng.choice(WORDS) for _ in range(rng.randint(0, 5)))
        assert (words.search(text) is not None) == (words.pattern.search(text) is not None), text


def test_calls_pair_with_their_answers_by_id_else_by_position():
    def call(i: str) -> ToolCall:
        return ToolCall(id=i, name=f"tool_{i}", arguments="{}")

    messages = [
        Message(role="system", content="s"),
        Message(role="assistant", tool_calls=[call("a")]),
        Message(role="tool", tool_call_id="a", content="A"),
        Message(role="assistant", tool_calls=[call("b"), call("c")]),
        Message(role="tool", tool_call_id="c", content="C"),  # answered out of order, each by its id
        Message(role="tool", tool_call_id="b", content="Error: refused"),
        Message(role="assistant", tool_calls=[call("d"), call("e")]),
        Message(role="tool", tool_call_id="zz", content="D"),  # an id no call has: d takes it by position
        Message(role="assistant", tool_calls=[call("f")]),  # never answered
        Message(role="assistant", content="done"),
    ]
    calls = reading.EpisodeView(messages).calls
    assert [(c.name, c.result_index, c.result, c.ok) for c in calls] == [
        ("tool_a", 2, "A", True), ("tool_b", 5, "Error: refused", False), ("tool_c", 4, "C", True),
        ("tool_d", 7, "D", True), ("tool_e", None, "", False), ("tool_f", None, "", False)]


@pytest.mark.parametrize("name", ["clinic", "clinic-lite", "tau-retail", "tau-airline", "tau2-telecom"])
def test_gold_results_taken_from_the_rewards_replay_are_those_of_a_replay_of_their_own(name):
    """What the grounded-facts check reads of the gold solution is the same whether the outcome reward's gold
    replay has run (its results are reused) or not (the check runs the gold actions itself)."""
    domain = load_or_skip(name).fresh()
    reused = 0
    for task in domain.tasks("test"):
        own = grounding._gold_results(domain, task)
        try:
            domain.gold_hash(task)
        except GoldReplayError:
            continue
        reused += domain.gold_outputs(task) is not None
        assert grounding._gold_results(domain, task) == own, task.id
    assert reused > 0
