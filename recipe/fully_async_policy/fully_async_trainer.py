"""``FullyAsyncRayTrainer``: the rollout generates continuously while the actor trains on what is ready.

The rollout runs on a pool of its own (``actor_rollout_ref.hybrid_engine=False``). A ``Rollouter`` thread of the
driver generates mini-batches of ``ppo_mini_batch_size`` prompts into a bounded queue (several at once, as many as
the staleness bound admits), each tagged with the weight version that generated it. Each update takes
``async_training.require_batches`` mini-batches from the queue; a mini-batch more than ``staleness_threshold``
versions behind the actor (version = updates done) is dropped, never trained (``fully_async/dropped_samples``). Every
``trigger_parameter_sync_step`` updates the actor's weights go to the rollout through the checkpoint engine (without
partial rollout, once no mini-batch is generating). Validation runs beside the rollouts and the training, on a thread
of its own. The step pieces are those of ``RayPPOTrainer`` (reward to update) and the weight transfer that of the
one-step off-policy trainer.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from recipe.fully_async_policy.fully_async_rollouter import END, Rollouter, RolloutItem
from verl import DataProto
from verl.trainer.config import async_training_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, pop_worker_timing
from verl.utils.debug import marked_timer

__all__ = ["FullyAsyncRayTrainer"]


class FullyAsyncRayTrainer(RayPPOTrainer):
    """verl's fully async trainer on this library's pieces. Per step it logs ``fully_async/*``: the trained
    samples' versions and staleness, samples dropped as too stale (this step and in all), the queue's size, the
    wait for data (``timing_s/wait_rollout``, outside ``timing_s/step``), and ``timing_s/sync_rollout_weights``
    with ``checkpoint_engine/*`` on sync steps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.hybrid_engine:
            raise ValueError(
                "the fully async trainer runs the rollout on a pool of its own: set "
                "actor_rollout_ref.hybrid_engine=False (and rollout.nnodes / rollout.n_gpus_per_node)"
            )
        cfg = async_training_config(self.config)
        self.staleness_threshold = int(cfg.staleness_threshold)
        self.max_weight_staleness = self.staleness_threshold  # RayPPOTrainer stops the run on anything older
        self.trigger_parameter_sync_step = int(cfg.trigger_parameter_sync_step)
        self.require_batches = int(cfg.require_batches)
        # a weight sync pauses the generations in flight instead of waiting for them (the rollout worker's WeightGate)
        self.partial_rollout = bool(cfg.partial_rollout)
        # mini-batches generating at once: as many as the staleness bound admits (one update's worth per version)
        self.max_in_flight = self.require_batches * (self.staleness_threshold + 1)
        self.wait_timeout_s = float(self.ppo_config.trainer.watchdog_timeout_s or 3600)
        self.rollouter: Rollouter | None = None
        # a validation running beside the training (its thread, its step, its metrics or error when done)
        self._validation: dict | None = None
        self.dropped_samples = 0
        self._taken = 0  # mini-batches taken for the update being collected
        self._data_version = 0  # the actor's version while the update being collected trains

    def init_workers(self) -> None:
        host_workers = self.host_worker_processes()
        if host_workers:
            from verl.utils.distributed import cpu_share

            print(
                f"fully async: {self.ppo_config.trainer.n_gpus_per_node} trainer and "
                f"{self.ppo_config.rollout.n_gpus_per_node} rollout processes share this host's cores, "
                f"{cpu_share(host_workers)} torch threads each; up to {self.max_in_flight} mini-batches generate at "
                "once"
            )
        super().init_workers()
        if self.partial_rollout:
            self.rollout_wg.enable_partial_rollout()

    def _worker_actor_options(self, roles: set[str]) -> dict:
        options = super()._worker_actor_options(roles)
        if "rollout" in roles:
            # threads of the rollout actor: the mini-batches in flight, a validation beside them, and (partial
            # rollout) receive_weights while they generate
            options["max_concurrency"] = self.max_in_flight + 2
        return options

    # ------------------------------------------------------------------------------------------------ the loop
    def fit(self) -> None:
        """``RayPPOTrainer.fit`` with the Rollouter running; it is stopped however the loop ends."""
        try:
            super().fit()
        finally:
            self.shutdown()

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Stop the Rollouter and wait for its thread and a validation in flight (bounded by ``timeout_s``)."""
        try:
            if self._validation is not None:
                self._validation["thread"].join(timeout_s)
                self._validation = None
        finally:
            if self.rollouter is not None:
                self.rollouter.stop(timeout_s)

    def _train_batches(self):
        """(epoch, generated batch as a dict) per update, from the Rollouter's queue."""
        self.rollouter = self._make_rollouter(super()._train_batches())
        self.rollouter.start()
        while True:
            collected = self._collect_update()
            if collected is None:
                return
            epoch, batch = collected
            yield epoch, {**batch.batch, **batch.non_tensor_batch}

    def _make_rollouter(self, prompt_batches) -> Rollouter:
        return Rollouter(
            source=self._mini_batches(prompt_batches),
            generate=self._generate_mini_batch,
            version=lambda: self.weight_sync.version,
            trainer_position=lambda: (self._data_version, self._taken),
            staleness_threshold=self.staleness_threshold,
            require_batches=self.require_batches,
            worker_name=self._rollout_group_name(),
            max_in_flight=self.max_in_flight,
        )

    def _rollout_group_name(self) -> str:
        names = getattr(self.rollout_wg, "worker_names", None)
        return f"rollout ({', '.join(map(str, names))})" if names else "rollout"

    def _mini_batches(self, prompt_batches):
        """Each dataloader batch (``train_batch_size`` prompts) as ``require_batches`` mini-batches."""
        for epoch, batch_dict in prompt_batches:
            for chunk in DataProto.from_single_dict(batch_dict).chunk(self.require_batches):
                # chunks share their parent's meta_info; each mini-batch's generation adds its own (weight_version)
                chunk.meta_info = dict(chunk.meta_info)
                yield epoch, chunk

    def _generate_mini_batch(self, prompts: DataProto, index: int) -> DataProto:
        """Generate ``rollout.n`` responses per prompt and merge them (the Rollouter's thread)."""
        gen_batch = self._pop_generation_inputs(prompts)
        # the sampling seed the synchronous trainer uses for the update this mini-batch goes to
        gen_batch.meta_info["global_steps"] = index // self.require_batches + 1
        # several mini-batches in flight draw from the rollout's RNG stream (no per-call seed, see generate_sequences)
        gen_batch.meta_info["concurrent_generation"] = self.max_in_flight > 1
        timing: dict = {}
        output = pop_worker_timing(self.rollout_wg.generate_sequences(gen_batch), timing)
        return self._merge_generation(prompts, gen_batch, output)

    def _collect_update(self) -> tuple[int, DataProto] | None:
        """``require_batches`` mini-batches within the staleness bound for the next update (None: data ended)."""
        self._data_version = self.global_steps - 1
        self._taken = 0
        items: list[RolloutItem] = []
        self._step_drops = 0
        waited = time.perf_counter()
        while len(items) < self.require_batches:
            item = self.rollouter.get(self.wait_timeout_s)
            if item is END:
                return None
            staleness = self._data_version - item.version
            if staleness > self.staleness_threshold:  # never trained: counted and dropped
                self._step_drops += len(item.batch)
                self.dropped_samples += len(item.batch)
                continue
            items.append(item)
            self._taken = len(items)
        self._collected = items
        # before fit's step timer starts: a step's wall time is timing_s/step + timing_s/wait_rollout
        self._wait_rollout_s = time.perf_counter() - waited
        return items[0].epoch, DataProto.concat([item.batch for item in items])

    def train_step(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto | None, dict]:
        """Train on the collected mini-batches, then push the weights if this update triggers a sync."""
        if self._validation is not None and not self._validation["thread"].is_alive():
            self._finish_validation()  # logged as soon as the trainer sees it done
        metrics = self._queue_metrics()
        with marked_timer("train", timing_raw):
            batch = self._train_on_generated(batch, metrics, timing_raw)
        if self.global_steps % self.trigger_parameter_sync_step == 0:
            self._push_weights(self.global_steps, timing_raw, metrics)
        return batch, metrics

    def _queue_metrics(self) -> dict:
        versions = np.array([item.version for item in self._collected])
        return {
            "fully_async/dropped_samples": float(self._step_drops),
            "fully_async/dropped_samples_total": float(self.dropped_samples),
            "fully_async/queue_size": float(self.rollouter.queue.qsize()),
            "fully_async/sample_version_min": float(versions.min()),
            # partial rollout: mini-batches a weight sync interrupted (their responses span two or more versions)
            "fully_async/partial_mini_batches": float(sum(_spans_versions(item.batch) for item in self._collected)),
            "fully_async/staleness_max": float(self._data_version - versions.min()),
            "timing_s/gen": float(sum(item.finished - item.started for item in self._collected)),
            "timing_s/wait_rollout": self._wait_rollout_s,
        }

    def _push_weights(self, version: int, timing_raw: dict, metrics: dict) -> None:
        """Send the actor's weights as ``version``: once no mini-batch is generating, or (partial
        rollout) at once, the generation in flight pausing for the load and finishing under the new weights. A
        validation in flight finishes first: it scores the weights it started with."""
        with marked_timer("wait_validation", timing_raw):
            self._finish_validation()
        with marked_timer("sync_rollout_weights", timing_raw):
            if self.partial_rollout:
                stats = self.weight_sync.send(version)
            else:
                self.rollouter.acquire_for_sync(self.wait_timeout_s)
                try:
                    stats = self.weight_sync.send(version)
                finally:
                    self.rollouter.release()
        metrics.update({f"checkpoint_engine/{k}": v for k, v in stats.items()})

    # ------------------------------------------------------------------------------------------ collaborators
    def _maybe_validate(self, is_last_step: bool, timing_raw: dict) -> dict | None:
        """While the Rollouter runs, a validation goes on a thread of its own and the trainer goes on with the next
        update (verl validates in the rollouter); its metrics are logged under its own step once it is done, at the
        latest before the next weight sync. The last step's validation is waited for, as in ``RayPPOTrainer``."""
        if is_last_step or self.rollouter is None or not self.rollouter.is_alive():
            self._finish_validation()
            return super()._maybe_validate(is_last_step, timing_raw)
        test_freq = self.ppo_config.trainer.test_freq
        if self.val_reward_fn is None or test_freq <= 0 or self.global_steps % test_freq:
            return None
        self._finish_validation()
        run = {"step": self.global_steps}

        def validate() -> None:
            try:
                run["metrics"] = self.validator.validate(_AlongsideRollouts(self.rollout_wg), run["step"])
            except BaseException as exc:  # noqa: BLE001 - raised in the trainer's thread
                run["error"] = exc

        run["thread"] = threading.Thread(target=validate, name="fully-async-validation", daemon=True)
        self._validation = run
        run["thread"].start()
        return None

    def _finish_validation(self) -> None:
        """Wait for the validation in flight, if any, and log its metrics under its step."""
        run, self._validation = self._validation, None
        if run is None:
            return
        run["thread"].join()
        if "error" in run:
            raise run["error"]
        self.tracker.log(data=run["metrics"], step=run["step"])
        self._reporter.on_validation(run["step"], run["metrics"])  # metrics.jsonl: the time it was logged

    def _make_reporter(self):
        self._reporter = super()._make_reporter()
        return self._reporter

    def _validate(self) -> dict:
        """Validation on the rollout beside the Rollouter's generations (they keep going; an agent-loop rollout
        serves both together), with the weights the rollout has: those of the last sync, or the initial ones."""
        if self.rollouter is None or not self.rollouter.is_alive():
            return super()._validate()
        return self.validator.validate(_AlongsideRollouts(self.rollout_wg), self.global_steps)

    def _save_checkpoint(self) -> None:
        """The checkpoint of ``global_steps`` with the Rollouter paused, so the dataloader position it saves is
        consistent: the Rollouter's, ahead of the trainer by the mini-batches queued or in flight, which a resumed
        run does not generate again (docs/fully_async.md)."""
        if self.rollouter is None or not self.rollouter.is_alive():
            return super()._save_checkpoint()
        self.rollouter.acquire_for_sync(self.wait_timeout_s)
        try:
            return super()._save_checkpoint()
        finally:
            self.rollouter.release()

    def _greedy_baseline(self, batch, gen_batch):
        raise NotImplementedError(
            "algorithm.adv_estimator=remax is not supported by the fully async trainer; use grpo, rloo, "
            "reinforce_plus_plus, opo or gae"
        )


class _AlongsideRollouts:
    """The rollout worker group for a validation that runs while the Rollouter generates: its calls are marked
    ``concurrent_generation`` (no per-call seed reset under the other generations; validation is greedy)."""

    def __init__(self, rollout_wg):
        self._wg = rollout_wg
        self.world_size = rollout_wg.world_size

    def generate_sequences(self, batch: DataProto) -> DataProto:
        batch.meta_info["concurrent_generation"] = True
        return self._wg.generate_sequences(batch)


def _spans_versions(batch: DataProto) -> bool:
    """Whether a generated mini-batch's sampled tokens come from more than one weight version."""
    versions = batch.batch.get("weight_versions") if batch.batch is not None else None
    if versions is None:
        return False
    sampled = versions[versions >= 0]
    return bool(sampled.numel()) and int(sampled.max()) > int(sampled.min())
