"""DAPO reward manager: rule score plus a linear penalty for responses that run into the overlong buffer."""

from __future__ import annotations

import logging

import torch

from verl.protocol import DataProto
from verl.utils.reward_score.guarded_call import DEFAULT_TIMEOUT_S
from verl.workers.config import OverlongBufferConfig
from verl.workers.reward_manager.naive import (
    NaiveRewardManager,
    decode_sample,
    examined_counts,
    merge_extra_info,
    print_examined,
    sample_extra_infos,
)
from verl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)

__all__ = ["DAPORewardManager"]


class DAPORewardManager(NaiveRewardManager):
    """Naive scoring on the response with a trailing eos string removed, plus DAPO's overlong shaping.

    With ``overlong_buffer_cfg.enable``: ``expected = max_resp_len - len``, ``exceed = valid_len - expected``,
    reward += ``min(-exceed / len * penalty_factor, 0)``; ``log`` adds ``overlong_reward`` and ``overlong``.
    """

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        compute_score=None,
        reward_fn_key: str = "data_source",
        max_resp_len: int | None = None,
        overlong_buffer_cfg=None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        timeout_mode: str = "auto",
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s, timeout_mode)
        self.overlong_buffer_cfg = None
        if overlong_buffer_cfg is not None:
            self.overlong_buffer_cfg = OverlongBufferConfig.from_config(overlong_buffer_cfg)
        self.max_resp_len = max_resp_len
        if overlong_buffer_cfg is not None:
            assert max_resp_len is not None, (
                f"max_resp_len must be given with overlong_buffer_cfg={overlong_buffer_cfg}, got None"
            )

    def _overlong_enabled(self) -> bool:
        return self.overlong_buffer_cfg is not None and self.overlong_buffer_cfg.enable

    def __call__(self, data: DataProto, return_dict: bool = False):
        """``reward_tensor`` ``(bs, response_length)`` or ``{"reward_tensor", "reward_extra_info"}``."""
        if "rm_scores" in data.batch.keys():
            return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]

        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        prompt_length = data.batch["prompts"].shape[-1]
        infos: list[dict] = []
        already_printed = examined_counts(self)
        eos_token = self.tokenizer.eos_token

        extra_infos = sample_extra_infos(data)
        for i in range(len(data)):
            item = data[i]
            prompt_str, response_str, valid_response_length = decode_sample(self.tokenizer, item, prompt_length)
            if eos_token and response_str.endswith(eos_token):
                response_str = response_str[: -len(eos_token)]
            ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]
            data_source = item.non_tensor_batch[self.reward_fn_key]
            score, info = self._score(
                i,
                data_source=data_source,
                solution_str=response_str,
                ground_truth=ground_truth,
                extra_info=extra_infos[i],
            )
            info = dict(info)
            reward = score
            if self._overlong_enabled():
                buffer_len = self.overlong_buffer_cfg.len
                expected_len = self.max_resp_len - buffer_len
                exceed_len = valid_response_length - expected_len
                overlong_reward = min(-exceed_len / buffer_len * self.overlong_buffer_cfg.penalty_factor, 0)
                reward += overlong_reward
                if self.overlong_buffer_cfg.log:
                    info["overlong_reward"] = overlong_reward
                    info["overlong"] = overlong_reward < 0
            infos.append(info)
            reward_tensor[i, max(valid_response_length - 1, 0)] = reward

            print_examined(
                already_printed,
                self.num_examine,
                data_source,
                prompt_str,
                response_str,
                ground_truth,
                info or {"score": score},
            )

        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": merge_extra_info(infos)}
        return reward_tensor


register("dapo")(DAPORewardManager)
