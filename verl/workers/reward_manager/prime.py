"""PRIME reward manager: verify all responses in parallel worker processes, each with a time limit."""

from __future__ import annotations

import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import torch

from verl.protocol import DataProto
from verl.utils.reward_score import default_compute_score
from verl.workers.reward_manager.naive import sample_extra_infos
from verl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)

__all__ = ["PrimeRewardManager", "single_compute_score", "parallel_compute_score", "run_reward_scoring"]

_PROCESS_FN = None  # the scoring function, installed in each pool process by the fork-time initializer


def _install(fn) -> None:
    global _PROCESS_FN
    _PROCESS_FN = fn


def _call_installed(args: tuple):
    return _PROCESS_FN(*args)


def _as_float(result) -> float:
    """bool/int/float -> float; a tuple or list -> float of its first element."""
    if isinstance(result, bool | int | float):
        return float(result)
    if isinstance(result, list | tuple) and result:
        return float(result[0])
    raise TypeError(f"a PRIME reward must be a number or a tuple/list starting with one, got {result!r}")


def single_compute_score(evaluation_func, completion, reference, task, task_extra_info=None, timeout: float = 300.0):
    """Score one sample in a helper process with a time limit; 0.0 (and a warning) on timeout or error."""
    from verl.utils.reward_score.guarded_call import GuardedCall

    call = GuardedCall(evaluation_func, timeout_s=timeout)
    try:
        ok, result, error = call(task, completion, reference, task_extra_info)
    finally:
        call.close()
    if not ok:
        logger.warning("reward for task %r failed, scoring 0.0: %s", task, error)
        return 0.0
    return _as_float(result)


def parallel_compute_score(
    evaluation_func,
    completions: list[str],
    references: list,
    tasks: list[str],
    extra_info: list | None = None,
    num_processes: int = 64,
    timeout: float = 300.0,
) -> list[float]:
    """Score every sample in a fork-based process pool; each has ``timeout`` seconds from submission.

    Samples that raise or overrun score 0.0 (with a warning); overrunning workers are killed, so a hung
    scorer never outlives the call.
    """
    n = len(completions)
    extra_info = list(extra_info) if extra_info is not None else [None] * n
    if "fork" not in multiprocessing.get_all_start_methods():
        return [
            single_compute_score(evaluation_func, c, r, t, e, timeout)
            for c, r, t, e in zip(completions, references, tasks, extra_info, strict=True)
        ]
    workers = max(1, min(num_processes, n))
    # fork hands evaluation_func to each worker by memory, so it need not be picklable
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_install,
        initargs=(evaluation_func,),
    )
    scores = [0.0] * n
    hung = False
    try:
        deadline = time.monotonic() + timeout
        futures = [
            pool.submit(_call_installed, (t, c, r, e))
            for c, r, t, e in zip(completions, references, tasks, extra_info, strict=True)
        ]
        for i, future in enumerate(futures):
            try:
                scores[i] = _as_float(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                hung = True
                logger.warning("reward for sample %d (task %r) timed out after %s s, scoring 0.0", i, tasks[i], timeout)
            except Exception as e:
                logger.warning("reward for sample %d (task %r) failed, scoring 0.0: %r", i, tasks[i], e)
    finally:
        if hung:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
        pool.shutdown(wait=not hung, cancel_futures=True)
    return scores


def run_reward_scoring(
    evaluation_func, completions, references, tasks, extra_info=None, num_processes=64, timeout=300.0
):
    """Synchronous entry point kept for verl compatibility; see :func:`parallel_compute_score`."""
    return parallel_compute_score(evaluation_func, completions, references, tasks, extra_info, num_processes, timeout)


class PrimeRewardManager:
    """Score full decoded responses in parallel processes with ``compute_score(data_source, completion, gt, extra)``.

    Returns ``(bs, response_length)`` rewards at the last valid token and stores ``data.batch["acc"]`` ``(bs,)``.
    ``timeout_s`` (default 300) limits each sample; ``num_processes`` caps the pool (default 64).
    """

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        compute_score=None,
        reward_fn_key: str = "data_source",
        timeout_s: float = 300.0,
        num_processes: int = 64,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.timeout_s = timeout_s
        self.num_processes = num_processes

    def verify(self, data: DataProto) -> list[float]:
        """Scores of every sample; also sets ``data.batch["acc"]``."""
        completions = self.tokenizer.batch_decode(data.batch["responses"], skip_special_tokens=True)
        references = [item["ground_truth"] for item in data.non_tensor_batch["reward_model"]]
        tasks = list(data.non_tensor_batch[self.reward_fn_key])
        extra_info = sample_extra_infos(data)
        scores = parallel_compute_score(
            self.compute_score,
            completions,
            references,
            tasks,
            extra_info=extra_info,
            num_processes=self.num_processes,
            timeout=self.timeout_s,
        )
        data.batch["acc"] = torch.tensor(scores, dtype=torch.float32, device=data.batch["responses"].device)
        return scores

    def __call__(self, data: DataProto, return_dict: bool = False):
        """``reward_tensor`` ``(bs, response_length)``, or ``{"reward_tensor"}`` (no extra info)."""
        if "rm_scores" in data.batch.keys():
            return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        prompt_length = data.batch["prompts"].shape[-1]
        valid_response_lengths = data.batch["attention_mask"][:, prompt_length:].sum(dim=-1)
        scores = self.verify(data)
        for i, score in enumerate(scores):
            reward_tensor[i, max(int(valid_response_lengths[i]) - 1, 0)] = score
        if self.num_examine > 0:
            for i in range(min(self.num_examine, len(scores))):
                print("[response]", self.tokenizer.decode(data.batch["responses"][i], skip_special_tokens=True))
                print("[score]", scores[i])
        return {"reward_tensor": reward_tensor} if return_dict else reward_tensor


register("prime")(PrimeRewardManager)
