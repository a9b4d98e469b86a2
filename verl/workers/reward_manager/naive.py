"""The default reward manager: score each response with a rule function, reward at its last valid token."""

from __future__ import annotations

import logging

import torch

from verl.protocol import DataProto
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.guarded_call import DEFAULT_TIMEOUT_S, GuardedCall
from verl.workers.reward_manager.async_scoring import CallLimits, is_async_fn, score_concurrently
from verl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)

__all__ = ["NaiveRewardManager", "decode_sample", "merge_extra_info", "sample_extra_infos", "split_score"]


def decode_sample(tokenizer, item, prompt_length: int) -> tuple[str, str, int]:
    """``(prompt_str, response_str, valid_response_length)`` of one DataProtoItem (left-padded prompt).

    The item's ``attention_mask`` covers prompt then response: ``(prompt_length + response_length,)``.
    """
    attention_mask = item.batch["attention_mask"]
    valid_prompt_length = int(attention_mask[:prompt_length].sum())
    valid_response_length = int(attention_mask[prompt_length:].sum())
    prompt_ids = item.batch["prompts"][prompt_length - valid_prompt_length :]
    response_ids = item.batch["responses"][:valid_response_length]
    prompt_str = tokenizer.decode(prompt_ids, skip_special_tokens=True)
    response_str = tokenizer.decode(response_ids, skip_special_tokens=True)
    return prompt_str, response_str, valid_response_length


def sample_extra_infos(data: DataProto) -> list:
    """Each sample's ``extra_info`` for the scorer. After a multi-turn rollout it also holds ``reward_scores`` (each
    tool's reward by tool name and the interaction's ``user_turn_rewards``), so a reward function can use them."""
    size = len(data)
    infos = data.non_tensor_batch["extra_info"] if "extra_info" in data.non_tensor_batch else [None] * size
    if "reward_scores" not in data.non_tensor_batch:
        return list(infos)
    scores = data.non_tensor_batch["reward_scores"]
    return [{**(infos[i] or {}), "reward_scores": scores[i]} for i in range(size)]


def split_score(result) -> tuple[float, dict]:
    """``(reward, extra info)`` from a scorer result: a number, or a dict with ``"score"`` (all keys are extra info)."""
    if isinstance(result, dict):
        if "score" not in result:
            raise KeyError(f"a reward function returning a dict must include 'score'; got keys {sorted(result)}")
        return float(result["score"]), result
    return float(result), {}


def print_examined(
    already_printed: dict, num_examine: int, data_source, prompt_str, response_str, ground_truth, info: dict
) -> None:
    """Print the first ``num_examine`` samples of each data source (prompt, response, truth, score details)."""
    if already_printed.get(data_source, 0) >= num_examine:
        return
    already_printed[data_source] = already_printed.get(data_source, 0) + 1
    print("[prompt]", prompt_str)
    print("[response]", response_str)
    print("[ground_truth]", ground_truth)
    for key, value in info.items():
        print(f"[{key}]", value)


def examined_counts(manager) -> dict:
    """Samples printed so far per data source (``num_examine``): fresh for each call, or under the reward loop the
    count of the whole step (the loop sets ``manager.examined_per_step``), which scores a step in several calls."""
    shared = getattr(manager, "examined_per_step", None)
    return shared if shared is not None else {}


def merge_extra_info(infos: list[dict]) -> dict[str, list]:
    """Per-sample info dicts -> one list per key, of length ``len(infos)`` whenever the key appears at all.

    A sample whose scorer failed has no info; it gets a neutral value (False / 0.0 / None, by the type the other
    samples report) so every list stays aligned with the batch.
    """
    keys: list[str] = []
    for info in infos:
        keys.extend(k for k in info if k not in keys)
    merged: dict[str, list] = {}
    for key in keys:
        example = next(info[key] for info in infos if key in info)
        if isinstance(example, bool):
            neutral = False
        elif isinstance(example, int | float):
            neutral = 0.0
        else:
            neutral = None
        merged[key] = [info.get(key, neutral) for info in infos]
    return merged


