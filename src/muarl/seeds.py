"""Every seed a run uses, derived here and nowhere else.

A run has one seed (``--seed``). From it come, by hashing names rather than adding offsets, so that no two
derivations can collide on a shifted input:

* the **episode** seed of each (task, trial), :func:`episode_seed`: a resumed or re-ordered run meets the same
  episodes as an uninterrupted one. It seeds the agent's sampling (a local policy's generator) and is the seed
  an episode records;
* the **user** seed of an episode, :func:`user_seed`: the simulated user's own stream (the scripted user's
  wording, an LLM user's request seeds, :func:`user_request_seed`). It is never the agent's: with one model
  playing both parties, one shared seed makes their sampling draws coincide and the user echoes the policy;
* the **step** seed of a training step (and of each round of its dynamic sampling), :func:`step_seed`: the run
  seed its rollouts derive their episode seeds from;
* the **sample** seed, :func:`sample_seed`: the episode seed of the i-th of the n samples a trainer draws for one
  prompt (verl's agent loop runs each sample apart), so each sample meets its own user.
"""

from __future__ import annotations

import zlib

SERVER_SEED_RANGE = 2**31  # what OpenAI-compatible servers accept as a request's seed


def _hash(text: str) -> int:
    return zlib.crc32(text.encode())


def episode_seed(run_seed: int, task_id: str, trial: int) -> int:
    """The seed of trial ``trial`` of task ``task_id`` in a run seeded ``run_seed``."""
    return _hash(f"{run_seed}/{task_id}/{trial}")


def user_seed(episode: int) -> int:
    """The simulated user's seed in the episode seeded ``episode`` (the agent samples from ``episode`` itself)."""
    return _hash(f"{episode}/user") % SERVER_SEED_RANGE


def user_request_seed(user: int, request: int) -> int:
    """The seed an LLM user sends with its ``request``-th request of an episode, so a server that honours seeds
    replays the same customer when the episode is re-run."""
    return (user + request) % SERVER_SEED_RANGE


def step_seed(run_seed: int, step: int, round_: int = 0) -> int:
    """The run seed of training step ``step``'s rollouts (round ``round_`` of its dynamic sampling); step -1 is
    validation. A resumed training run samples exactly what the uninterrupted one would."""
    return _hash(f"{run_seed}/step/{step}" + (f"/round/{round_}" if round_ else ""))


def sample_seed(prompt_seed: int, sample: int) -> int:
    """The episode seed of sample ``sample`` of a prompt whose episode seed is ``prompt_seed``: sample 0 is the
    prompt's own episode (the one ``muarl rollout`` runs for it), every other sample gets a seed of its own, and
    with it its own user (:func:`user_seed`)."""
    return prompt_seed if sample == 0 else _hash(f"{prompt_seed}/sample/{sample}")
