"""A seeded random sampler whose position can be saved and restored, so a resumed run sees the same batches."""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from torch.utils.data import RandomSampler

__all__ = ["ResumableRandomSampler"]


class _ResumableIterator(Iterator[int]):
    """One epoch of a permutation drawn from the sampler's generator; records where it started and how far it got.

    torchdata's ``StatefulDataLoader`` saves ``state_dict()`` of the sampler iterator and, on resume, calls
    ``load_state_dict`` on a fresh one instead of skipping samples itself.
    """

    def __init__(self, sampler: ResumableRandomSampler):
        self.sampler = sampler
        self._start_generator_state = sampler.generator.get_state()
        self._order = torch.randperm(len(sampler.data_source), generator=sampler.generator).tolist()
        self.yielded = 0

    def __iter__(self) -> _ResumableIterator:
        return self

    def __next__(self) -> int:
        if self.yielded >= len(self._order):
            raise StopIteration
        index = self._order[self.yielded]
        self.yielded += 1
        return index

    def state_dict(self) -> dict:
        """Generator state at the start of this epoch and the number of indices already handed out."""
        return {"generator": self._start_generator_state.clone(), "yielded": self.yielded}

    def load_state_dict(self, state_dict: dict) -> None:
        """Replay the saved epoch's permutation (leaving the generator where the original run left it)."""
        self.sampler.generator.set_state(state_dict["generator"])
        self._start_generator_state = state_dict["generator"].clone()
        self._order = torch.randperm(len(self.sampler.data_source), generator=self.sampler.generator).tolist()
        self.yielded = int(state_dict["yielded"])


class ResumableRandomSampler(RandomSampler):
    """``RandomSampler`` (no replacement) over ``data_source`` with a seeded generator and resumable epochs.

    Each epoch draws a fresh permutation from ``generator``; with torchdata's ``StatefulDataLoader`` a restored
    loader continues mid-epoch and later epochs match an uninterrupted run exactly (plain ``RandomSampler`` loses
    the generator state, so a run resumed after its first epoch would replay the first epoch's order).
    """

    def __init__(self, data_source: Sized, generator: torch.Generator | None = None, seed: int = 1):
        if generator is None:
            generator = torch.Generator()
            generator.manual_seed(seed)
        super().__init__(data_source, replacement=False, generator=generator)

    def __iter__(self) -> _ResumableIterator:
        return _ResumableIterator(self)

    def __len__(self) -> int:
        return len(self.data_source)
