"""The reward-model worker with ``reward_model.model.use_remove_padding=True``: its packed forward gives the padded
forward's ``rm_scores`` (fp32, 1e-5), each score on the response's last valid token."""

from __future__ import annotations

import pytest
import torch

import verl.workers.engine.fsdp.hf_forward as hf_forward
from tests.workers.gpu_actor_steps import PROMPT_LEN, rollout_batch


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory) -> str:
    from verl.demo.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(
        str(tmp_path_factory.mktemp("rm") / "rm"),
        head="token_classification",
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        seed=3,
    )


def _reward_model_group(rm_path: str, extra: list[str]):
    import ray

    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool
    from verl.workers.roles.reward_model import RewardModelWorker

    overrides = [
        "reward_model.enable=True",
        f"reward_model.model.path={rm_path}",
        "reward_model.model.input_tokenizer=null",  # the policy's tokenizer is the model's: no re-templating
        "reward_model.strategy=fsdp2",
        *extra,
    ]
    config = compose_config(overrides).reward_model
    group = InProcessWorkerGroup(
        RayResourcePool([1], use_gpu=False), RayClassWithInitArgs(ray.remote(RewardModelWorker), config=config)
    )
    group.init_model()
    return group


@pytest.mark.parametrize(
    "batching",
    [
        ["reward_model.micro_batch_size_per_gpu=3"],
        ["reward_model.use_dynamic_bsz=True", "reward_model.forward_max_token_len_per_gpu=48"],
    ],
    ids=["micro_batch_size", "dynamic_bsz"],
)
def test_packed_scores_equal_the_padded_ones(rm_path, batching, monkeypatch, no_process_group_left):
    data = rollout_batch(vocab=200, seed=4)  # left-padded prompts, right-padded responses of mixed lengths
    packed_calls = []
    pack = hf_forward.pack_padded_inputs
    monkeypatch.setattr(hf_forward, "pack_padded_inputs", lambda *a: packed_calls.append(1) or pack(*a))

    padded = _reward_model_group(rm_path, batching).compute_rm_score(data).batch["rm_scores"]
    assert packed_calls == []
    packed_group = _reward_model_group(rm_path, ["reward_model.model.use_remove_padding=True", *batching])
    packed = packed_group.compute_rm_score(data).batch["rm_scores"]
    assert len(packed_calls) >= 2  # several micro batches, each one packed row

    assert packed.dtype == padded.dtype == torch.float32
    torch.testing.assert_close(packed, padded, rtol=0, atol=1e-5)
    # one score per response, on its last valid token; zeros elsewhere
    response_mask = data.batch["attention_mask"][:, PROMPT_LEN:]
    last = response_mask.sum(-1) - 1
    rows = torch.arange(len(data))
    assert torch.count_nonzero(packed) == len(data)
    assert torch.all(packed[rows, last] != 0)
    assert packed[rows, last].std() > 1e-3


def test_fused_kernels_leave_the_scores_alone(rm_path, no_process_group_left):
    """``reward_model.model.use_fused_kernels`` follows the policy's switch; the fused head it names replaces a
    language-model head's (tokens, vocab) logits, and a score head has no vocabulary: the scores are the same."""
    data = rollout_batch(vocab=200, seed=5)
    batching = "reward_model.micro_batch_size_per_gpu=4"
    plain = _reward_model_group(rm_path, [batching]).compute_rm_score(data).batch["rm_scores"]
    fused_group = _reward_model_group(rm_path, [batching, "actor_rollout_ref.model.use_fused_kernels=True"])
    assert fused_group.workers[0].config.model.use_fused_kernels
    fused = fused_group.compute_rm_score(data).batch["rm_scores"]
    torch.testing.assert_close(fused, plain, rtol=0, atol=0)
    assert torch.count_nonzero(plain) == len(data)
