"""RayPPOTrainer with the in-process worker group: every estimator for one step, KL variants, a recipe subclass.

No Ray actors: the workers live in this process, which is also how a user debugs a step.
"""

import json
import math

import pytest
import torch
import torch.distributed as dist

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace, write_reward_fn
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.main_ppo import build_trainer, prepare_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ppo_inprocess")
    ws = make_workspace(root)
    ws["reward"] = write_reward_fn(root)
    yield ws
    if dist.is_initialized():
        dist.destroy_process_group()


def single_process_config(ws, estimator, extra=()):
    overrides = base_overrides(ws, estimator, steps=1) + [
        "trainer.n_gpus_per_node=1",
        "trainer.resume_mode=disable",
        f"custom_reward_function.path={ws['reward']}",
        "trainer.run_report=False",
        *extra,
    ]
    config = compose_config(overrides)
    prepare_config(config)
    return config


def actor_params(trainer) -> dict[str, torch.Tensor]:
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    return {k: v.detach().clone() for k, v in worker.actor_module.state_dict().items()}


class RecordingTrainer(RayPPOTrainer):
    """A recipe-style subclass: records every step's metrics and overrides one phase."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.logged, self.advantage_calls = [], 0

    def _compute_advantage(self, batch, reward, metrics):
        self.advantage_calls += 1
        return super()._compute_advantage(batch, reward, metrics)

    def train_step(self, batch, timing_raw):
        batch, metrics = super().train_step(batch, timing_raw)
        self.logged.append(metrics)
        return batch, metrics


def run_one_step(config, trainer_cls=RecordingTrainer):
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.__class__ = trainer_cls if trainer_cls is not RayPPOTrainer else trainer.__class__
    if isinstance(trainer, RecordingTrainer):
        trainer.logged, trainer.advantage_calls = [], 0
    trainer.init_workers()
    before = actor_params(trainer)
    trainer.fit()
    return trainer, before, actor_params(trainer)


@pytest.mark.parametrize(
    "estimator",
    ["gae", "grpo", "grpo_passk", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "gpg"],
)
def test_every_estimator_one_step(workspace, estimator):
    trainer, before, after = run_one_step(single_process_config(workspace, estimator))
    assert trainer.advantage_calls == 1
    metrics = trainer.logged[0]
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, f"{estimator}: no actor parameter changed (grad_norm={metrics.get('actor/grad_norm')})"
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/advantages/mean", "timing_s/gen"):
        assert key in metrics and math.isfinite(metrics[key]), (estimator, key, metrics.get(key))
    if estimator == "gae":
        assert "critic/vf_loss" in metrics and "critic/values/mean" in metrics
    if estimator == "remax":
        assert "timing_s/gen_max" in metrics


class AdvantageCapturingTrainer(RecordingTrainer):
    """Keeps each step's batch as the estimator left it."""

    def _compute_advantage(self, batch, reward, metrics):
        batch = super()._compute_advantage(batch, reward, metrics)
        self.with_advantages = batch
        return batch


def test_grpo_with_one_response_per_prompt_trains_on_each_score(workspace):
    """GRPO at rollout.n=1 (verl's rollout-correction examples run so): the config check lets it run with a
    warning, and every response's advantage is its own score over 1 + eps (a group of one: mean 0, std 1)."""
    config = single_process_config(workspace, "grpo", ["actor_rollout_ref.rollout.n=1"])
    trainer, before, after = run_one_step(config, AdvantageCapturingTrainer)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    batch = trainer.with_advantages.batch
    assert len(set(trainer.with_advantages.non_tensor_batch["uid"])) == len(batch["advantages"])  # groups of one
    mask = batch["response_mask"].bool()
    scores = batch["token_level_rewards"].sum(-1, keepdim=True).expand_as(mask)
    assert scores[mask].abs().max() > 0, "every score was 0: the comparison would prove nothing"
    torch.testing.assert_close(batch["advantages"][mask], (scores / (1 + 1e-6))[mask])


