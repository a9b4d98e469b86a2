"""Reward manager that scores the whole batch in one call (for vectorised or remote scorers)."""

from __future__ import annotations

import logging

import torch

from verl.protocol import DataProto
from verl.utils.reward_score.guarded_call import DEFAULT_TIMEOUT_S, GuardedCall
from verl.workers.reward_manager.naive import (
    decode_sample,
    examined_counts,
    merge_extra_info,
    sample_extra_infos,
    split_score,
)
from verl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)

__all__ = ["BatchRewardManager"]


class BatchRewardManager:
    """One call ``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)``.

    The scorer returns one float or dict per sample. Also stores the rewards as ``data.batch["acc"]`` ``(bs,)``.
    If the call raises, runs past ``timeout_s`` or returns the wrong number of scores, every sample scores 0.0
    with a logged warning.
    """

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        compute_score,
        reward_fn_key: str = "data_source",
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        timeout_mode: str = "auto",
        **reward_kwargs,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key
        self.reward_kwargs = reward_kwargs
        self._guarded = GuardedCall(compute_score, timeout_s=timeout_s, mode=timeout_mode)

    def verify(self, data: DataProto) -> list:
        """Decode every response and score the batch; a list of per-sample results (floats or dicts)."""
        prompt_length = data.batch["prompts"].shape[-1]
        responses = [decode_sample(self.tokenizer, data[i], prompt_length)[1] for i in range(len(data))]
        ground_truths = [item["ground_truth"] for item in data.non_tensor_batch["reward_model"]]
        data_sources = data.non_tensor_batch[self.reward_fn_key]
        extra_infos = sample_extra_infos(data)
        ok, scores, error = self._guarded(
            data_sources=data_sources,
            solution_strs=responses,
            ground_truths=ground_truths,
            extra_infos=extra_infos,
            **self.reward_kwargs,
        )
        if ok and (scores is None or len(scores) != len(data)):
            ok, error = False, f"expected {len(data)} scores, got {None if scores is None else len(scores)}"
        if not ok:
            logger.warning("batch reward function failed, scoring all %d samples 0.0: %s", len(data), error)
            scores = [0.0] * len(data)
        return list(scores)

    def __call__(self, data: DataProto, return_dict: bool = False):
        """``reward_tensor`` ``(bs, response_length)`` or ``{"reward_tensor", "reward_extra_info"}``."""
        if "rm_scores" in data.batch.keys():
            return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]

        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        prompt_length = data.batch["prompts"].shape[-1]
        valid_response_lengths = data.batch["attention_mask"][:, prompt_length:].sum(dim=-1)
        results = self.verify(data)
        rewards, infos = [], []
        already_printed = examined_counts(self)
        for i, result in enumerate(results):
            try:
                reward, info = split_score(result)
            except (KeyError, TypeError, ValueError) as e:
                logger.warning("batch reward function gave sample %d an invalid score, using 0.0: %s", i, e)
                reward, info = 0.0, {}
            rewards.append(reward)
            infos.append(info)
            reward_tensor[i, max(int(valid_response_lengths[i]) - 1, 0)] = reward

            data_source = data.non_tensor_batch[self.reward_fn_key][i]
            if already_printed.get(data_source, 0) < self.num_examine:
                already_printed[data_source] = already_printed.get(data_source, 0) + 1
                prompt_str, response_str, _ = decode_sample(self.tokenizer, data[i], prompt_length)
                print("[prompt]", prompt_str)
                print("[response]", response_str)
                print("[ground_truth]", data.non_tensor_batch["reward_model"][i]["ground_truth"])
                print("[score]", reward)

        data.batch["acc"] = torch.tensor(rewards, dtype=torch.float32, device=reward_tensor.device)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": merge_extra_info(infos)}
        return reward_tensor


register("batch")(BatchRewardManager)