class NaiveRewardManager:
    """Score each sample with ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``.

    Returns a float32 ``(bs, response_length)`` tensor holding the score at each row's last valid response
    token. A call that raises or runs past ``timeout_s`` scores 0.0 with a logged warning.
    """

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        compute_score=None,
        reward_fn_key: str = "data_source",
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        timeout_mode: str = "auto",
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine  # samples per data source printed to the console
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.timeout_s = timeout_s
        self._guarded = GuardedCall(self.compute_score, timeout_s=timeout_s, mode=timeout_mode)

    def _score(self, index: int, **kwargs) -> tuple[float, dict]:
        """One guarded scorer call; failures become 0.0 and a warning naming the sample."""
        ok, result, error = self._guarded(**kwargs)
        if ok:
            try:
                return split_score(result)
            except (KeyError, TypeError, ValueError) as e:
                error = f"{type(e).__name__}: {e}"
        logger.warning(
            "reward function failed on sample %d (data_source=%r), scoring it 0.0: %s",
            index,
            kwargs.get("data_source"),
            error,
        )
        return 0.0, {}

    def _score_batch(self, calls: list[dict]) -> tuple[list[tuple[float, dict]], list[bool]]:
        """``(reward, info)`` per sample and whether its call failed. A plain function runs guarded, one sample after
        another; an ``async def`` one (a judge behind an endpoint) runs for all samples at once."""
        if is_async_fn(self.compute_score):
            return self._score_concurrently(calls, CallLimits(timeout=self.timeout_s or None))
        scored = [self._score(i, **kwargs) for i, kwargs in enumerate(calls)]
        return scored, [False] * len(calls)

    def _score_concurrently(self, calls: list[dict], limits: CallLimits):
        outcome = score_concurrently(self.compute_score, calls, limits)
        scored = []
        for i, (result, failed) in enumerate(zip(outcome.results, outcome.failed, strict=True)):
            if failed:
                scored.append((0.0, {}))
                continue
            try:
                scored.append(split_score(result))
            except (KeyError, TypeError, ValueError) as e:
                logger.warning("reward function result for sample %d is not a score, scoring it 0.0: %s", i, e)
                outcome.failed[i] = True
                scored.append((0.0, {}))
        return scored, outcome.failed

    def __call__(self, data: DataProto, return_dict: bool = False):
        """``reward_tensor`` ``(bs, response_length)`` or ``{"reward_tensor", "reward_extra_info"}``.

        When a call failed on some sample, ``reward_extra_info`` carries ``reward_call_failed`` (one bool per
        sample), which the trainer counts as ``reward/failed_calls``."""
        if "rm_scores" in data.batch.keys():
            return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]

        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        prompt_length = data.batch["prompts"].shape[-1]
        already_printed = examined_counts(self)
        extra_infos = sample_extra_infos(data)

        calls, decoded = [], []
        for i in range(len(data)):
            item = data[i]
            prompt_str, response_str, valid_response_length = decode_sample(self.tokenizer, item, prompt_length)
            ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]
            data_source = item.non_tensor_batch[self.reward_fn_key]
            calls.append(
                {
                    "data_source": data_source,
                    "solution_str": response_str,
                    "ground_truth": ground_truth,
                    "extra_info": extra_infos[i],
                }
            )
            decoded.append((prompt_str, valid_response_length))

        scored, failed = self._score_batch(calls)
        infos: list[dict] = []
        for i, ((reward, info), (prompt_str, valid_response_length)) in enumerate(zip(scored, decoded, strict=True)):
            infos.append(info)
            reward_tensor[i, max(valid_response_length - 1, 0)] = reward
            call = calls[i]
            print_examined(
                already_printed,
                self.num_examine,
                call["data_source"],
                prompt_str,
                call["solution_str"],
                call["ground_truth"],
                info or {"score": reward},
            )

        if return_dict:
            extra = merge_extra_info(infos)
            if any(failed):
                extra["reward_call_failed"] = list(failed)
            return {"reward_tensor": reward_tensor, "reward_extra_info": extra}
        return reward_tensor


register("naive")(NaiveRewardManager)
