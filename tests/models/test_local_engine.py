"""The local engine keeps token-in/token-out trajectories: what the trainer sees is what was sampled."""

from __future__ import annotations

import asyncio

import pytest
import torch
from booking_world import ListUser

from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.models.tiny import tiny_random_lm
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Message, Task, UserScenario
from token_traces import mask_runs


class ScriptedLM(torch.nn.Module):
    """A real tiny LM whose logits are pushed towards a script of tokens, one token per sampled token.

    It is its own decoder (the engine runs the decoder, then the output projection: ``muarl.models.logits``)
    and records every id it is fed, so a test can compare the sequence the policy was conditioned on during
    sampling with the trajectory the trainer gets.
    """

    def __init__(self, inner: torch.nn.Module, script: list[int]):
        super().__init__()
        self.inner = inner
        self.script = script
        self.fed: list[int] = []
        self.head = PushedHead(inner.get_output_embeddings(), script)

    def get_decoder(self):
        return self

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, **kwargs):
        self.fed.extend(input_ids[0].tolist())
        return self.inner.get_decoder()(input_ids=input_ids, **kwargs)


class PushedHead(torch.nn.Module):
    """An output projection whose next logits favour the next token of a script by +60."""

    def __init__(self, head: torch.nn.Module, script: list[int]):
        super().__init__()
        self.head = head
        self.script = script

    def forward(self, hidden):
        logits = self.head(hidden)
        logits[..., self.script.pop(0)] += 60.0
        return logits


TURNS = [
    '<tool_call>\n{"name": "find_patient", "arguments": {"name": "Ann Lee"}}\n</tool_call>',
    '<tool_call>\n{"name": "book", "arguments": {patient_id: p1}}\n</tool_call>',  # not JSON
    'Booking now.\n<tool_call>\n{"name": "book", "arguments": {"patient_id": "p1", "slot": "mon-9"}}\n</tool_call>',
    "You are booked for mon-9.",
]


@pytest.mark.parametrize("batch", [False, True], ids=["sequential", "batched-generator"])
def test_training_sequence_equals_sampled_sequence_across_tool_turns(domain, batch):
    inner, tok = tiny_random_lm(seed=1)
    turn_ids = [tok(t, add_special_tokens=False)["input_ids"] + [2] for t in TURNS]
    model = ScriptedLM(inner, [i for ids in turn_ids for i in ids])
    # no prefix sharing: the scripted model advances its script on every forward, and the shared prefix costs one
    # forward more (tests/models/test_batched_generation.py checks the shared, batched path token for token)
    policy = LocalPolicy(model, tok, "chatml-hermes", SamplingConfig(temperature=1.0, max_new_tokens=64),
                         share_prefix=False, batch=batch)
    user = ListUser(["Please book mon-9 for Ann Lee.", "Thanks! ###STOP###"])
    task = domain.tasks("train")[0]

    ep = asyncio.run(run_episode(domain, task, policy, user, seed=3, config=LoopConfig(max_turns=6)))

    assert ep.termination == "user_stop" and ep.agent_turns == 4
    assert [e.error_kind for e in ep.tool_executions] == [None, "malformed", None]
    assert "could not parse arguments of 'book'" in ep.messages[5].content
    assert ep.reward is not None and ep.reward.reward == 1.0
    trace = ep.tokens
    assert len(trace.input_ids) == len(trace.loss_mask) == len(trace.logprobs)
    # the model was conditioned on exactly the trajectory (the final end-of-turn is sampled, never fed)
    assert model.fed == trace.input_ids[:-1]
    # the loss mask covers exactly the sampled turns, end-of-turn token included
    runs = mask_runs(trace.loss_mask)
    assert [trace.input_ids[a:b] for a, b in runs] == turn_ids
    assert all(lp == 0.0 for lp, m in zip(trace.logprobs, trace.loss_mask) if not m)
    assert all(-1e-3 < lp <= 0.0 for lp, m in zip(trace.logprobs, trace.loss_mask) if m)
    # appending deltas gives the same text as rendering the whole conversation (up to the last turn) at once
    fmt = policy.chat_format
    whole = fmt.system_text(ep.messages[0].content, domain.tools.specs()) + fmt.render_delta(ep.messages[1:-1])
    assert tok.decode(trace.input_ids) + fmt.after_end == whole


def _run_free(policy: LocalPolicy, domain, turns: int = 3):
    user = ListUser([f"message {i}" for i in range(turns)] + ["###STOP###"])
    return asyncio.run(run_episode(domain, domain.tasks("train")[0], policy, user, seed=11, config=LoopConfig(max_turns=turns)))


def test_sampling_logprobs_match_a_full_forward_of_the_trajectory(domain):
    model, tok = tiny_random_lm(seed=2)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=1.0, max_new_tokens=12))
    ep = _run_free(policy, domain)
    trace = ep.tokens
    ids = torch.tensor([trace.input_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    token_logp = logp.gather(1, ids[0, 1:, None])[:, 0]
    mask = torch.tensor(trace.loss_mask[1:], dtype=torch.bool)
    recorded = torch.tensor(trace.logprobs[1:])
    assert mask.sum() >= 3 * 2
    torch.testing.assert_close(token_logp[mask], recorded[mask], atol=1e-4, rtol=0)
    # a turn cut at max_new_tokens is closed with a forced, unmasked end-of-turn before the next delta
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    for a, b in mask_runs(trace.loss_mask)[:-1]:
        ended = trace.input_ids[b - 1] == 2
        assert ended or b - a == 12
        assert trace.input_ids[b:b + len(newline) + (not ended)] == ([] if ended else [2]) + newline


def test_same_seed_same_episode_and_greedy_is_deterministic(domain):
    model, tok = tiny_random_lm(seed=2)
    sampled = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=1.0, max_new_tokens=8))
    a, b = _run_free(sampled, domain, 2).tokens, _run_free(sampled, domain, 2).tokens
    assert a.input_ids == b.input_ids and a.logprobs == b.logprobs
    greedy = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=0.0, max_new_tokens=8))
    g = _run_free(greedy, domain, 2).tokens
    for i, m in enumerate(g.loss_mask):
        if m:
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([g.input_ids[:i]])).logits[0, -1]
            assert int(torch.argmax(logits)) == g.input_ids[i]


def test_sampling_config_refuses_an_empty_nucleus():
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)


def test_session_refuses_a_rewritten_history():
    model, tok = tiny_random_lm(seed=2)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(max_new_tokens=2))
    session = policy.new_session(Task(id="x", domain="toy", split="train", user=UserScenario(instruction="")), [], 0)
    history = [Message(role="system", content="s"), Message(role="user", content="hi")]
    turn = asyncio.run(session.act(history))
    from muarl.models.base import ModelError

    with pytest.raises(ModelError, match="rewritten"):
        asyncio.run(session.act(history + [Message(role="assistant", content="other"), Message(role="user", content="?")]))
    assert asyncio.run(session.act(history + [turn.message, Message(role="user", content="?")])).usage.requests == 1


def test_a_full_context_is_the_policys_failure_not_a_server_error():
    model, tok = tiny_random_lm(seed=2)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(max_context=8))
    session = policy.new_session(Task(id="x", domain="toy", split="train", user=UserScenario(instruction="")), [], 0)
    from muarl.models.base import ContextFull, ModelError

    assert not issubclass(ContextFull, ModelError)  # the episode loop scores it instead of erroring the episode
    with pytest.raises(ContextFull, match="context is full"):
        asyncio.run(session.act([Message(role="system", content="a long system prompt " * 4)]))