def test_critic_enable_runs_the_critic_beside_a_critic_free_estimator(workspace):
    """critic.enable=True (verl 0.9): GRPO's advantages, and the critic computes values and trains on the returns;
    with its v0.4 FSDP block spelling (critic.model.fsdp_config) carried over to verl 0.9's critic.fsdp."""
    config = single_process_config(
        workspace, "grpo", extra=["critic.enable=True", "critic.model.fsdp_config.reshard_after_forward=False"]
    )
    trainer, _, _ = run_one_step(config)
    assert trainer.use_critic and trainer.ppo_config.critic.fsdp.reshard_after_forward is False
    metrics = trainer.logged[0]
    for key in ("critic/vf_loss", "critic/values/mean", "critic/grad_norm"):
        assert key in metrics and math.isfinite(metrics[key]), (key, metrics.get(key))


@pytest.mark.parametrize(
    ("loss_mode", "extra"),
    [
        ("gspo", ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",)),
        ("gpg", ()),
        ("geo_mean", ("actor_rollout_ref.actor.clip_ratio_low=0.4", "actor_rollout_ref.actor.clip_ratio_high=0.4")),
        ("sapo", ("actor_rollout_ref.actor.policy_loss.tau_pos=0.5", "actor_rollout_ref.actor.policy_loss.tau_neg=2")),
        ("cispo", ("actor_rollout_ref.actor.clip_ratio_low=10", "actor_rollout_ref.actor.clip_ratio_high=0.2")),
    ],
)
def test_newer_policy_losses_one_step(workspace, loss_mode, extra):
    """GRPO with each post-v0.4 loss, two epochs so the second is off-policy (ratios away from 1)."""
    overrides = [f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}", "actor_rollout_ref.actor.ppo_epochs=2"]
    trainer, before, after = run_one_step(single_process_config(workspace, "grpo", extra=[*overrides, *extra]))
    metrics = trainer.logged[0]
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm"):
        assert key in metrics and math.isfinite(metrics[key]), (loss_mode, key, metrics.get(key))
    assert any(not torch.equal(before[k], after[k]) for k in before), loss_mode


@pytest.mark.parametrize(
    ("extra", "separate_pass"),
    [
        ((), False),  # one epoch over one mini batch: the update's own forward gives the old log-probs
        (("actor_rollout_ref.actor.ppo_epochs=2",), True),
        (("actor_rollout_ref.actor.ppo_mini_batch_size=2",), True),
    ],
)
def test_old_log_prob_pass_only_when_the_update_is_not_on_policy(workspace, extra, separate_pass):
    trainer, before, after = run_one_step(single_process_config(workspace, "grpo", extra=extra))
    metrics = trainer.logged[0]
    # the worker reports its own seconds for every compute_log_prob call it serves
    assert ("timing_s/worker/compute_log_prob" in metrics) is separate_pass
    assert trainer._needs_old_log_prob() is separate_pass
    assert math.isfinite(metrics["actor/entropy"]) and any(not torch.equal(before[k], after[k]) for k in before)


def test_kl_in_reward_adaptive_and_critic_warmup(workspace):
    config = single_process_config(
        workspace,
        "gae",
        extra=[
            "algorithm.use_kl_in_reward=True",
            "algorithm.kl_ctrl.type=adaptive",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "trainer.critic_warmup=5",
        ],
    )
    trainer, before, after = run_one_step(config)
    metrics = trainer.logged[0]
    assert "actor/reward_kl_penalty" in metrics and "actor/reward_kl_penalty_coeff" in metrics
    assert "critic/vf_loss" in metrics  # the critic trains during warm-up ...
    assert "actor/pg_loss" not in metrics  # ... the actor does not
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_val_before_train_reports_val_core(workspace, tmp_path):
    dump_dir = tmp_path / "val_dump"
    config = single_process_config(
        workspace,
        "grpo",
        extra=[
            "trainer.val_before_train=True",
            f"trainer.validation_data_dir={dump_dir}",
            "actor_rollout_ref.rollout.val_kwargs.n=2",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        ],
    )
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.init_workers()
    trainer.global_steps = 0
    metrics = trainer._validate()
    assert "val-core/openai/gsm8k/reward/mean@2" in metrics, metrics
    assert "val-aux/openai/gsm8k/reward/std@2" in metrics, metrics
    # 4 validation prompts x val_kwargs.n=2 samples, one JSON line each
    lines = (dump_dir / "0.jsonl").read_text().splitlines()
    assert len(lines) == 8 and all({"input", "output", "score", "step"} <= set(json.loads(x)) for x in lines)


def test_reward_model_worker_scores_with_a_sequence_classifier(workspace, tmp_path_factory):
    from verl.demo.tiny_model import make_tiny_model_dir

    rm_path = make_tiny_model_dir(
        str(tmp_path_factory.mktemp("rm") / "rm"),
        head="sequence_classification",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        seed=3,
    )
    config = single_process_config(
        workspace,
        "grpo",
        extra=[
            "reward_model.enable=True",
            f"reward_model.model.path={rm_path}",
            "reward_model.micro_batch_size_per_gpu=4",
        ],
    )
    trainer, before, after = run_one_step(config)
    metrics = trainer.logged[0]
    assert "timing_s/worker/compute_rm_score" in metrics
    # the reward is the model's score (a real number, not the 0/1 of a rule), placed on one token per response
    assert metrics["critic/score/min"] != metrics["critic/score/max"]
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_reward_model_with_its_own_chat_template(workspace, tmp_path_factory):
    import json
    import os

    from verl.demo.tiny_model import make_tiny_model_dir

    rm_path = make_tiny_model_dir(
        str(tmp_path_factory.mktemp("rm2") / "rm"),
        head="sequence_classification",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        seed=4,
    )
    # a reward model whose tokenizer formats chats differently: the worker must re-tokenize (template switch)
    config_path = os.path.join(rm_path, "tokenizer_config.json")
    with open(config_path) as f:
        tok_cfg = json.load(f)
    tok_cfg["chat_template"] = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    with open(config_path, "w") as f:
        json.dump(tok_cfg, f)
    for name in ("chat_template.jinja",):
        if os.path.exists(os.path.join(rm_path, name)):
            os.remove(os.path.join(rm_path, name))
    config = single_process_config(
        workspace,
        "grpo",
        extra=[
            "reward_model.enable=True",
            f"reward_model.model.path={rm_path}",
            "reward_model.micro_batch_size_per_gpu=4",
            "reward_model.max_length=64",
            "data.return_raw_chat=True",
        ],
    )
    trainer, _, _ = run_one_step(config)
    worker = trainer.rm_wg.workers[0].worker_dict["rm"]
    assert worker.input_tokenizer is not None  # the switch was taken
    assert trainer.logged[0]["critic/score/min"] != trainer.logged[0]["critic/score/max"]


def test_verl_09_profiler_keys_profile_a_step_and_run_the_hook_once(workspace, tmp_path):
    """global_profiler.steps with the actor's `enable` (no ranks named: rank 0), traces under
    global_profiler.save_path, and the finish hook once after the last profiled step; a dataset of the first
    data.train_max_samples rows."""
    hook_log = tmp_path / "hook.log"
    config = single_process_config(
        workspace,
        "grpo",
        [
            "global_profiler.steps=[1]",
            f"global_profiler.save_path={tmp_path / 'traces'}",
            "actor_rollout_ref.actor.profiler.enable=True",
            f"global_profiler.finish_hook_cmd='echo $VERL_PROFILE_ROLE >> {hook_log}'",
            "data.train_max_samples=8",
            "data.shuffle=False",
        ],
    )
    trainer, _, _ = run_one_step(config)
    assert len(trainer.train_dataset) == 8
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["rank0_capture0.json"]
    assert hook_log.read_text().split() == ["actor"]
