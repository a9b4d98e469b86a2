"""The checkpoint-engine methods through Ray worker groups on separate resource pools (the standalone rollout's
layout): the non-blocking calls return futures the driver collects together, the address comes from actor rank 0,
and a sync reaches the rollout actor's generations."""

from __future__ import annotations

import pytest
import torch

from tests.workers.gpu_actor_steps import rollout_batch
from tests.workers.roles.test_standalone_rollout import VOCAB, _config, _prompts


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from verl.demo.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(str(tmp_path_factory.mktemp("standalone_ray") / "model"), hidden_size=64, num_layers=2)


def test_ray_groups_sync_weights_and_stamp_versions(ray_cluster, model_dir):
    ray = ray_cluster
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    pools, groups = [], []
    try:
        for hybrid, role in ((True, "actor_rollout"), (False, "rollout")):
            pool = RayResourcePool([1], use_gpu=False, name_prefix=f"ckpt_{role}")
            worker = RayClassWithInitArgs(
                ray.remote(ActorRolloutRefWorker), config=_config(model_dir, hybrid), role=role
            )
            pools.append(pool)
            groups.append(RayWorkerGroup(pool, worker, device_name="cpu"))
        actor_wg, rollout_wg = groups
        actor_wg.init_model()
        rollout_wg.init_model()
        addr, port = actor_wg.checkpoint_engine_address()[0]
        ray.get(actor_wg.init_checkpoint_engine(addr, port, 2, 0) + rollout_wg.init_checkpoint_engine(addr, port, 2, 1))
        actor_wg.update_actor(rollout_batch(vocab=VOCAB, seed=2))
        sent, received = ray.get(actor_wg.send_weights(1) + rollout_wg.receive_weights())
        assert sent.version == received.version == 1 and sent.bytes == received.bytes > 0
        generated = rollout_wg.generate_sequences(_prompts())
        assert set(generated.non_tensor_batch["weight_version"]) == {1}
        assert torch.equal(generated.batch["responses"], actor_wg.generate_sequences(_prompts()).batch["responses"])
        actor_wg.close_checkpoint_engine()
        rollout_wg.close_checkpoint_engine()
    finally:
        for group in groups:
            for handle in group.workers:
                ray.kill(handle)
        for pool in pools:
            for pg in pool.pgs or []:
                ray.util.remove_placement_group(pg)
