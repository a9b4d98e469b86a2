"""``actor_rollout_ref.model.use_liger=True``: the FSDP engine hands the actor's and the reference's freshly loaded
HF model to Liger's patcher, before LoRA and FSDP wrapping, with the options the PPO forwards need.

Liger's kernels are Triton GPU kernels, so on CPU a stand-in ``liger_kernel`` package takes the patcher's place: it
records each call and patches the model in place the way Liger does (an instance's ``forward`` replaced), with a
change the log-probs show. The real kernels are compared with the plain model on a GPU in
``tests/workers/test_fsdp_workers_on_gpu.py::test_liger_kernels_train_the_same_model``.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from tests.workers.gpu_actor_steps import rollout_batch


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    from verl.demo.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(
        str(tmp_path_factory.mktemp("liger") / "model"),
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
    )


@pytest.fixture
def fake_liger(monkeypatch):
    """A ``liger_kernel`` whose patcher records its calls and doubles the final norm's output of the model."""
    calls = []

    def apply_to_instance(model, **options):
        calls.append({"class": type(model).__name__, "options": options})
        norm = model.model.norm
        original = norm.forward
        norm.forward = lambda hidden: 2.0 * original(hidden)

    monkey_patch = types.ModuleType("liger_kernel.transformers.monkey_patch")
    monkey_patch._apply_liger_kernel_to_instance = apply_to_instance
    monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN = {"qwen2": None}
    transformers_pkg = types.ModuleType("liger_kernel.transformers")
    transformers_pkg.monkey_patch = monkey_patch
    package = types.ModuleType("liger_kernel")
    package.transformers = transformers_pkg
    monkeypatch.setitem(sys.modules, "liger_kernel", package)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", transformers_pkg)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.monkey_patch", monkey_patch)
    return calls


def _policy_log_probs(model_path: str, use_liger: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(actor log-probs, reference log-probs) of one batch, from a one-worker in-process actor/ref group."""
    import ray

    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    overrides = [
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.model.use_liger={use_liger}",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    ]
    config = compose_config(overrides).actor_rollout_ref
    worker = RayClassWithInitArgs(ray.remote(ActorRolloutRefWorker), config=config, role="actor_rollout_ref")
    group = InProcessWorkerGroup(RayResourcePool([1], use_gpu=False), worker)
    group.init_model()
    batch = rollout_batch(vocab=100, seed=0)
    actor = group.compute_log_prob(batch).batch["old_log_probs"]
    ref = group.compute_ref_log_prob(batch).batch["ref_log_prob"]
    return actor, ref


def test_actor_and_reference_are_patched_before_wrapping(model_path, fake_liger, no_process_group_left):
    plain_actor, plain_ref = _policy_log_probs(model_path, use_liger=False)
    assert fake_liger == []
    actor, ref = _policy_log_probs(model_path, use_liger=True)
    # one call per model (actor, reference), on the HF class itself (FSDP2 renames it FSDP<class> when it wraps)
    assert [c["class"] for c in fake_liger] == ["Qwen2ForCausalLM", "Qwen2ForCausalLM"]
    # the PPO forwards read the logits: Liger's fused cross-entropy forward stays out
    assert all(c["options"] == {"fused_linear_cross_entropy": False, "swiglu": True} for c in fake_liger)
    mask = rollout_batch(vocab=100, seed=0).batch["response_mask"].bool()
    torch.testing.assert_close(plain_actor[mask], plain_ref[mask])
    # the patched modules are the ones each role computes with
    assert (actor[mask] - plain_actor[mask]).abs().max() > 1e-2
    assert (ref[mask] - plain_ref[mask]).abs().max() > 1e-2
    torch.testing.assert_close(actor[mask], ref[mask])


def test_a_model_type_without_liger_kernels_is_warned_about(fake_liger, caplog):
    from transformers import LlamaConfig, LlamaForCausalLM

    from verl.models.transformers.liger import apply_liger_kernels

    model = LlamaForCausalLM(
        LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=32)
    )
    with caplog.at_level("WARNING"):
        apply_liger_kernels(model, "actor_rollout_ref.model.use_liger", fused_linear_cross_entropy=False)
    assert "liger-kernel has no kernels for model_type='llama'" in caplog.text
