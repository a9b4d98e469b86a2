"""A dataloader whose position can be saved and restored exactly (mid-epoch and at epoch boundaries)."""

from __future__ import annotations

import warnings
from typing import Any

try:
    from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataStatefulDataLoader
except ImportError as e:  # torchdata is a core requirement; say how to get it rather than fail obscurely later
    raise ImportError("verl's resumable dataloader needs torchdata: pip install torchdata") from e

__all__ = ["StatefulDataLoader"]


class StatefulDataLoader(_TorchdataStatefulDataLoader):
    """torchdata's ``StatefulDataLoader`` that treats an epoch whose last batch was handed out as finished.

    torchdata only marks an epoch finished once its iterator raised ``StopIteration``. A trainer saves right after
    its last step of an epoch, before that happens, so a restored loader would first replay an empty remainder of
    the old epoch and the trainer (which derives the epoch from the step count) would skip one epoch of data.
    Use with :class:`verl.utils.dataset.sampler.ResumableRandomSampler` so later epochs' orders are restored too.
    """

    def __init__(self, *args, **kwargs):
        # torchdata's own constructor calls the deprecated torch.set_vital; the warning is not about our call and
        # nothing we pass avoids it, so it stays out of the user's console
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated", category=UserWarning)
            super().__init__(*args, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        """The iterator state; ``_iterator_finished`` is True once ``len(self)`` batches of this epoch were yielded."""
        state = super().state_dict()
        iterator = self._iterator
        if (
            not state.get("_iterator_finished", False)
            and iterator is not None
            and getattr(iterator, "_num_yielded", 0) >= len(self)
        ):
            state = dict(state, _iterator_finished=True)
        return state
