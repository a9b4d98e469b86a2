"""The shipped Hydra configs compose, keep verl v0.4.1's key tree and defaults, and keep the CI comment style."""

import os

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import verl
from verl.trainer.config.migration import CHANGED_DEFAULTS

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
SEQ = ["model", "optimizer", "extra"]
PROFILER = {"discrete": False, "all_ranks": False, "ranks": None}
ROLE_PROFILERS = (
    "actor_rollout_ref.actor",
    "actor_rollout_ref.ref",
    "actor_rollout_ref.rollout",
    "critic",
    "reward_model",
)

# Spec 04 §1: every key with its default (interpolations shown resolved against the other defaults).
# fmt: off
EXPECTED_PPO = {
    "data": {
        "tokenizer": None, "use_shm": False, "train_files": "~/data/rlhf/gsm8k/train.parquet",
        "val_files": "~/data/rlhf/gsm8k/test.parquet", "prompt_key": "prompt", "reward_fn_key": "data_source",
        "max_prompt_length": 512, "max_response_length": 512, "train_batch_size": 1024, "val_batch_size": None,
        "return_raw_input_ids": False, "return_raw_chat": False, "return_full_prompt": False, "shuffle": True,
        "validation_shuffle": False, "filter_overlong_prompts": False, "filter_overlong_prompts_workers": 1,
        "truncation": "error", "image_key": "images", "video_key": "videos", "trust_remote_code": False,
        "custom_cls": {"path": None, "name": None},
        # ours: unusable multimodal rows (undecodable image, placeholder/image count mismatch) stop or are skipped
        "bad_multimodal_rows": "error",
    },
    "actor_rollout_ref": {
        "hybrid_engine": True,
        "model": {
            "path": "~/models/deepseek-llm-7b-chat", "custom_chat_template": None, "use_shm": False,
            "external_lib": None, "override_config": {}, "enable_gradient_checkpointing": True,
            "gradient_checkpointing_policy": "auto",
            "enable_activation_offload": False, "use_remove_padding": False, "lora_rank": 0, "lora_alpha": 16,
            "target_modules": "all-linear", "use_liger": False, "use_fused_kernels": False,
            "fused_kernel_options": {"impl_backend": "torch"}, "trust_remote_code": False,
        },
        "actor": {
            "strategy": "fsdp", "ppo_mini_batch_size": 256, "ppo_micro_batch_size": None,
            "ppo_micro_batch_size_per_gpu": None, "use_dynamic_bsz": False, "ppo_max_token_len_per_gpu": 16384,
            "grad_clip": 1.0, "clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
            "policy_loss": {
                "loss_mode": "vanilla", "clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0,
                "kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1,
                # verl after v0.4 (spec 05 §10): SAPO's gate temperatures
                "tau_pos": 1.0, "tau_neg": 1.05,
            },
            "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean", "entropy_coeff": 0, "use_kl_loss": False,
            "use_torch_compile": True, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "ppo_epochs": 1,
            "shuffle": False, "ulysses_sequence_parallel_size": 1, "entropy_from_logits_with_chunking": False,
            "entropy_checkpointing": False,
            "checkpoint": {"save_contents": SEQ, "load_contents": SEQ},
            "optim": {
                "lr": 1e-6, "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.0, "min_lr_ratio": 0.0,
                "num_cycles": 0.5, "warmup_style": "constant", "total_training_steps": -1, "weight_decay": 0.01,
            },
            "fsdp_config": {
                "wrap_policy": {"min_num_params": 0}, "param_offload": False, "optimizer_offload": False,
                "offload_policy": False, "reshard_after_forward": True, "fsdp_size": -1, "forward_prefetch": False,
            },
            "profiler": PROFILER,
        },
        "ref": {
            "strategy": "fsdp",
            "fsdp_config": {
                "param_offload": False, "reshard_after_forward": True, "forward_prefetch": False,
                "wrap_policy": {"min_num_params": 0},
            },
            "use_torch_compile": True, "log_prob_micro_batch_size": None, "log_prob_micro_batch_size_per_gpu": None,
            "log_prob_use_dynamic_bsz": False, "log_prob_max_token_len_per_gpu": 16384,
            "ulysses_sequence_parallel_size": 1, "entropy_from_logits_with_chunking": False,
            "entropy_checkpointing": False, "profiler": PROFILER,
        },
        "rollout": {
            "name": "vllm", "mode": "sync", "temperature": 1.0, "top_k": -1, "top_p": 1, "use_fire_sampling": False,
            "prompt_length": 512, "response_length": 512, "dtype": "bfloat16", "gpu_memory_utilization": 0.5,
            "ignore_eos": False, "enforce_eager": True, "free_cache_engine": True, "load_format": "dummy_dtensor",
            "layered_summon": False, "tensor_model_parallel_size": 2, "max_num_batched_tokens": 8192,
            "max_model_len": None, "max_num_seqs": 1024, "log_prob_micro_batch_size": None,
            "log_prob_micro_batch_size_per_gpu": None, "log_prob_use_dynamic_bsz": False,
            "log_prob_max_token_len_per_gpu": 16384, "disable_log_stats": True, "enable_chunked_prefill": True,
            "do_sample": True, "n": 1, "multi_stage_wake_up": False,
            "engine_kwargs": {
                "vllm": {"swap_space": None, "disable_mm_preprocessor_cache": False},
                "sglang": {"attention_backend": None},
            },
            "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0, "n": 1, "do_sample": False},
            "multi_turn": {
                "enable": False, "max_assistant_turns": None, "tool_config_path": None, "max_user_turns": None,
                "interaction_config_path": None, "completion_callback": None, "use_inference_chat_template": False,
                "tokenization_sanity_check_mode": "strict", "format": "hermes",
                # verl >= 0.5's keys for the tool loop
                "max_parallel_calls": 1, "max_tool_response_length": 256, "tool_response_truncate_side": "middle",
                # ours: a hung tool costs the model one timeout message, not the batch
                "tool_call_timeout": 30,
            },
            # verl >= 0.5's agent-loop file; ours: the loop of rows without agent_name
            "agent": {"agent_loop_config_path": None, "default_agent_loop": None},
            "calculate_log_probs": False, "profiler": PROFILER,
            # verl >= 0.5 (its keys and defaults): the weight transfer to a rollout on workers of its own
            "checkpoint_engine": {"backend": "naive", "update_weights_bucket_megabytes": 2048, "engine_kwargs": {}},
        },
    },
    "critic": {
        "rollout_n": 1, "strategy": "fsdp",
        "optim": {
            "lr": 1e-5, "lr_warmup_steps_ratio": 0.0, "min_lr_ratio": None, "warmup_style": "constant",
            "total_training_steps": -1, "weight_decay": 0.01,
        },
        "model": {
            "path": "~/models/deepseek-llm-7b-chat", "use_shm": False,
            "tokenizer_path": "~/models/deepseek-llm-7b-chat",
            "override_config": {}, "external_lib": None, "enable_gradient_checkpointing": True,
            "gradient_checkpointing_policy": "auto",
            "enable_activation_offload": False, "use_remove_padding": False, "trust_remote_code": False,
            "fsdp_config": {
                "param_offload": False, "optimizer_offload": False, "offload_policy": False,
                "reshard_after_forward": True, "wrap_policy": {"min_num_params": 0}, "fsdp_size": -1,
                "forward_prefetch": False,
            },
            "lora_rank": 0, "lora_alpha": 16, "target_modules": "all-linear",
        },
        "ppo_mini_batch_size": 256, "ppo_micro_batch_size": None, "ppo_micro_batch_size_per_gpu": None,
        "forward_micro_batch_size": None, "forward_micro_batch_size_per_gpu": None, "use_dynamic_bsz": False,
        "ppo_max_token_len_per_gpu": 32768, "forward_max_token_len_per_gpu": 32768,
        "ulysses_sequence_parallel_size": 1, "ppo_epochs": 1, "shuffle": False, "grad_clip": 1.0,
        "cliprange_value": 0.5, "loss_agg_mode": "token-mean",
        "checkpoint": {"save_contents": SEQ, "load_contents": SEQ}, "profiler": PROFILER,
    },
    "reward_model": {
        "enable": False, "strategy": "fsdp",
        "model": {
            "input_tokenizer": "~/models/deepseek-llm-7b-chat", "path": "~/models/FsfairX-LLaMA3-RM-v0.1",
            "use_shm": False, "external_lib": None, "use_remove_padding": False, "use_fused_kernels": False,
            "trust_remote_code": False,
            "fsdp_config": {
                "wrap_policy": {"min_num_params": 0}, "param_offload": False, "reshard_after_forward": True,
                "fsdp_size": -1, "forward_prefetch": False,
            },
        },
        "micro_batch_size": None, "micro_batch_size_per_gpu": None, "max_length": None,
        "ulysses_sequence_parallel_size": 1, "use_dynamic_bsz": False, "forward_max_token_len_per_gpu": 32768,
        "reward_manager": "naive", "launch_reward_fn_async": False,
        "sandbox_fusion": {"url": None, "max_concurrent": 64, "memory_limit_mb": 1024}, "profiler": PROFILER,
    },
    "custom_reward_function": {"path": None, "name": "compute_score"},
    "algorithm": {
        "gamma": 1.0, "lam": 1.0, "adv_estimator": "gae", "norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False,
        "kl_penalty": "kl", "kl_ctrl": {"type": "fixed", "kl_coef": 0.001, "horizon": 10000, "target_kl": 0.1},
        "use_pf_ppo": False, "pf_ppo": {"reweight_method": "pow", "weight_pow": 2.0},
    },
    "trainer": {
        "balance_batch": True, "total_epochs": 30, "total_training_steps": None, "profile_steps": None,
        "controller_nsight_options": {
            "trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph",
        },
        "worker_nsight_options": {
            "trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph",
            "capture-range": "cudaProfilerApi", "capture-range-end": None, "kill": "none",
        },
        "project_name": "verl_examples", "experiment_name": "gsm8k", "logger": ["console", "wandb"],
        "log_val_generations": 0, "rollout_data_dir": None, "validation_data_dir": None, "nnodes": 1,
        "n_gpus_per_node": 8, "save_freq": -1, "resume_mode": "auto", "resume_from_path": None,
        "val_before_train": True, "val_only": False, "test_freq": -1, "critic_warmup": 0, "default_hdfs_dir": None,
        "del_local_ckpt_after_load": False, "default_local_dir": "checkpoints/verl_examples/gsm8k",
        "max_actor_ckpt_to_keep": None, "max_critic_ckpt_to_keep": None, "ray_wait_register_center_timeout": 300,
        "device": "cuda",
        # Ours: one readable console line per step (full restores verl's line); verl has no such key.
        "console_format": "compact",
        # Ours: progress bar, learning-curve PNG and report.md (verl has no such key).
        "run_report": True,
        # Ours: steps in a row with a skipped non-finite update or reward before the run stops.
        "max_consecutive_nonfinite": 3,
        # Ours: a failed checkpoint save stops the run (or, with continue, is warned about).
        "on_save_error": "stop",
        # Ours: the watchdog's deadlines (seconds) of worker-group calls.
        "watchdog_timeout_s": 3600,
        "watchdog_phase_timeout_s": {
            "init_model": 7200, "generate_sequences": None, "compute_log_prob": None, "compute_ref_log_prob": None,
            "compute_values": None, "compute_rm_score": None, "update_actor": None, "update_critic": None,
            "save_checkpoint": 7200, "load_checkpoint": 7200, "compute_reward": None,
        },
    },
    "ray_init": {"num_cpus": None, "timeline_json_file": None},
    # verl's one-step-off-policy recipe keys: a standalone rollout's pool (hybrid_engine=False)
    "rollout": {"nnodes": 1, "n_gpus_per_node": 8},
}

