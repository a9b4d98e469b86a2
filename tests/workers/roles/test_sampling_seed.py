"""The rollout worker's sampling seed: the same (seed, step, rank, chunk) draws the same numbers, and the chunks of a
batch that the reward loop generates in several calls each draw their own (not one stream repeated per chunk)."""

from types import SimpleNamespace

import torch

from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker


def draws(step: int, chunk: int, rank: int = 0) -> torch.Tensor:
    worker = SimpleNamespace(config=SimpleNamespace(rollout=SimpleNamespace(seed=0)), rank=rank)
    with ActorRolloutRefWorker._sampling_seed(worker, step, chunk):
        return torch.rand(8)


def test_each_chunk_draws_its_own_numbers_and_chunk_zero_keeps_the_old_seed():
    assert torch.equal(draws(3, 0), draws(3, 0)) and torch.equal(draws(3, 2), draws(3, 2))
    assert not torch.equal(draws(3, 0), draws(3, 1)) and not torch.equal(draws(3, 1), draws(3, 2))
    assert not torch.equal(draws(3, 0), draws(4, 0)) and not torch.equal(draws(3, 0, rank=0), draws(3, 0, rank=1))
    torch.manual_seed(0)  # the global stream is restored afterwards
    expected = torch.rand(1)
    torch.manual_seed(0)
    draws(3, 1)
    assert torch.equal(torch.rand(1), expected)
    # chunk 0 is the seed a whole-batch call always had: (seed * 1_000_003 + step) * 65_537 + rank
    torch.manual_seed((0 * 1_000_003 + 3) * 65_537 + 0)
    assert torch.equal(torch.rand(8), draws(3, 0))
