"""The reward loop (``reward_model.use_reward_loop=True``): chunks scored on a background thread as they are generated
give the same rewards and extra info as scoring the whole batch, in the batch's (rebalanced) order; the scoring
overlaps the generation of the next chunks; and a short GRPO run on the built-in task scores through it."""

import asyncio
import time

import numpy as np
import pytest
import torch

from tests.trainer.ppo_e2e_utils import demo_run_overrides, fit_demo_inprocess
from tests.workers.reward_manager.conftest import make_batch, tokenizer  # noqa: F401 - fixtures
from verl import DataProto
from verl.trainer.config import PPOConfig
from verl.trainer.ppo.reward import compute_reward
from verl.trainer.ppo.reward_loop import GENERATION_CHUNK, ROW_KEY, RewardLoop, generation_chunk_prompts
from verl.workers.reward_manager import NaiveRewardManager


def exact(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 1.0 if solution_str == ground_truth else 0.0, "length": len(solution_str)}


async def async_exact(data_source, solution_str, ground_truth, extra_info=None):
    await asyncio.sleep(0.01)
    if solution_str == "boom":  # a failing call: scored 0 and reported in reward_call_failed
        raise RuntimeError("judge unreachable")
    return exact(data_source, solution_str, ground_truth)


@pytest.mark.parametrize("score_fn", [exact, async_exact], ids=["sync", "async"])
def test_streamed_rewards_equal_the_batch_path(tokenizer, make_batch, score_fn):  # noqa: F811
    responses = ["12", "7", "333", "boom", "5", "8", "44", "1", "x", "9"]
    truths = ["12", "8", "333", "1", "5", "8", "4", "1", "y", "9"]
    batch = make_batch([f"p{i}" for i in range(10)], responses, truths)
    manager = NaiveRewardManager(tokenizer, 0, compute_score=score_fn)

    loop = RewardLoop(manager)
    chunks = [batch[0:4], batch[4:8], batch[8:10]]  # "boom" fails in the first chunk only
    for chunk in chunks:
        chunk.non_tensor_batch[ROW_KEY] = loop.submit(chunk)
    streamed = DataProto.concat(chunks)
    order = torch.tensor([7, 2, 9, 0, 4, 1, 8, 3, 6, 5])
    streamed.reorder(order)  # the trainer rebalances the rows across ranks before the reward phase
    pending = loop.pending(streamed.non_tensor_batch.pop(ROW_KEY))
    reward, extra = pending.result()

    expected_reward, expected_extra = compute_reward(streamed, manager)
    assert torch.equal(reward, expected_reward)
    assert extra.keys() == expected_extra.keys()
    for key in extra:
        assert list(extra[key]) == list(expected_extra[key]), key
    scores = reward.sum(-1).tolist()
    assert scores == [1.0 if responses[i] == truths[i] else 0.0 for i in order.tolist()]
    if score_fn is async_exact:
        assert extra["reward_call_failed"] == [i == 3 for i in order.tolist()]
    metrics = pending.metrics()
    assert metrics["reward_loop/chunks"] == 3 and metrics["reward_loop/scoring_s"] > 0
    loop.close()


def test_rows_never_submitted_are_refused(tokenizer, make_batch):  # noqa: F811
    loop = RewardLoop(NaiveRewardManager(tokenizer, 0, compute_score=exact))
    ids = loop.submit(make_batch(["a", "b"], ["1", "2"], ["1", "2"]))
    with pytest.raises(KeyError, match="1 of 3 rows were not submitted"):
        loop.pending(np.append(ids, 99))
    loop.close()


def test_scoring_overlaps_the_generation_of_the_next_chunks(tokenizer, make_batch):  # noqa: F811
    def slow_rule(data_source, solution_str, ground_truth, extra_info=None):
        time.sleep(0.05)
        return 1.0

    rows = make_batch([f"p{i}" for i in range(16)], ["1"] * 16, ["1"] * 16)

    chunk_indices = []

    def generate(prompts, timing):  # a rollout that takes 0.25 s per chunk of 4
        chunk_indices.append(prompts.meta_info[GENERATION_CHUNK])
        time.sleep(0.25)
        timing["gen"] = timing.get("gen", 0.0) + 0.25
        return rows[: len(prompts)]

    loop = RewardLoop(NaiveRewardManager(tokenizer, 0, compute_score=slow_rule))
    timing_raw: dict = {}
    start = time.monotonic()
    batch = loop.generate(rows, timing_raw, generate, chunk_prompts=4)
    reward, _ = (pending := loop.pending(batch.non_tensor_batch.pop(ROW_KEY))).result()
    elapsed = time.monotonic() - start
    metrics = pending.metrics()
    # 4 chunks: 1.0 s of generation, 0.8 s of scoring, of which only the last chunk's 0.2 s comes after generation
    assert reward.sum().item() == 16 and timing_raw["gen"] == pytest.approx(1.0)
    assert chunk_indices == [0, 1, 2, 3] and GENERATION_CHUNK not in batch.meta_info  # each chunk its own seed
    assert metrics["reward_loop/chunks"] == 4 and metrics["reward_loop/scoring_s"] >= 0.8
    # the first three chunks' 0.6 s of scoring run while later chunks generate (margin for a loaded box)
    assert metrics["reward_loop/overlap_s"] >= 0.3, metrics
    assert elapsed < 1.0 + 0.8, elapsed  # sequential would take at least 1.8 s
    loop.close()


def test_generation_is_cut_only_where_the_rollout_generates_in_micro_batches():
    def rollout(**values):
        return PPOConfig.from_config({"actor_rollout_ref": {"rollout": values}}).actor_rollout_ref.rollout

    assert generation_chunk_prompts(rollout(name="hf", micro_batch_size=2), 2, 16) == 4
    assert generation_chunk_prompts(rollout(name="hf", micro_batch_size=None), 2, 16) == 16
    assert generation_chunk_prompts(rollout(name="vllm", micro_batch_size=2), 2, 16) == 16
    assert generation_chunk_prompts(rollout(name="hf", micro_batch_size=2, mode="async"), 2, 16) == 16


ASYNC_RULE = """
import time

from verl.utils.reward_score import default_compute_score


async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)
"""


def test_grpo_scores_through_the_reward_loop(tmp_path):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    class RecordingTrainer(RayPPOTrainer):
        steps: list = []

        def train_step(self, batch, timing_raw):
            batch, metrics = super().train_step(batch, timing_raw)
            # the rule scored on the batch path, on the same (rebalanced) rows, gives the same scores
            batch_path, _ = compute_reward(batch, NaiveRewardManager(self.tokenizer, 0))
            self.steps.append((metrics, torch.equal(batch_path, batch.batch["token_level_scores"])))
            return batch, metrics

    rule = tmp_path / "rule.py"
    rule.write_text(ASYNC_RULE)
    overrides = demo_run_overrides(tmp_path / "ckpt", steps=2) + [
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.micro_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        f"custom_reward_function.path={rule}",
        "reward_model.use_reward_loop=True",
    ]
    trainer = fit_demo_inprocess(overrides, RecordingTrainer)
    assert len(trainer.steps) == 2
    for metrics, same_as_batch_path in trainer.steps:
        assert same_as_batch_path
        assert metrics["reward_loop/chunks"] == 2  # 4 prompts, 2 per generated chunk
        assert 0.0 <= metrics["critic/score/mean"] <= 1.0 and metrics["reward/failed_calls"] == 0
