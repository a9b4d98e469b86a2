"""Hybrid rewards: several named sources scored on the same responses, combined into one reward per response.

A source is a reward manager (a rule, a custom function, an LLM judge called through ``reward_router_address``)
or the reward-model worker's score (``rm_scores``). Each source's per-sample score is kept in the extra info as
``reward_source/<name>`` (the trainer logs it as ``reward/<name>/mean``); the reward is their weighted sum, or what a
user's ``combine(scores, data_source=, ground_truth=, extra_info=)`` makes of them.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from verl.protocol import DataProto
from verl.workers.reward_manager.naive import merge_extra_info, sample_extra_infos

logger = logging.getLogger(__name__)

__all__ = ["SOURCE_PREFIX", "HybridRewardManager", "RewardSource"]

SOURCE_PREFIX = "reward_source/"


@dataclass
class RewardSource:
    """A named source: ``manager`` (any reward manager) or, with ``manager=None``, the reward model's ``rm_scores``."""

    name: str
    weight: float = 1.0
    manager: Callable | None = None


def _reward_and_info(manager, data: DataProto) -> tuple[torch.Tensor, dict]:
    try:
        result = manager(data, return_dict=True)
        return result["reward_tensor"], result.get("reward_extra_info", {}) or {}
    except TypeError:  # a manager of the older contract takes only the data
        return manager(data), {}


class HybridRewardManager:
    """Score ``data`` with every source (the managers at once, on threads), then combine per sample.

    Returns the ``(bs, response_length)`` reward at each row's last valid token, like the other managers."""

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        sources: list[RewardSource],
        combine: Callable | None = None,
        reward_fn_key: str = "data_source",
    ) -> None:
        if not sources:
            raise ValueError("a hybrid reward needs at least one source")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"reward source names must be unique, got {names}")
        self.tokenizer, self.num_examine = tokenizer, num_examine
        self.sources, self.combine, self.reward_fn_key = sources, combine, reward_fn_key

    def _source_scores(self, data: DataProto) -> tuple[dict[str, torch.Tensor], list[bool]]:
        """``name -> (bs,)`` scores and, per sample, whether any source's call failed."""
        scores: dict[str, torch.Tensor] = {}
        failed = [False] * len(data)
        managed = [s for s in self.sources if s.manager is not None]
        for source in self.sources:
            if source.manager is None:
                if "rm_scores" not in data.batch.keys():
                    raise KeyError(f"reward source {source.name!r} reads the reward model's rm_scores; none on batch")
                scores[source.name] = data.batch["rm_scores"].sum(dim=-1).float()
        # the managers see the batch without rm_scores, which would otherwise replace their own scoring
        keys = [k for k in data.batch.keys() if k != "rm_scores"]
        plain = data.select(batch_keys=keys)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(managed))) as pool:
            futures = {s.name: pool.submit(_reward_and_info, s.manager, plain) for s in managed}
            for name, future in futures.items():
                reward_tensor, info = future.result()
                scores[name] = reward_tensor.sum(dim=-1).float()
                for i, bad in enumerate(info.get("reward_call_failed", [])):
                    failed[i] = failed[i] or bool(bad)
        return scores, failed

    def __call__(self, data: DataProto, return_dict: bool = False):
        """``reward_tensor`` ``(bs, response_length)`` or ``{"reward_tensor", "reward_extra_info"}``; the extra info
        holds each source's score as ``reward_source/<name>``."""
        scores, failed = self._source_scores(data)
        size = len(data)
        if self.combine is None:
            combined = sum(s.weight * scores[s.name] for s in self.sources)
        else:
            extra_infos = sample_extra_infos(data)
            combined = torch.zeros(size, dtype=torch.float32)
            for i in range(size):
                per_sample = {name: float(value[i]) for name, value in scores.items()}
                try:
                    combined[i] = float(
                        self.combine(
                            per_sample,
                            data_source=data.non_tensor_batch[self.reward_fn_key][i],
                            ground_truth=data.non_tensor_batch["reward_model"][i]["ground_truth"],
                            extra_info=extra_infos[i],
                        )
                    )
                except Exception as e:  # noqa: BLE001 - one sample's failure costs that sample, never the batch
                    logger.warning("reward combine failed on sample %d, scoring it 0: %s: %s", i, type(e).__name__, e)
                    combined[i], failed[i] = 0.0, True
        prompt_length = data.batch["prompts"].shape[-1]
        valid_lengths = data.batch["attention_mask"][:, prompt_length:].sum(dim=-1)
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        rows = torch.arange(size)
        reward_tensor[rows, (valid_lengths - 1).clamp(min=0)] = combined.to(torch.float32)
        if not return_dict:
            return reward_tensor
        infos = [{f"{SOURCE_PREFIX}{name}": float(value[i]) for name, value in scores.items()} for i in range(size)]
        extra = merge_extra_info(infos)
        if any(failed):
            extra["reward_call_failed"] = failed
        return {"reward_tensor": reward_tensor, "reward_extra_info": extra}
