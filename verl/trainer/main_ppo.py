"""Entry point: ``python -m verl.trainer.main_ppo key=value ...`` (Hydra, config ``ppo_trainer``).

The config is validated in this process before Ray starts, so a wrong key, a missing file or an impossible batch
size fails in seconds with a message naming it. Training then runs in this process on a Ray cluster it starts, or in
a Ray actor (``TaskRunner``) on a cluster that was already running (see ``train_in_ray``).
Ray is imported only by ``run_ppo`` and ``TaskRunner``: ``prepare_config`` and ``build_trainer`` also serve the
in-process worker group on a machine without Ray.
"""

from __future__ import annotations

import logging
import os

import hydra
from omegaconf import OmegaConf, open_dict

from verl.demo.assets import resolve_builtin_paths
from verl.demo.default_run import apply_builtin_demo, command_line_keys, describe_choices
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks.ppo import check_ppo_config, resolve_device_name
from verl.trainer.config.migration import changed_defaults_line
from verl.trainer.config.trainer import ray_init_options
from verl.trainer.ppo.reward import get_served_reward_model, load_reward_manager
from verl.utils.dataset.rl_dataset import create_rl_dataset, create_rl_sampler
from verl.utils.logging_utils import set_basic_config

logger = logging.getLogger(__name__)

# TaskRunner (a Ray actor class built on first access, see __getattr__) is left out so `import *` needs no Ray
__all__ = ["create_rl_dataset", "create_rl_sampler", "main", "run_ppo", "train_in_ray"]

ROLLOUT_POOL = "rollout_pool"  # a standalone rollout's resource pool (actor_rollout_ref.hybrid_engine=False)

_RAY_ENV = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
}


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config)
    run_ppo(config)


def apply_demo_for_command_line(config, values: dict | None = None) -> None:
    """verl's defaults, unless this Hydra run names no data and no model: then the built-in demo's values
    (``verl/demo/default_run.py``; a recipe may pass its own ``values``), each where the command line leaves the key
    alone, printed. Otherwise the defaults that moved since verl v0.4.1 and change this run are printed. For entry
    points."""
    from hydra.core.hydra_config import HydraConfig

    set_keys = command_line_keys(HydraConfig.get().overrides.task)
    chosen = apply_builtin_demo(config, set_keys, values=values)
    if chosen:
        print(describe_choices(chosen), flush=True)
        return
    moved = changed_defaults_line(config, set_keys)
    if moved:
        print(moved, flush=True)


def prepare_config(config) -> None:
    """Validate ``config`` and resolve ``trainer.device``; raises ConfigError before anything expensive starts."""
    resolve_builtin_paths(config)  # builtin://... (the default data and model) -> files shipped in verl/assets
    check_ppo_config(config)
    with open_dict(config):
        config.trainer.device = resolve_device_name(config.trainer.device)


def ray_init_kwargs(config) -> dict:
    """Arguments for ``ray.init``: enough logical CPUs on a CPU box for the task runner plus one per worker, and no
    dashboard there unless asked for (memory is what a CPU box runs out of)."""
    typed = PPOConfig.from_config(config)
    options = ray_init_options(typed)  # ray_init and verl 0.9's ray_kwargs
    runtime_env = {"env_vars": dict(_RAY_ENV)}
    py_executable = typed.ray_kwargs.ray_init.runtime_env.py_executable
    if py_executable is not None:
        runtime_env["py_executable"] = py_executable
    if os.environ.get("RAY_ADDRESS", "local") != "local":
        # joining a running cluster (`ray start` on each node, RAY_ADDRESS=head:port, or `ray job submit`): its nodes
        # already declared their resources and dashboard, and ray.init refuses num_cpus / include_dashboard there
        return {"runtime_env": runtime_env}
    on_cpu = typed.trainer.device == "cpu"
    num_cpus = options.num_cpus
    if num_cpus is None and on_cpu:
        workers = typed.trainer.world_size + (0 if typed.actor_rollout_ref.hybrid_engine else typed.rollout.world_size)
        num_cpus = max(os.cpu_count() or 1, workers + 1)
    # a cluster of our own: without address="local", ray.init joins whatever cluster the machine's last `ray start`
    # recorded in /tmp/ray/ray_current_cluster (another user's, or a stopped one), and fails on num_cpus there
    kwargs = {"address": "local", "runtime_env": runtime_env, "num_cpus": num_cpus}
    include_dashboard = options.include_dashboard
    if include_dashboard is not None or on_cpu:
        kwargs["include_dashboard"] = bool(include_dashboard)
    return kwargs


