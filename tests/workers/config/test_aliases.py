"""Two spellings of one setting (verl 0.9's and an older one) give one value in the typed config, whichever a command
line sets; both set apart are reported by the check with their full names."""

from __future__ import annotations

import pytest

from tests.trainer.config.yaml_mirror import compose_config
from verl.trainer.config import PPOConfig
from verl.workers.config.aliases import alias_conflicts

A, REF = "actor_rollout_ref.actor", "actor_rollout_ref.ref"


def _typed(*overrides: str) -> PPOConfig:
    return PPOConfig.from_config(compose_config("ppo_trainer", overrides))


def _get(config, key: str):
    for part in key.split("."):
        config = getattr(config, part)
    return config


# (the key a command line sets, its value, the other spelling that must hold it too)
PAIRS = [
    (f"{A}.grad_clip", 0.5, f"{A}.optim.clip_grad"),
    (f"{A}.optim.clip_grad", 2.0, f"{A}.grad_clip"),
    ("critic.grad_clip", 0.3, "critic.optim.clip_grad"),
    (f"{A}.optim.warmup_style", "cosine", f"{A}.optim.lr_scheduler_type"),
    ("critic.optim.lr_scheduler_type", "cosine", "critic.optim.warmup_style"),
    (f"{A}.policy_loss.tau_pos", 0.5, f"{A}.tau_pos"),
    (f"{A}.tau_neg", 3.0, f"{A}.policy_loss.tau_neg"),
    (f"{A}.fsdp_config.use_torch_compile", False, f"{A}.use_torch_compile"),
    (f"{A}.fsdp_config.entropy_from_logits_chunk_size", 64, f"{A}.entropy_from_logits_chunk_size"),
    (f"{A}.entropy_from_logits_with_chunking", True, f"{A}.fsdp_config.entropy_from_logits_with_chunking"),
    (f"{REF}.fsdp_config.entropy_checkpointing", True, f"{REF}.entropy_checkpointing"),
    (f"{A}.fsdp_config.ulysses_sequence_parallel_size", 2, f"{A}.ulysses_sequence_parallel_size"),
    ("critic.fsdp.ulysses_sequence_parallel_size", 2, "critic.ulysses_sequence_parallel_size"),
    ("critic.model.fsdp_config.param_offload", True, "critic.fsdp.param_offload"),
    ("critic.fsdp.optimizer_offload", True, "critic.model.fsdp_config.optimizer_offload"),
    ("critic.model.fsdp_config.wrap_policy.min_num_params", 1000, "critic.fsdp.wrap_policy.min_num_params"),
]


@pytest.mark.parametrize(("key", "value", "other"), PAIRS, ids=[p[0] for p in PAIRS])
def test_either_spelling_sets_both(key, value, other):
    config = _typed(f"{key}={value}")
    assert (_get(config, key), _get(config, other)) == (value, value)
    assert alias_conflicts(config) == []


def test_defaults_are_left_as_they_are():
    config = _typed()
    assert config.actor_rollout_ref.actor.optim.warmup_style == "constant" and alias_conflicts(config) == []
    # verl 0.9's default of the old name, null, means "not given": it stays null beside the schedule it did not set
    config = _typed(f"{A}.optim.warmup_style=null", f"{A}.optim.lr_scheduler_type=cosine")
    optim = config.actor_rollout_ref.actor.optim
    assert (optim.lr_scheduler_type, optim.warmup_style) == ("cosine", None)


def test_the_reference_follows_the_actors_sequence_parallel_size_however_it_was_given():
    arr = _typed(f"{A}.fsdp_config.ulysses_sequence_parallel_size=2").actor_rollout_ref
    assert arr.ref.ulysses_sequence_parallel_size == arr.ref.fsdp_config.ulysses_sequence_parallel_size == 2


def test_gpg_switch_is_the_gpg_loss_mode():
    actor = _typed(f"{A}.use_gpg_loss=True").actor_rollout_ref.actor
    assert actor.policy_loss.loss_mode == "gpg"
    assert _typed(f"{A}.use_gpg_loss=True", f"{A}.policy_loss.loss_mode=gpg").actor_rollout_ref.actor.use_gpg_loss
    conflicts = alias_conflicts(_typed(f"{A}.use_gpg_loss=True", f"{A}.policy_loss.loss_mode=clip_cov"))
    assert conflicts == [
        f"{A}.policy_loss.loss_mode='clip_cov' and {A}.use_gpg_loss=True are two spellings of one setting, set to "
        f"different values; set one of them ({A}.policy_loss.loss_mode is verl 0.9's)"
    ]


def test_dtype_is_the_default_mixed_precisions_compute_dtype():
    fsdp = _typed(f"{A}.fsdp_config.dtype=float16").actor_rollout_ref.actor.fsdp_config
    assert fsdp.mixed_precision == {"param_dtype": "float16"}
    given = {"param_dtype": "fp16", "reduce_dtype": "fp32"}
    fsdp = _typed(
        f"{A}.fsdp_config.dtype=float16", f"{A}.fsdp_config.mixed_precision={{param_dtype:fp16,reduce_dtype:fp32}}"
    )
    assert fsdp.actor_rollout_ref.actor.fsdp_config.mixed_precision == given and not alias_conflicts(fsdp)
    assert _typed().actor_rollout_ref.actor.fsdp_config.mixed_precision is None  # bfloat16: the default's own


def test_two_moved_spellings_are_reported_with_their_full_names():
    config = _typed("critic.model.fsdp_config.fsdp_size=2", "critic.fsdp.fsdp_size=4", f"{A}.grad_clip=0.5",
                    f"{A}.optim.clip_grad=0.7")  # fmt: skip
    assert sorted(alias_conflicts(config)) == [
        f"{A}.optim.clip_grad=0.7 and {A}.grad_clip=0.5 are two spellings of one setting, set to different values; "
        f"set one of them ({A}.optim.clip_grad is verl 0.9's)",
        "critic.fsdp.fsdp_size=4 and critic.model.fsdp_config.fsdp_size=2 are two spellings of one setting, set to "
        "different values; set one of them (critic.fsdp.fsdp_size is verl 0.9's)",
    ]