# Keys verl v0.4.1 reads only in code, with the default its code uses (spec 04 "(hidden)"), and the reward-loop
# keys of the rate_limited manager: here each has a YAML entry.
CODE_DEFAULT_KEYS = {
    "data.gen_batch_size": None, "data.dataloader_num_workers": 0, "data.seed": 1,
    "data.cache_dir": "~/.cache/verl/rlhf", "data.need_tools_kwargs": False,
    "actor_rollout_ref.actor.optim.betas": [0.9, 0.999],
    "actor_rollout_ref.actor.fsdp_config.model_dtype": None,
    "actor_rollout_ref.actor.fsdp_config.mixed_precision": None,
    # the ref's FSDP block is the same engine file as the actor's (verl 0.9's layout)
    "actor_rollout_ref.ref.fsdp_config.mixed_precision": None,
    # and so is the critic's (verl 0.9's critic.fsdp; v0.4's critic.model.fsdp_config is its older spelling)
    "critic.fsdp": {"mixed_precision": None},
    # verl 0.7's switch to the GPG loss (policy_loss.loss_mode=gpg)
    "actor_rollout_ref.actor.use_gpg_loss": False,
    "actor_rollout_ref.rollout.seed": 0, "actor_rollout_ref.rollout.limit_images": None,
    "actor_rollout_ref.rollout.micro_batch_size": None, "actor_rollout_ref.rollout.cpu_num_threads": None,
    "actor_rollout_ref.rollout.logprobs_mode": "processed_logprobs",
    "actor_rollout_ref.rollout.kv_cache_sequences": None,
    "critic.optim.betas": [0.9, 0.999], "critic.optim.lr_warmup_steps": -1, "critic.optim.num_cycles": 0.5,
    "custom_reward_function.reward_kwargs": {}, "reward_model.reward_kwargs": {}, "reward_model.truncation": "right",
    "reward_model.overlong_buffer": {"enable": False, "len": 4096, "penalty_factor": 1.0, "log": False},
    "reward_model.max_concurrent": 1, "reward_model.max_rpm": None, "reward_model.max_tpm": None,
    "reward_model.estimated_tokens_per_request": 2000, "reward_model.timeout": 300.0,
    # verl's reward loop (verl >= 0.6) and hybrid reward sources (ours)
    "reward_model.use_reward_loop": False, "reward_model.enable_resource_pool": False,
    "reward_model.n_gpus_per_node": 0, "reward_model.nnodes": 0, "reward_model.num_workers": 8,
    "reward_model.rollout": {"name": None, "dtype": "bfloat16", "tensor_model_parallel_size": 2,
                             "prompt_length": 2048, "response_length": 2048, "gpu_memory_utilization": 0.5},
    "reward_model.judge": {"path": None},
    "reward_model.reward_sources": [], "reward_model.reward_combine": {"path": None, "name": "combine"},
    # the sandbox URL's spelling in verl's sandbox example script (an alias of reward_model.sandbox_fusion.url)
    "reward_model.sandbox_fusion_url": None,
    "algorithm.filter_groups": {"enable": False, "metric": None, "max_num_gen_batches": 0},
    "algorithm.rollout_correction": {
        "rollout_is": None, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False, "rollout_rs": None,
        "rollout_rs_threshold": None, "rollout_rs_threshold_lower": None, "rollout_token_veto_threshold": None,
        "bypass_mode": False, "loss_type": "ppo_clip",
        # verl 0.6's names of bypass_mode and loss_type=reinforce, which its example scripts set
        "bypass_old_logprob_for_rollout": False, "use_pure_rollout_correction": False,
    },
    # verl 0.7's choice of worker classes, which its example scripts set (one implementation here)
    "trainer.use_legacy_worker_impl": "auto",
    "trainer.remove_previous_ckpt_in_save": False, "ray_init.include_dashboard": None,
}
for _key, _value in CODE_DEFAULT_KEYS.items():
    *_parents, _leaf = _key.split(".")
    _tree = EXPECTED_PPO
    for _part in _parents:
        _tree = _tree[_part]
    assert _leaf not in _tree, _key
    _tree[_leaf] = _value