def run_ppo(config, trainer_cls=None) -> None:
    """Validate, start Ray (unless already running), and train (see :func:`train_in_ray`); ``trainer_cls`` is a
    recipe's RayPPOTrainer subclass (default RayPPOTrainer)."""
    if trainer_cls is None and PPOConfig.from_config(config).algorithm.filter_groups.enable:
        raise ConfigError(
            "algorithm.filter_groups.enable=True: dynamic sampling is the DAPO trainer's (RayPPOTrainer does not "
            "sample dynamically); run python -m recipe.dapo.main_dapo, or set it False"
        )
    prepare_config(config)
    train_in_ray(config, trainer_cls=trainer_cls)


def train_in_ray(config, **recipe_classes) -> None:
    """Start Ray (unless already running) and train; ``config`` is already validated.

    On a cluster this process starts (the default: ``ray.init(address="local")``) the controller runs here; when Ray
    is already initialised or ``RAY_ADDRESS`` names a cluster, it runs in a ``TaskRunner`` actor there, as in verl.

    A recipe's entry point runs its own checks, then calls this with its classes (``trainer_cls``,
    ``actor_rollout_cls``, ``reward_model_cls``: see build_trainer)."""
    import ray

    own_cluster = not ray.is_initialized() and os.environ.get("RAY_ADDRESS", "local") == "local"
    if own_cluster:
        _run_controller_here(config, recipe_classes)  # builds the datasets, then starts Ray
    else:
        if not ray.is_initialized():
            ray.init(**ray_init_kwargs(config))
        runner = _task_runner_class().remote()
        ray.get(runner.run.remote(config, **recipe_classes))
    timeline = ray_init_options(PPOConfig.from_config(config)).timeline_json_file
    if timeline:
        ray.timeline(filename=timeline)


def worker_classes(config):
    """(actor-rollout class, critic class, worker-group class) for ``actor_rollout_ref.actor.strategy``."""
    strategy = config.actor_rollout_ref.actor.strategy
    # the role workers are backend-free: the engine their strategy names does the rest (a Megatron model-parallel
    # group gathers its ranks' DP_COMPUTE_PROTO chunks itself, so the plain worker group dispatches for both)
    if strategy in ("fsdp", "fsdp2", "megatron"):
        from verl.single_controller.ray import RayWorkerGroup
        from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker, AsyncActorRolloutRefWorker
        from verl.workers.roles.critic import CriticWorker

        async_mode = config.actor_rollout_ref.rollout.mode == "async"
        actor_cls = AsyncActorRolloutRefWorker if async_mode else ActorRolloutRefWorker
        return actor_cls, CriticWorker, RayWorkerGroup
    raise NotImplementedError(f"actor_rollout_ref.actor.strategy={strategy!r}; expected fsdp, fsdp2 or megatron")


def build_trainer(config, ray_worker_group_cls=None, trainer_cls=None, actor_rollout_cls=None, reward_model_cls=None):
    """Everything ``TaskRunner.run`` builds before ``init_workers``: tokenizer, roles, pools, rewards, data.

    A recipe passes its own ``trainer_cls`` (a RayPPOTrainer subclass; default RayPPOTrainer), ``actor_rollout_cls``
    (the policy worker class, also used for a separate reference) and ``reward_model_cls`` (the worker of
    ``Role.RewardModel`` when ``reward_model.enable``; default RewardModelWorker) instead of copying this.
    """
    from verl.single_controller.ray.base import ray_actor_class
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, ResourcePoolManager, Role
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.utils.fs import copy_to_local
    from verl.utils.tokenizer import hf_processor, hf_tokenizer

    typed = PPOConfig.from_config(config)
    model_cfg = typed.actor_rollout_ref.model
    # the data's tokenizer is the policy's (model.tokenizer_path, else the model's own folder)
    local_path = copy_to_local(model_cfg.tokenizer_path or model_cfg.path, use_shm=model_cfg.use_shm)
    trust = typed.data.trust_remote_code
    tokenizer = hf_tokenizer(local_path, trust_remote_code=trust)
    processor = hf_processor(local_path, trust_remote_code=trust, use_fast=True)

    actor_cls, critic_cls, default_wg_cls = worker_classes(typed)
    actor_cls = actor_rollout_cls or actor_cls
    pool = "global_pool"
    pool_spec = {pool: [typed.trainer.n_gpus_per_node] * typed.trainer.nnodes}
    role_worker_mapping = {Role.Critic: ray_actor_class(critic_cls)}
    mapping = {Role.Critic: pool}
    if typed.actor_rollout_ref.hybrid_engine:
        role_worker_mapping[Role.ActorRollout] = ray_actor_class(actor_cls)
        mapping[Role.ActorRollout] = pool
    else:  # the rollout on a pool of its own (top-level rollout.nnodes x rollout.n_gpus_per_node, verl's keys)
        role_worker_mapping[Role.Actor] = role_worker_mapping[Role.Rollout] = ray_actor_class(actor_cls)
        mapping[Role.Actor], mapping[Role.Rollout] = pool, ROLLOUT_POOL
        pool_spec[ROLLOUT_POOL] = [typed.rollout.n_gpus_per_node] * typed.rollout.nnodes
    if typed.reward_model.enable and not typed.reward_model.use_reward_loop:  # the reward loop serves the model
        from verl.workers.roles.reward_model import RewardModelWorker

        role_worker_mapping[Role.RewardModel] = ray_actor_class(reward_model_cls or RewardModelWorker)
        mapping[Role.RewardModel] = pool
    if typed.algorithm.use_kl_in_reward or typed.actor_rollout_ref.actor.use_kl_loss:
        role_worker_mapping[Role.RefPolicy] = ray_actor_class(actor_cls)
        mapping[Role.RefPolicy] = pool
    resource_pool_manager = ResourcePoolManager(
        resource_pool_spec=pool_spec,
        mapping=mapping,
        use_gpu=typed.trainer.device != "cpu",
    )
    reward_kwargs = typed.reward_model.reward_kwargs
    reward_fn = load_reward_manager(typed, tokenizer, num_examine=0, **reward_kwargs)
    val_reward_fn = load_reward_manager(typed, tokenizer, num_examine=1, **reward_kwargs)
    data = typed.data
    train_dataset = create_rl_dataset(data.train_files, data, tokenizer, processor, data.train_max_samples)
    val_dataset = create_rl_dataset(data.val_files, data, tokenizer, processor, data.val_max_samples)
    return (trainer_cls or RayPPOTrainer)(
        config=config,
        tokenizer=tokenizer,
        processor=processor,
        role_worker_mapping=role_worker_mapping,
        resource_pool_manager=resource_pool_manager,
        ray_worker_group_cls=ray_worker_group_cls or default_wg_cls,
        reward_fn=reward_fn,
        val_reward_fn=val_reward_fn,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        collate_fn=collate_fn,
        train_sampler=create_rl_sampler(typed.data, train_dataset),
        device_name=typed.trainer.device,
    )


