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


def test_num_examine_prints_per_step_not_per_chunk(tokenizer, make_batch, capsys):  # noqa: F811
    rows = make_batch([f"p{i}" for i in range(6)], ["1"] * 6, ["1"] * 6, data_sources=["a", "b"] * 3)
    loop = RewardLoop(NaiveRewardManager(tokenizer, 1, compute_score=exact))  # one sample per data source
    for _step in range(2):
        batch = loop.generate(rows, {}, lambda prompts, timing: prompts, chunk_prompts=2)  # 3 chunks of a and b
        loop.pending(batch.non_tensor_batch.pop(ROW_KEY)).result()
    assert capsys.readouterr().out.count("[prompt]") == 2 * 2  # per step: one of "a", one of "b"
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


def test_workers_score_that_many_chunks_at_once(tokenizer, make_batch):  # noqa: F811
    """``workers`` (reward_model.num_workers): chunks that arrive while a call runs are scored by the free threads,
    up to that many calls at once, with the rewards of one thread."""
    import threading

    active, peak, lock = [0], [0], threading.Lock()

    def slow_rule(data_source, solution_str, ground_truth, extra_info=None):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return 1.0 if solution_str == ground_truth else 0.0

    responses, truths = ["1", "2", "3", "4", "5", "6"], ["1", "0", "3", "0", "5", "0"]
    rows = make_batch([f"p{i}" for i in range(6)], responses, truths)
    with pytest.raises(ValueError, match="workers >= 1"):
        RewardLoop(NaiveRewardManager(tokenizer, 0, compute_score=slow_rule), workers=0)
    loop = RewardLoop(NaiveRewardManager(tokenizer, 0, compute_score=slow_rule), workers=3)
    start = time.monotonic()
    ids = [loop.submit(rows[i : i + 1]) for i in range(6)]  # six one-row chunks, all at once
    reward, _ = loop.pending(np.concatenate(ids)).result()
    elapsed = time.monotonic() - start
    assert reward.sum(-1).tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert peak[0] == 3, peak  # three calls at a time, never more
    assert elapsed < 6 * 0.2, elapsed  # one thread would take 1.2 s
    loop.close()
    assert not any(thread.is_alive() for thread in loop._scorers)


@pytest.mark.parametrize("remote", [False, True], ids=["in_process", "ray_worker"])
def test_trajectories_handed_over_one_by_one_are_scored_as_they_arrive(tokenizer, make_batch, remote, request):  # noqa: F811
    """The rollout side of per-trajectory scoring (agent loops, vLLM) through the sink, in this process or from a
    Ray worker (a Ray queue): the rewards equal the batch path's, in any row order, and scoring starts before the
    generation call returns."""
    from verl.workers.rollout.base import TRAJECTORY_ID, TRAJECTORY_SINK

    def play_trajectories(sink, first_ids, rows: DataProto, n: int, delay_s: float) -> None:
        """A rollout handing over each prompt's ``n`` trajectories (``rows``, interleaved), last prompt first, one
        prompt every ``delay_s`` seconds (defined here: a Ray worker gets it by value)."""
        import time

        from verl.workers.rollout.base import emit_trajectories

        for prompt in reversed(range(len(first_ids))):
            time.sleep(delay_s)
            for sample in range(n):
                row = prompt * n + sample
                emit_trajectories(sink, first_ids[prompt : prompt + 1], sample, rows[row : row + 1])

    n, responses = 2, ["12", "7", "333", "3", "5", "8", "44", "1"]
    truths = ["12", "12", "333", "333", "5", "5", "4", "4"]  # one ground truth per prompt
    full = make_batch([f"p{i // n}" for i in range(8)], responses, truths)
    prompt_columns = ("data_source", "reward_model")  # the trainer's rows of the prompts (generation inputs popped)
    prompts = DataProto.from_dict(non_tensors={k: full.non_tensor_batch[k][::n] for k in prompt_columns})
    gen_prompts = DataProto.from_dict(tensors={"input_ids": full.batch["prompts"][::n]})
    generated = DataProto(batch=full.batch, non_tensor_batch={"extra_info": full.non_tensor_batch["extra_info"]})

    loop = RewardLoop(NaiveRewardManager(tokenizer, 0, compute_score=exact), remote=remote)
    ids = loop.open_stream(prompts, gen_prompts, n, lambda p, g, out: p.union(out))
    sink, first_ids = gen_prompts.meta_info[TRAJECTORY_SINK], gen_prompts.non_tensor_batch[TRAJECTORY_ID]
    assert first_ids.tolist() == [0, 2, 4, 6] and ids.tolist() == list(range(8))
    if remote:
        ray = request.getfixturevalue("ray_cluster")
        ray.get(ray.remote(num_cpus=0)(play_trajectories).remote(sink, first_ids, generated, n, 0.2))
    else:
        play_trajectories(sink, first_ids, generated, n, 0.2)
    loop.close_stream(gen_prompts)
    assert TRAJECTORY_SINK not in gen_prompts.meta_info and TRAJECTORY_ID not in gen_prompts.non_tensor_batch

    order = np.array([5, 0, 7, 2, 1, 6, 3, 4])
    pending = loop.pending(ids[order])
    reward, extra = pending.result()
    expected, expected_extra = compute_reward(full.select_idxs(order), NaiveRewardManager(tokenizer, 0, exact))
    assert torch.equal(reward, expected) and extra == expected_extra
    assert reward.sum(-1).tolist() == [float(responses[i] == truths[i]) for i in order]
    metrics = pending.metrics()
    # the last prompt's trajectories arrived 0.6 s before the call returned
    assert metrics["reward_loop/scored_during_generation"] >= 2, metrics
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


@pytest.mark.parametrize("rollout", ["hf_chunks", "agent_loop"])
def test_grpo_scores_through_the_reward_loop(tmp_path, rollout):
    """``hf_chunks``: the single-turn HF rollout, scored per generated micro batch; ``agent_loop``:
    ``rollout.mode=async`` (the single-turn agent loop on the HF engine), scored per trajectory through the sink."""
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
    if rollout == "agent_loop":
        overrides += ["actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=True"]
    trainer = fit_demo_inprocess(overrides, RecordingTrainer)
    assert len(trainer.steps) == 2
    for metrics, same_as_batch_path in trainer.steps:
        assert same_as_batch_path
        if rollout == "hf_chunks":
            assert metrics["reward_loop/chunks"] == 2  # 4 prompts, 2 per generated chunk
        else:  # trajectories arrive as their (batched) turns finish; scored in groups of whatever has arrived
            assert 1 <= metrics["reward_loop/chunks"] <= 16
            assert 0 <= metrics["reward_loop/scored_during_generation"] <= 16
        assert 0.0 <= metrics["critic/score/mean"] <= 1.0 and metrics["reward/failed_calls"] == 0
