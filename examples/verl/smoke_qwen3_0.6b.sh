#!/usr/bin/env bash
# One GRPO step of MUA-RL on verl with a small model on one GPU: clinic-lite train tasks, the scripted user, muarl's
# agent loop, advantage and step metrics. For whoever has a GPU; it has not run on the project's CPU machines (docs/scale.md).
# Extra Hydra overrides after the script name go to verl, e.g. `--cfg job` to print the composed config only.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA=${DATA:-$HOME/data/muarl-verl/clinic-lite}
MODEL=${MODEL:-Qwen/Qwen3-0.6B}
[ -f "$DATA/rl_train.parquet" ] || muarl export-verl --domain clinic-lite --split train --limit 64 --out "$DATA" >&2

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=muarl_grpo \
    algorithm.use_kl_in_reward=false \
    data.train_files="[$DATA/rl_train.parquet]" \
    data.val_files="[$DATA/rl_train.parquet]" \
    data.train_batch_size=4 \
    data.max_prompt_length=2048 \
    data.max_response_length=4096 \
    data.filter_overlong_prompts=false \
    data.return_raw_chat=true \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.calculate_log_probs=true \
    actor_rollout_ref.rollout.prompt_length=2048 \
    actor_rollout_ref.rollout.response_length=4096 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.rollout.agent.num_workers=1 \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/agent_loops_smoke.yaml" \
    actor_rollout_ref.rollout.agent.default_agent_loop=muarl \
    +actor_rollout_ref.rollout.agent.agent_loop_manager_class=muarl.integrations.verl_metrics.MuarlAgentLoopManager \
    trainer.use_v1=false \
    trainer.critic_warmup=0 \
    trainer.logger='["console"]' \
    trainer.project_name=muarl \
    trainer.experiment_name=smoke-qwen3-0.6b \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node=1 \
    trainer.total_training_steps=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=-1 \
    trainer.val_before_train=false \
    "$@"