# the actor's profiler section lists save_path (the one place the YAML shows it); the others share PROFILER
EXPECTED_PPO["actor_rollout_ref"]["actor"]["profiler"] = {**PROFILER, "save_path": None}
# fmt: on


def _compose(name, overrides=()):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def _flatten(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            out.update(_flatten(value, path))
        else:
            out[path] = value
    return out


def test_ppo_trainer_has_every_key_with_its_default():
    cfg = OmegaConf.to_container(_compose("ppo_trainer"), resolve=True)
    actual, expected = _flatten(cfg), _flatten(EXPECTED_PPO)
    assert sorted(set(expected) - set(actual)) == [], "keys missing from ppo_trainer.yaml"
    # beyond verl v0.4.1's keys: verl 0.9's (its layout's `_target_`s and engine family included)
    with open(os.path.join(os.path.dirname(__file__), "verl_v091_defaults.yaml")) as f:
        verl_09 = set(yaml.safe_load(f)["ppo_trainer.yaml"]) | {"model_engine"}
    # every role mounts one profiler file (verl 0.9's profiler/profiler.yaml), so a role's block may hold a key that
    # verl 0.9 writes in another role's inline block only; the reward model's block is that file too
    profiler_keys = {k.split(".profiler.", 1)[1] for k in verl_09 if ".profiler." in k}

    def shared_profiler_key(key: str) -> bool:
        return any(
            key.startswith(f"{role}.profiler.") and key.split(".profiler.", 1)[1] in profiler_keys
            for role in ROLE_PROFILERS
        )

    # a verl key whose value interpolates a node (rollout.mtp is model.mtp) resolves to that node's keys
    in_verl_09 = lambda k: k in verl_09 or any(k.startswith(f"{v}.") for v in verl_09)  # noqa: E731
    beyond = [
        k
        for k in set(actual) - set(expected)
        if not in_verl_09(k) and not k.endswith("._target_") and not shared_profiler_key(k)
    ]
    assert sorted(beyond) == [], "keys in ppo_trainer.yaml that neither verl v0.4.1 nor verl 0.9 has"
    moved = {c.key for c in CHANGED_DEFAULTS}  # today's verl's default, listed in docs/migration.md
    wrong = {
        k: (actual[k], v)
        for k, v in expected.items()
        if k not in moved and (actual[k] != v or type(actual[k]) is not type(v))
    }
    assert wrong == {}


def test_interpolations_follow_their_source():
    cfg = _compose(
        "ppo_trainer",
        [
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.rollout.n=5",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=999",
            "critic.ppo_micro_batch_size_per_gpu=3",
            "data.max_prompt_length=7",
            "trainer.project_name=p",
            "actor_rollout_ref.actor.checkpoint.save_contents=[model]",
        ],
    )
    assert cfg.actor_rollout_ref.ref.strategy == "fsdp2"
    assert cfg.critic.strategy == "fsdp2" and cfg.reward_model.strategy == "fsdp2"
    assert cfg.critic.rollout_n == 5
    assert cfg.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz is True
    assert cfg.reward_model.use_dynamic_bsz is True  # via critic.use_dynamic_bsz
    assert cfg.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu == 999
    assert cfg.critic.forward_micro_batch_size_per_gpu == 3
    assert cfg.actor_rollout_ref.rollout.prompt_length == 7
    assert cfg.trainer.default_local_dir == "checkpoints/p/gsm8k"
    assert list(cfg.actor_rollout_ref.actor.checkpoint.load_contents) == ["model"]


def test_verl_plus_overrides_of_code_default_keys_keep_working():
    """verl reads data.gen_batch_size, optim.betas, ... with code defaults, so its command lines add them with '+';
    here they are YAML entries, and the entry points read '+key=value' as '++key=value'."""
    from hydra.errors import ConfigCompositionException

    from verl.utils.hydra_overrides import verl_command_line

    verl_args = ["+data.gen_batch_size=16", "+actor_rollout_ref.actor.optim.betas=[0.9,0.99]", "+a=b", "x.y=1"]
    assert verl_command_line(verl_args) == [
        "++data.gen_batch_size=16",
        "++actor_rollout_ref.actor.optim.betas=[0.9,0.99]",
        "+a=b",
        "x.y=1",
    ]
    with pytest.raises(ConfigCompositionException):  # what Hydra alone does with verl's '+' on a YAML key
        _compose("ppo_trainer", ["+data.max_prompt_length=3"])
    cfg = _compose(
        "ppo_trainer",
        verl_command_line(verl_args[:2] + ["+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16"]),
    )
    assert cfg.data.gen_batch_size == 16 and list(cfg.actor_rollout_ref.actor.optim.betas) == [0.9, 0.99]
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
    with pytest.raises(ConfigCompositionException):
        _compose("ppo_trainer", ["data.not_a_key=1"])


def test_megatron_config_extends_ppo_trainer():
    cfg = _compose("ppo_megatron_trainer")
    assert cfg.actor_rollout_ref.actor.strategy == "megatron"
    assert cfg.critic.strategy == "megatron" and cfg.actor_rollout_ref.ref.strategy == "megatron"
    for section in (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.ref, cfg.critic, cfg.reward_model):
        m = section.megatron
        assert m.tensor_model_parallel_size == 1 and m.pipeline_model_parallel_size == 1
        assert m.context_parallel_size == 1 and m.sequence_parallel is True and m.seed == 42
        assert m.virtual_pipeline_model_parallel_size is None and m.expert_tensor_parallel_size is None
    assert cfg.actor_rollout_ref.actor.megatron.use_distributed_optimizer is True
    assert cfg.actor_rollout_ref.actor.load_weight is True
    assert set(cfg.actor_rollout_ref.actor.profile) == {
        "use_profile",
        "profile_ranks",
        "step_start",
        "step_end",
        "save_path",
    }
    assert cfg.data.train_batch_size == 1024  # inherited from ppo_trainer


def test_sft_generation_evaluation_defaults():
    sft = _compose("sft_trainer")
    assert sft.data.train_batch_size == 256 and sft.data.micro_batch_size_per_gpu == 4
    assert sft.data.prompt_key == "question" and sft.data.response_key == "answer"
    assert sft.model.strategy == "fsdp2" and list(sft.optim.betas) == [0.9, 0.95]
    assert sft.optim.lr_scheduler == "cosine" and sft.trainer.default_local_dir == "checkpoints/gsm8k-sft/test"
    gen = _compose("generation")
    assert gen.data.n_samples == 5 and gen.rollout.top_k == 50 and gen.rollout.top_p == 0.7
    assert gen.rollout.prompt_length == 1536 and gen.rollout.log_prob_micro_batch_size_per_gpu == 8
    assert gen.actor.fsdp_config.fsdp_size == -1 and gen.trainer.device == "cuda"
    ev = _compose("evaluation")
    assert ev.data.response_key == "responses" and ev.custom_reward_function.name == "compute_score"
