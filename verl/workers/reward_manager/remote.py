"""``reward_model.reward_manager=remote``: the naive manager's scoring in a pool of Ray CPU workers.

The batch is cut into one chunk per worker; each worker (a Ray actor holding one CPU) scores its chunk with a
:class:`NaiveRewardManager` (sync or ``async`` function alike), so a slow rule runs in parallel off the driver
instead of sample after sample in it. ``num_workers`` (verl's ``reward_model.num_workers``) caps the pool, which
also never holds more CPUs than the cluster has free. Ray must be running: with the in-process worker group (no
Ray) the manager refuses to score, naming the key.
"""

from __future__ import annotations

import logging
import os
import site
import sys
import sysconfig

import torch

from verl.protocol import DataProto
from verl.utils.reward_score.guarded_call import DEFAULT_TIMEOUT_S
from verl.workers.reward_manager.naive import NaiveRewardManager, merge_extra_info
from verl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)

__all__ = ["RemoteRewardManager"]


class _ChunkScorer:
    """The body of one Ray worker: a naive manager that scores the chunks it is sent."""

    def __init__(self, tokenizer, compute_score, reward_fn_key: str, timeout_s):
        self.manager = NaiveRewardManager(tokenizer, 0, compute_score, reward_fn_key, timeout_s=timeout_s)

    def score(self, data: DataProto) -> tuple[torch.Tensor, list[dict]]:
        result = self.manager(data, return_dict=True)
        extra = result.get("reward_extra_info", {})
        return result["reward_tensor"], [{k: v[i] for k, v in extra.items()} for i in range(len(data))]


def _pickle_custom_modules_by_value(fn) -> None:
    """A reward function from the user's own file (``custom_reward_function.path``, a script, a test) lives in a
    module a Ray worker may not import: its code travels instead. Modules of verl and of installed packages are
    imported by name there as usual."""
    import ray.cloudpickle

    import verl

    shared = (os.path.dirname(os.path.abspath(verl.__file__)), *site.getsitepackages(), sysconfig.get_paths()["stdlib"])
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        name = getattr(fn, "__module__", None)
        module = sys.modules.get(name) if name else None
        path = getattr(module, "__file__", None)
        if module is not None and name != "__main__" and path:
            if not os.path.abspath(path).startswith(tuple(shared)):
                ray.cloudpickle.register_pickle_by_value(module)
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)


class RemoteRewardManager:
    """Score the samples of a batch with ``compute_score`` in up to ``num_workers`` Ray CPU workers.

    Returns a float32 ``(bs, response_length)`` tensor (each row's score at its last valid token) and the naive
    manager's extra info (``reward_call_failed`` included), in the batch's order."""

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        compute_score=None,
        reward_fn_key: str = "data_source",
        num_workers: int = 8,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"reward_model.num_workers={num_workers} must be >= 1 for reward_manager=remote")
        self.tokenizer, self.num_examine = tokenizer, num_examine
        self.compute_score, self.reward_fn_key = compute_score, reward_fn_key
        self.num_workers, self.timeout_s = num_workers, timeout_s
        self._workers: list = []

    def _pool(self) -> list:
        try:
            import ray
        except ImportError as e:
            raise RuntimeError("reward_model.reward_manager=remote needs Ray; use naive or limited") from e
        if not ray.is_initialized():
            raise RuntimeError(
                "reward_model.reward_manager=remote scores in Ray CPU workers, but Ray is not running here (the "
                "in-process worker group?); use reward_manager=naive or limited, or run under Ray"
            )
        if not self._workers:
            free = int(ray.available_resources().get("CPU", 0))
            count = max(1, min(self.num_workers, free))
            num_cpus = 1 if free >= 1 else 0
            if count < self.num_workers or num_cpus == 0:
                logger.warning(
                    "reward_model.num_workers=%d: the cluster has %d free CPU(s); starting %d reward worker(s)%s",
                    self.num_workers,
                    free,
                    count,
                    "" if num_cpus else " that share CPUs with the trainer",
                )
            _pickle_custom_modules_by_value(self.compute_score)
            actor_cls = ray.remote(_ChunkScorer).options(num_cpus=num_cpus)
            self._workers = [
                actor_cls.remote(self.tokenizer, self.compute_score, self.reward_fn_key, self.timeout_s)
                for _ in range(count)
            ]
        return self._workers

    def __call__(self, data: DataProto, return_dict: bool = False):
        """``reward_tensor`` ``(bs, response_length)`` or ``{"reward_tensor", "reward_extra_info"}``."""
        if "rm_scores" in data.batch.keys():
            return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]
        import ray

        workers = self._pool()
        size = len(data)
        bounds = [round(k * size / len(workers)) for k in range(len(workers) + 1)]
        pieces = [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        refs = [workers[k].score.remote(data[a:b]) for k, (a, b) in enumerate(pieces)]
        results = ray.get(refs)
        reward_tensor = torch.cat([tensor for tensor, _ in results], dim=0)
        if not return_dict:
            return reward_tensor
        infos = [info for _, sample_infos in results for info in sample_infos]
        return {"reward_tensor": reward_tensor, "reward_extra_info": merge_extra_info(infos)}

    def shutdown(self) -> None:
        """End the worker actors."""
        if self._workers:
            import ray

            for worker in self._workers:
                ray.kill(worker)
            self._workers = []


register("remote")(RemoteRewardManager)
