#!/usr/bin/env bash
# MUA-RL on verl: GRPO for Qwen3-8B on tau-bench retail and tau2-bench airline *train* tasks (tau-bench airline has no train split), with an LLM user in the loop.
# Hyperparameters are the paper's (arXiv 2508.18669): 32 prompts per step x 8 rollouts, lr 1e-6,
# low_var_kl 0.001, clip 0.2, up to 30 agent turns in a 32k context. See docs/scale.md.
#
# Before running: the data (muarl export-verl ...), the user server, and agent_loops.yaml's user_base_url and
# data_dir (docs/scale.md "Launch"). NNODES/GPUS_PER_NODE pick single node (1 x 8) or a Ray cluster.
# muarl_grpo is verl's GRPO without the episodes whose user or tool server failed (muarl registers it with verl);
# MuarlAgentLoopManager adds muarl's training dynamics to verl's step metrics (timing_s/muarl/...). verl's
# synchronous trainer (use_v1=false) is the path tests/integrations/test_verl_grpo_step.py drives on CPU.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA=${DATA:-$HOME/data/muarl-verl}
MODEL=${MODEL:-Qwen/Qwen3-8B}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=muarl_grpo \
    algorithm.use_kl_in_reward=false \
    data.train_files="[$DATA/tau-retail/rl_train.parquet,$DATA/tau2-airline/rl_train.parquet]" \
    data.val_files="[$DATA/tau-retail/rl_dev.parquet]" \
    data.train_batch_size=32 \
    data.max_prompt_length=8192 \
    data.max_response_length=24576 \
    data.filter_overlong_prompts=true \
    data.return_raw_chat=true \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=true \
    actor_rollout_ref.model.enable_gradient_checkpointing=true \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.use_dynamic_bsz=true \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=32768 \
    actor_rollout_ref.actor.clip_ratio=0.2 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.fsdp_config.param_offload=false \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=false \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.top_p=1.0 \
    actor_rollout_ref.rollout.calculate_log_probs=true \
    actor_rollout_ref.rollout.prompt_length=8192 \
    actor_rollout_ref.rollout.response_length=24576 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/agent_loops.yaml" \
    actor_rollout_ref.rollout.agent.default_agent_loop=muarl \
    +actor_rollout_ref.rollout.agent.agent_loop_manager_class=muarl.integrations.verl_metrics.MuarlAgentLoopManager \
    actor_rollout_ref.ref.fsdp_config.param_offload=true \
    trainer.critic_warmup=0 \
    trainer.use_v1=false \
    trainer.logger='["console","tensorboard"]' \
    trainer.project_name=muarl \
    trainer.experiment_name=qwen3-8b-tau-mua-rl \
    trainer.nnodes="$NNODES" \
    trainer.n_gpus_per_node="$GPUS_PER_NODE" \
    trainer.save_freq=20 \
    trainer.test_freq=10 \
    trainer.total_epochs=5 \
    "$@"
