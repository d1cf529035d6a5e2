"""One GRPO step's rollouts of the full learning demonstration's shape, through the trainer's own rollout path;
with ``--compare``, an older engine side by side.

The GRPO stage as the demo configures it (``muarl.demo.stages.grpo_config`` on the ``full`` form): clinic-lite
train tasks up to difficulty 2, ``tasks_per_step`` (8) tasks x ``group_size`` (8) episodes at temperature 1 against
the scripted user (who may change their mind), the demo's agent turns, tokens per turn and context, its precision
(auto: bf16 autocast where the CPU has it) and the engine's default batching (``rollout_batch_rows``; ``--rows``
sets it). A ``GRPOTrainer`` is built from that config as the demo builds it, and its ``rollout`` runs the first
step's tasks (the first 8 of the seeded, stratified order): the runner, the ``LocalPolicy`` the trainer makes, the
world's user and tools, exactly; nothing is re-implemented. Only the rollouts are timed, one round of them (when
dynamic sampling adds a second round, that is another batch like this one).

The tasks come from the whole train split, not from the demo's GRPO pool (the train tasks its cold start did not
see, known only after the synthesis stage): the same kinds of task in the same proportions, so the same work per
episode on average, without a 20-minute synthesis first. ``--model`` is the policy: SmolLM2-135M-Instruct by
default, or the demo's cold-start model (``OUT/sft/run/model`` of a demo run), whose episodes are the ones the
demo's GRPO actually rolls out.

Reports the episodes, the policy's generated tokens, wall and process CPU seconds (all threads) of the rollouts,
generated tokens per wall second (the trainer's ``rollout_tokens_per_s``) and per CPU second, and the batched
generator's decode steps, mean rows per decode step and prefills; also the success rate and a digest of every
episode's token ids.

``--compare OLD_SRC`` (a ``src`` folder from ``git archive``) runs the engine of that tree and this one, each in
its own child process with the same seeds, back to back, alternating ``--rounds`` times (``engine_arms``), and
prints each run, the medians and the ratio new / old of generated tokens per second. At temperature 1 the two
engines' episodes stay the same only while their logits agree to the last bit (float32 with an exact change);
under bf16 autocast they drift apart after a rounding difference flips a draw, so the episodes, and the tokens
generated, differ: tokens per second is the figure that compares, and ``same_token_ids`` says whether the work
was identical.

    nice -n 19 python bench/grpo_rollouts.py [--model runs/demo/sft/run/model] [--rows 16]
    git archive HEAD~3 src | tar -x -C /tmp/old && python bench/grpo_rollouts.py --compare /tmp/old/src --rounds 2
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path

import engine_arms
from muarl.config import ConfigError
from muarl.demo.config import form_config
from muarl.demo.stages import grpo_config
from muarl.models.hf_loading import ModelLoadError
from muarl.train.trainer import GRPOTrainer
from muarl.train.config import NO_ANCHOR

MEASURES = ("generated_tokens_per_s", "generated_tokens_per_cpu_s", "wall_seconds", "cpu_seconds")


def run(args: argparse.Namespace) -> dict:
    """The first GRPO step's rollouts with the engine importable here."""
    overrides = {key: value for key, value in (("tasks_per_step", args.tasks), ("group_size", args.group),
                                               ("rollout_batch_rows", args.rows)) if value is not None}
    overrides.update(NO_ANCHOR)  # the anchor is a term of the update, and no synthesis ran to give its demonstrations
    with tempfile.TemporaryDirectory(prefix="grpo-rollouts-") as out:
        demo = form_config("full", out=out, model=args.model, seed=args.seed, precision=args.precision,
                           max_turns=args.max_turns, grpo=overrides)
        trainer = GRPOTrainer(grpo_config(demo, Path(out) / "grpo", args.model, task_ids=None), progress=False)
        policies = []
        make_policy = trainer.policy

        def policy(temperature: float) -> object:  # the trainer's own policy, kept to read its generator's counts
            policies.append(make_policy(temperature))
            return policies[-1]

        trainer.policy = policy
        try:
            trainer.start()
            tasks = trainer.next_tasks()
            t0, cpu0 = time.perf_counter(), time.process_time()
            groups = trainer.rollout(tasks)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        finally:
            trainer.close()
    episodes = [e for group in groups for e in group]
    generated = sum(e.usage.completion_tokens for e in episodes)
    stats = policies[0].generator.stats if policies[0].generator is not None else None
    ids = [[e.task_id, e.trial, e.tokens.input_ids if e.tokens else None] for e in sorted(episodes, key=lambda e: (e.task_id, e.trial))]
    cfg = trainer.cfg
    return {
        "engine": engine_arms.this_tree(), "model": args.model, "precision": cfg.model.precision,
        "tasks": [t.id for t in tasks], "group_size": cfg.group_size, "max_turns": cfg.max_turns,
        "max_new_tokens": cfg.max_new_tokens, "max_context": cfg.max_context, "rollout_batch_rows": cfg.rollout_batch_rows,
        "episodes": len(episodes), "errored": sum(e.errored for e in episodes),
        "success_rate": round(sum(e.succeeded for e in episodes) / len(episodes), 3),
        "generated_tokens": generated, "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
        "generated_tokens_per_s": round(generated / wall, 2), "generated_tokens_per_cpu_s": round(generated / cpu, 2),
        "decode_steps": stats.decode_steps if stats else None,
        "mean_rows_per_decode_step": round(stats.decoded_rows / stats.decode_steps, 2) if stats and stats.decode_steps else None,
        "max_rows": stats.max_rows if stats else None, "prefills": stats.prefills if stats else None,
        "token_ids_digest": hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16],
    }


def compare(args: argparse.Namespace, argv: list[str]) -> dict:
    """The old tree's engine and this one's, alternating, ``args.rounds`` runs each."""
    trees = engine_arms.compare_trees(args.compare)
    runs = engine_arms.alternate(__file__, engine_arms.without_options(argv, "--compare", "--rounds"), trees, args.rounds,
                                 show=lambda arm, result: print(json.dumps({arm: result}), flush=True))
    median = engine_arms.medians(runs, MEASURES)
    return {
        "rounds": args.rounds, "trees": trees, "median": median,
        "new_over_old": {measure: round(median[measure]["new"] / median[measure]["old"], 3) for measure in MEASURES[:2]},
        "same_token_ids": len({r["token_ids_digest"] for rs in runs.values() for r in rs}) == 1,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="the policy (the demo's cold start: OUT/sft/run/model)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=engine_arms.positive, help="most rows per decode step (default: the engine's rollout_batch_rows)")
    p.add_argument("--tasks", type=engine_arms.positive, help="tasks of the step (default: the demo's 8)")
    p.add_argument("--group", type=int, help="episodes per task (default: the demo's 8)")
    p.add_argument("--max-turns", type=engine_arms.positive, help="agent turns per episode (default: the demo's)")
    engine_arms.add_options(p, rounds=1)
    args = p.parse_args()
    if args.group is not None and args.group < 2:
        p.error("--group must be at least 2: GRPO's advantages compare the episodes of a group")
    try:
        engine_arms.dispatch(args, compare, run)
    except (ConfigError, ModelLoadError) as exc:  # a bad --model, --group, ...: the config's own message
        raise SystemExit(f"grpo_rollouts: {exc}") from None

if __name__ == "__main__":
    main()