class _TaskRunner:
    """Runs the single controller: in a Ray actor on a cluster that outlives the driver, or in the driver itself."""

    def run(self, config, trainer_cls=None, actor_rollout_cls=None, reward_model_cls=None, start_ray=None) -> None:
        """Build the trainer (a recipe's classes, see build_trainer), its workers, and train. ``start_ray``: called
        after the trainer (tokenizer, reward functions, datasets) is built, before its workers are."""
        set_basic_config()  # a TaskRunner actor is a fresh process: same root level as the driver
        print(OmegaConf.to_yaml(config, resolve=True))
        OmegaConf.resolve(config)
        trainer = build_trainer(
            config, trainer_cls=trainer_cls, actor_rollout_cls=actor_rollout_cls, reward_model_cls=reward_model_cls
        )
        if start_ray is not None:
            start_ray()
        served = get_served_reward_model(config)
        if served is not None:  # a served judge's replicas load now, not inside the first step's reward phase
            served.start()
        trainer.init_workers()
        trainer.fit()


def _run_controller_here(config, recipe_classes: dict) -> None:
    """The single controller in this process, for a Ray cluster this process started (it ends with it anyway).

    A ``TaskRunner`` actor would be a second Python process holding torch, transformers and the datasets while it
    waits on the workers: about 0.4 GB of private memory on a CPU box (0.41 GB PSS for this process and 0.44 GB for
    the actor, measured on the 135M GRPO run), for nothing a local cluster needs. The controller gets what the actor
    would have: Ray's environment for its processes and, unless ``OMP_NUM_THREADS`` says otherwise, one torch thread
    (Ray's setting for a ``num_cpus=1`` actor), so it does not compete with the workers for cores.
    """
    import torch

    for key, value in _RAY_ENV.items():
        os.environ.setdefault(key, value)
    threads = torch.get_num_threads()
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    import ray

    def start_ray() -> None:
        # after the datasets are built: data that the filter empties (or cannot tokenize) stops the run before Ray
        ray.init(**ray_init_kwargs(config))

    try:
        _TaskRunner().run(config, **recipe_classes, start_ray=start_ray)
    finally:  # a caller's own script (run_ppo from Python) keeps its thread count
        torch.set_num_threads(threads)


_task_runner_actor_class = None


def _task_runner_class():
    """verl's ``@ray.remote(num_cpus=1) class TaskRunner``, made on first use so importing this module needs no Ray."""
    global _task_runner_actor_class
    if _task_runner_actor_class is None:
        import ray

        _task_runner_actor_class = ray.remote(num_cpus=1)(_TaskRunner)
    return _task_runner_actor_class


def __getattr__(name: str):
    # ``main_ppo.TaskRunner`` (verl's public name) is the Ray actor class, built when first asked for
    if name == "TaskRunner":
        return _task_runner_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
