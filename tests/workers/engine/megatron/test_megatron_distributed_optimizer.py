"""``use_distributed_optimizer=True`` (optimizer state split over data-parallel replicas) computes what the unsharded
optimizer computes, on 2 gloo processes; and its gloo shim, reduce-scatter via all-reduce, gives reduce-scatter's sums.

The Megatron critic is trained twice with and twice without the distributed optimizer, in the same two processes: at
data parallel 2 (each rank steps half of the flattened parameters) and at tensor parallel 2 (one replica: the global
norm counts each tensor-parallel duplicate once, here through the slice). Two updates each (the second one reads the
Adam moments of the first); the gradient norms, values and parameters must agree to float rounding. A checkpoint of the
sharded optimizer (its slices gathered per parameter into the distributed checkpoint) resumes exactly.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.workers.engine.megatron.test_megatron_critic import CRITIC_BATCHES_AND_OPTIM  # noqa: E402
from tests.workers.gpu_actor_steps import RESPONSE_LEN, rollout_batch  # noqa: E402

WORLD = 2


def _critic(models: dict, tp: int, distributed: bool):
    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.workers.roles.critic import CriticWorker

    overrides = [
        f"actor_rollout_ref.model.path={models['actor']}",
        f"critic.model.path={models['critic']}",
        "critic.strategy=megatron",
        *CRITIC_BATCHES_AND_OPTIM,
        "critic.grad_clip=0.5",
        f"critic.megatron.tensor_model_parallel_size={tp}",
        "critic.megatron.sequence_parallel=False",
        f"critic.megatron.use_distributed_optimizer={distributed}",
        f"data.max_response_length={RESPONSE_LEN}",
    ]
    critic = CriticWorker(compose_config(overrides, "ppo_megatron_trainer").critic)
    critic.init_model()
    return critic


def _collect(part: torch.Tensor) -> torch.Tensor:
    parts = [None] * WORLD
    dist.all_gather_object(parts, part)
    return torch.cat(parts)


def _params(critic) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in critic.engine.hf_weights()}


def _run(rank: int, models: dict, out: str, ckpt: str):
    from tests.workers.engine.megatron.test_megatron_engine import exact_resume
    from verl.workers.engine.megatron.cpu_shims import reduce_scatter_via_all_reduce

    torch.set_num_threads(1)
    results = {}
    # the shim: rank r's slice of the sum of every rank's input
    inputs = [torch.arange(6, dtype=torch.float32) * (r + 1) + r for r in range(WORLD)]
    slice_ = torch.empty(3)
    reduce_scatter_via_all_reduce(slice_, inputs[rank].clone())
    results["shim"] = _collect(slice_[None])
    results["shim_expected"] = sum(inputs).view(WORLD, 3)

    full = rollout_batch(vocab=200, seed=5)
    full.batch["returns"] = torch.randn(full.batch["responses"].shape, generator=torch.Generator().manual_seed(7))
    shard = full.chunk(WORLD)[rank]
    for tp in (1, 2):
        for distributed in (False, True):
            critic = _critic(models, tp, distributed)
            before = _params(critic)
            values = _collect(critic.compute_values(shard).batch["values"])
            full.batch["values"] = values
            norms = []
            for _ in range(2):
                metrics = critic.update_critic(full.chunk(WORLD)[rank]).meta_info["metrics"]
                norms.append(metrics["critic/grad_norm"][0])
            result = results[(tp, distributed)] = {"grad_norms": norms, "params": _params(critic), "before": before}
            result["values_after"] = _collect(critic.compute_values(shard).batch["values"])
            groups = critic.engine.optimizer.param_groups
            result["optimizer_numel"] = sum(p.numel() for g in groups for p in g["params"])
            if tp == 1 and distributed:
                update = lambda c=critic: c.update_critic(full.chunk(WORLD)[rank])  # noqa: E731
                result.update(exact_resume(critic, update, lambda c=critic: _params(c), result["params"], ckpt))
    if rank == 0:
        torch.save(results, out)


def test_distributed_optimizer_equals_the_unsharded_one(models, tmp_path):
    out, ckpt = str(tmp_path / "result.pt"), str(tmp_path / "global_step_1" / "critic")
    spawn_gloo_ranks(_run, WORLD, models, out, ckpt)
    results = torch.load(out)
    assert torch.equal(results["shim"], results["shim_expected"])
    for tp in (1, 2):
        plain, sharded = results[(tp, False)], results[(tp, True)]
        moved = max((t - plain["before"][k]).abs().max().item() for k, t in plain["params"].items())
        diffs = {
            "grad_norms": max(abs(a - b) / a for a, b in zip(plain["grad_norms"], sharded["grad_norms"])),
            "params": max((plain["params"][k] - t).abs().max().item() for k, t in sharded["params"].items()) / moved,
            "values_after": (plain["values_after"] - sharded["values_after"]).abs().max().item(),
        }
        print(f"tp={tp}: distributed optimizer vs unsharded", diffs, "largest update", moved)
        assert plain["grad_norms"][0] > 0.5 and moved > 1e-3  # clipped (the norm feeds the step), and moved
        # tensor parallel 2 sums the norm's squares in another order (1e-7), which Adam's step may amplify
        assert diffs["grad_norms"] < 1e-6 and diffs["params"] < 1e-3 and diffs["values_after"] < 1e-5, diffs
        if tp == 1:  # the same sums in the same order: the same numbers
            assert diffs["grad_norms"] == diffs["params"] == diffs["values_after"] == 0, diffs
        # the optimizer holds one slice of the parameters per data-parallel rank (tp=1: two replicas)
        dp = WORLD // tp
        assert sharded["optimizer_numel"] == -(-plain["optimizer_numel"] // dp)
    resume = results[(1, True)]
    assert resume["second_moved"] > 1e-4 and resume["restored_exact"] and resume["resumed_exact"], resume
