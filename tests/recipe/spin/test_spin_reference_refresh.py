"""SPIN's trainer and worker in-process: the DPO step moves the actor away from the reference, and the refresh
makes the reference the actor again (log-probs equal after it, different before)."""

import math

import torch

from recipe.spin.main_spin import build_spin_trainer, prepare_spin_config
from tests.recipe.spin.spin_test_utils import compose_spin_config, spin_overrides
from verl import DataProto
from verl.single_controller.inprocess import InProcessWorkerGroup


def make_trainer(ws, extra=(), resume_mode="disable"):
    config = compose_spin_config(
        spin_overrides(ws) + ["trainer.n_gpus_per_node=1", f"trainer.resume_mode={resume_mode}", *extra]
    )
    prepare_spin_config(config)
    trainer = build_spin_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.init_workers()
    return trainer


def log_probs(trainer, batch: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
    """(actor, reference) per-token log-probs of the batch's responses, zero outside the response mask."""
    mask = batch.batch["response_mask"]
    actor = trainer.actor_rollout_wg.compute_log_prob(batch).batch["old_log_probs"]
    ref = trainer.actor_rollout_wg.compute_ref_log_prob(batch).batch["ref_log_prob"]
    return actor * mask, ref * mask


def step(trainer, step_no: int, timing_raw: dict):
    trainer.global_steps = step_no
    batch = DataProto.from_single_dict(next(iter(trainer.train_dataloader)))
    return trainer.train_step(batch, timing_raw)


def test_dpo_steps_and_reference_refresh(workspace):
    trainer = make_trainer(workspace, ["trainer.ref_update_freq=2", "actor_rollout_ref.actor.ppo_epochs=2"])
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    assert worker.role == "actor_rollout_ref" and type(worker.actor).__name__ == "SPINDataParallelPPOActor"

    timing = {}
    batch, metrics = step(trainer, 1, timing)  # step 1 % 2 != 0: a DPO update, no refresh
    assert "update_ref" not in timing and "update_actor" in timing
    assert metrics["spin/num_pairs"] > 0
    # epoch 1 starts with the actor equal to the reference (loss log 2); epoch 2, after one step, is lower, so the
    # mean over the two is below log 2 and the chosen responses gained on the rejected ones
    assert metrics["actor/dpo_loss"] < math.log(2)
    assert metrics["actor/rewards_margins"] > 0 and metrics["actor/rewards_accuracies"] > 0
    actor, ref = log_probs(trainer, batch)
    assert not torch.allclose(actor, ref, atol=1e-4), "before a refresh the reference must differ from the actor"

    # the worker's refresh copies actor -> reference, never the other way
    copied = trainer.actor_rollout_wg.update_reference_policy()
    assert copied[0] == len(list(worker.actor_module.parameters()))
    actor_after, ref_after = log_probs(trainer, batch)
    assert torch.equal(actor_after, actor) and torch.allclose(ref_after, actor, atol=1e-6)

    timing = {}
    batch, metrics = step(trainer, 2, timing)  # step 2 % 2 == 0: the trainer refreshes after the update
    assert "update_ref" in timing
    assert metrics["actor/dpo_loss"] < math.log(2)
    actor, ref = log_probs(trainer, batch)
    assert torch.allclose(actor, ref, atol=1e-6), (actor - ref).abs().max()


def test_resume_refreshes_the_reference_from_the_loaded_actor(workspace, tmp_path):
    # checkpoints hold the actor only; a resumed run makes its reference that actor (here step 1 of a run that
    # refreshes every 2 steps: the closest the checkpoint allows, with a warning)
    extra = [f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.ref_update_freq=2"]
    trainer = make_trainer(workspace, extra)
    batch, _ = step(trainer, 1, {})
    trainer._save_checkpoint()
    actor, ref = log_probs(trainer, batch)
    assert not torch.allclose(actor, ref, atol=1e-4)

    resumed = make_trainer(workspace, extra, resume_mode="auto")
    assert resumed._load_checkpoint() == 1
    resumed_actor, resumed_ref = log_probs(resumed, batch)
    assert torch.allclose(resumed_actor, actor, atol=1e-6) and torch.allclose(resumed_ref, actor, atol=1e-6)
