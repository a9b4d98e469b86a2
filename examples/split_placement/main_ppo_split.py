"""PPO with the actor (rollout, reference) and the critic on separate resource pools, updated at the same time.

    python examples/split_placement/main_ppo_split.py algorithm.adv_estimator=gae critic.model.path=... [overrides]

The hybrid engine colocates every role on every device; here each node's ``trainer.n_gpus_per_node`` devices are
split in half: the first half hosts the actor, its rollout and the reference (``actor_rollout_ref_pool``), the
second half the critic (``critic_pool``). Generation, log-probs and values run as usual; the critic and actor
updates run concurrently, each on its own devices, so a step costs max(update_actor, update_critic) there instead of
the sum. It pays off when the critic is as large as the actor; on a small box it halves each role's devices.

Actor and rollout still share their devices (``hybrid_engine=True``): a rollout on devices of its own would need
the actor's weights sent across processes every step, which this library does not do (docs/recipes.md).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import hydra

import verl.trainer
from verl.trainer.config import ConfigError
from verl.trainer.main_ppo import run_ppo
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, ResourcePoolManager, Role

ACTOR_POOL, CRITIC_POOL = "actor_rollout_ref_pool", "critic_pool"
CONFIG_DIR = os.path.join(os.path.dirname(verl.trainer.__file__), "config")


def split_resource_pools(config, roles) -> ResourcePoolManager:
    """Half of each node's devices for the actor, rollout and reference, half for the critic."""
    half = config.trainer.n_gpus_per_node // 2
    mapping = {role: ACTOR_POOL for role in roles}
    mapping[Role.Critic] = CRITIC_POOL
    return ResourcePoolManager(
        resource_pool_spec={ACTOR_POOL: [half] * config.trainer.nnodes, CRITIC_POOL: [half] * config.trainer.nnodes},
        mapping=mapping,
        use_gpu=config.trainer.device != "cpu",
    )


def check_split_config(config) -> None:
    """Refuse, before Ray starts, what split placement cannot run."""
    if config.algorithm.adv_estimator != "gae":
        raise ConfigError(
            f"algorithm.adv_estimator={config.algorithm.adv_estimator!r}: split placement puts the critic on its own "
            "devices, so it needs a critic; expected 'gae' (use verl.trainer.main_ppo for critic-free estimators)"
        )
    n = config.trainer.n_gpus_per_node
    if n < 2 or n % 2:
        raise ConfigError(
            f"trainer.n_gpus_per_node={n}: split placement halves each node's devices; expected an even n"
        )


class SplitPlacementTrainer(RayPPOTrainer):
    """RayPPOTrainer whose critic lives on its own pool and updates while the actor does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.resource_pool_manager = split_resource_pools(self.config, self.role_worker_mapping)
        self._critic_update = None
        self._updates = ThreadPoolExecutor(max_workers=1, thread_name_prefix="critic-update")

    def _update_critic(self, batch, metrics, timing_raw) -> None:
        if self.ppo_config.trainer.critic_warmup > self.global_steps:  # no actor update to overlap with this step
            super()._update_critic(batch, metrics, timing_raw)
            return
        # runs on the critic's own workers while _update_actor (next in the step) runs the actor's
        self._critic_update = self._updates.submit(super()._update_critic, batch, metrics, timing_raw)

    def _update_actor(self, batch, metrics, timing_raw) -> None:
        super()._update_actor(batch, metrics, timing_raw)
        if self._critic_update is not None:
            self._critic_update.result()
            self._critic_update = None


@hydra.main(config_path=CONFIG_DIR, config_name="ppo_trainer", version_base=None)
def main(config) -> None:
    check_split_config(config)
    run_ppo(config, trainer_cls=SplitPlacementTrainer)


if __name__ == "__main__":
    sys.exit(main())
