"""verl 0.9's keys of actor_rollout_ref.rollout, actor_rollout_ref.model, critic.model and distillation: the ones this
project honours are accepted (and checked), the others refused before Ray with the key and the reason."""

import json
import os

import pytest

from tests.trainer.config.checks import test_ppo_checks
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks.ppo import check_ppo_config

# the PPO checks' tiny model, data and base config (GAE, HF rollout, 2 CPU workers)
assets, base_cfg, _with = test_ppo_checks.assets, test_ppo_checks.base_cfg, test_ppo_checks._with

R = "actor_rollout_ref__rollout"
M = "actor_rollout_ref__model"
TEACHER = "distillation__teacher_models__teacher_model"


def _refused(cfg, *expected):
    with pytest.raises(ConfigError) as info:
        check_ppo_config(cfg)
    for text in expected:
        assert text in str(info.value), (text, str(info.value))


@pytest.mark.parametrize(
    "updates, expected",
    [
        ({f"{R}__quantization": "torchao"}, ["quantization='torchao'", "unquantized weights"]),
        ({f"{R}__quantization_config_file": "torchao_config.json"}, ["quantization_config_file"]),
        ({f"{R}__trace__backend": "mlflow"}, ["trace.backend='mlflow'", "trainer.logger"]),
        ({f"{R}__trace__token2text": True}, ["trace.token2text=True"]),
        ({f"{R}__agent__num_workers": 4}, ["agent.num_workers=4", "inside each rollout worker"]),
        ({f"{R}__full_determinism": True}, ["full_determinism=True", "rollout.seed"]),
        ({f"{R}__data_parallel_size": 2}, ["data_parallel_size=2"]),
        ({f"{R}__skip_tokenizer_init": False}, ["skip_tokenizer_init=False", "SGLang and TensorRT-LLM"]),
        ({f"{R}__prometheus__enable": True}, ["prometheus.enable=True", "server-mode"]),
        ({f"{R}__disaggregation__enabled": True}, ["disaggregation", "SGLang"]),
        ({f"{R}__engine_kwargs__trtllm": {"kv_cache_free_gpu_memory_fraction": 0.5}}, ["engine_kwargs.trtllm"]),
        ({f"{R}__multi_turn__function_tool_path": "tools.py"}, ["function_tool_path='tools.py'"]),
        ({f"{R}__scheduling_policy": "lifo"}, ["scheduling_policy='lifo'", "fcfs"]),
        ({f"{M}__mtp__enable": True}, ["actor_rollout_ref.model.mtp", "multi-token prediction"]),
        ({f"{M}__tiled_mlp__enabled": True}, ["actor_rollout_ref.model.tiled_mlp", "tiled MLP"]),
        ({f"{M}__lora__rank": 8}, ["actor_rollout_ref.model.lora.rank=8", "lora_rank"]),
        ({"critic__model__use_liger": True}, ["critic.model.use_liger=True"]),
        ({"critic__model__use_fused_kernels": True}, ["critic.model.use_fused_kernels=True"]),
        ({"critic__model__custom_chat_template": "{{ x }}"}, ["critic.model.custom_chat_template"]),
        ({"distillation__enabled": True}, ["distillation.enabled=True", "on-policy distillation is not implemented"]),
        ({"distillation__distillation_loss__loss_mode": "k1"}, ["distillation.distillation_loss", "not implemented"]),
        ({f"{TEACHER}__model_path": "/teacher"}, ["teacher_model.model_path='/teacher'", "distillation"]),
        ({f"{TEACHER}__inference__temperature": 0.5}, ["inference.temperature=0.5", "follows"]),
        ({"distillation__teacher_models__teacher2": {"key": "x"}}, ["distillation.teacher_models.teacher2"]),
        ({f"{M}__exclude_modules": ".*visual.*"}, ["exclude_modules='.*visual.*'", "lora_rank=0"]),
        ({f"{M}__lora_adapter_path": "/a"}, ["lora_adapter_path='/a'", "lora_rank=0"]),
    ],
)
def test_keys_without_a_runtime_here_are_refused(base_cfg, updates, expected):
    _refused(_with(base_cfg, **updates), *expected)


def test_keys_honoured_here_are_accepted(base_cfg):
    """Engine keys the vLLM rollout passes on, the hand-off's merge, LoRA's exclude list, and keys that follow the
    rollout by interpolation (a teacher's, which only a changed value of their own would be refused for)."""
    check_ppo_config(
        _with(
            base_cfg,
            **{
                f"{R}__enable_prefix_caching": False,
                f"{R}__scheduling_policy": "priority",
                f"{R}__enforce_eager": False,
                f"{R}__free_cache_engine": False,
                f"{R}__cudagraph_capture_sizes": [1, 2, 4],
                f"{R}__temperature": 0.7,
                f"{M}__lora__merge": True,
                f"{M}__lora_rank": 8,
                f"{M}__exclude_modules": ".*visual.*",
                "data__max_prompt_length": 16,
            },
        )
    )


def test_cudagraph_capture_sizes_need_graphs(base_cfg):
    _refused(_with(base_cfg, **{f"{R}__cudagraph_capture_sizes": [1, 2]}), "enforce_eager=True", "no CUDA graph")
    bad = {f"{R}__cudagraph_capture_sizes": [0], f"{R}__enforce_eager": False, f"{R}__free_cache_engine": False}
    _refused(_with(base_cfg, **bad), "cudagraph_capture_sizes=[0]", ">= 1")


# ------------------------------------------------------------------ a standalone rollout's pool at verl 0.9's place
@pytest.fixture
def standalone_09(base_cfg):
    return _with(
        base_cfg,
        actor_rollout_ref__hybrid_engine=False,
        trainer__n_gpus_per_node=1,
        actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=4,
        **{f"{R}__nnodes": 1, f"{R}__n_gpus_per_node": 1},
    )


def test_verl_09s_rollout_pool_keys_name_the_standalone_pool(standalone_09):
    from verl.trainer.main_ppo import ray_init_kwargs

    check_ppo_config(standalone_09)
    typed = PPOConfig.from_config(standalone_09)
    assert (typed.rollout.nnodes, typed.rollout.n_gpus_per_node, typed.rollout.world_size) == (1, 1, 1)
    # every reader of the pool sees it: e.g. the CPUs asked of Ray (trainer + rollout workers + the driver)
    assert ray_init_kwargs(standalone_09)["num_cpus"] >= 3
    # the top-level block at the same values is no conflict
    check_ppo_config(_with(standalone_09, rollout__n_gpus_per_node=1))


@pytest.mark.parametrize(
    "updates, expected",
    [
        ({"rollout__n_gpus_per_node": 2}, ["actor_rollout_ref.rollout.nnodes=1", "rollout.n_gpus_per_node=2"]),
        ({"actor_rollout_ref__hybrid_engine": True}, ["nnodes=1 names a standalone", "hybrid_engine=False"]),
        ({f"{R}__nnodes": 0, f"{R}__n_gpus_per_node": 3}, ["n_gpus_per_node=3 is read only", "nnodes > 0"]),
        ({f"{R}__nnodes": -1}, ["nnodes=-1", ">= 0"]),
    ],
)
def test_verl_09s_rollout_pool_keys_refused_where_they_would_do_nothing(standalone_09, updates, expected):
    _refused(_with(standalone_09, **updates), *expected)


def test_a_users_checkpoint_transport_is_imported_by_the_check(standalone_09, tmp_path, monkeypatch):
    (tmp_path / "check_transport.py").write_text(
        "from verl.checkpoint_engine.base import register_checkpoint_engine\n"
        "from verl.checkpoint_engine.local import LocalCheckpointEngine\n"
        "register_checkpoint_engine('check_mailbox')(type('CheckMailbox', (LocalCheckpointEngine,), {}))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    engine = f"{R}__checkpoint_engine"
    check_ppo_config(
        _with(
            standalone_09,
            **{f"{engine}__backend": "check_mailbox", f"{engine}__custom_backend_module": "check_transport"},
        )
    )
    _refused(
        _with(standalone_09, **{f"{engine}__custom_backend_module": "no_such_transport"}),
        "custom_backend_module='no_such_transport' cannot be imported",
    )


# ------------------------------------------------------------------ model files: config.json, adapters
def test_hf_config_path_is_where_the_check_reads_the_config(base_cfg, assets, tmp_path):
    weights = tmp_path / "weights"  # the weights' folder without a config.json
    weights.mkdir()
    _refused(_with(base_cfg, **{f"{M}__path": str(weights)}), "actor_rollout_ref.model.path")
    check_ppo_config(
        _with(base_cfg, **{f"{M}__path": str(weights), f"{M}__hf_config_path": str(assets / "tiny_qwen2")})
    )


def test_lora_adapter_path_must_hold_an_adapter(base_cfg, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    with_adapter = {f"{M}__lora_rank": 8, f"{M}__lora_adapter_path": str(adapter)}
    _refused(_with(base_cfg, **with_adapter), "is not a saved PEFT adapter", "adapter_config.json")
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    check_ppo_config(_with(base_cfg, **with_adapter))
    assert os.path.isdir(adapter)
