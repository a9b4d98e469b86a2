"""What an agent loop needs from a generation engine: one assistant turn for a token-id prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from verl.workers.rollout.base import SamplingRequest

__all__ = ["GeneratedTurn", "TurnEngine", "TurnServer"]


@dataclass
class GeneratedTurn:
    """One assistant turn from the engine: the sampled ids (through the stop token), their log-probs, and (partial
    rollout) the weight version that sampled each."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    versions: list[int] | None = None


class TurnEngine(Protocol):
    """A batch engine (HFRollout and vLLMRollout implement it); ``TurnBatcher`` serves agent loops with it."""

    def generate_turns(
        self, prompts: list[list[int]], max_tokens: list[int], request: SamplingRequest, stop_token_ids: list[int]
    ) -> list[GeneratedTurn]:
        """One sample per prompt, each stopping at a stop token or its own ``max_tokens``."""


class TurnServer(Protocol):
    """What agent loops await: ``TurnBatcher`` (batched engine calls) or vLLM's step-level ``ContinuousBatcher``."""

    engine_calls: int

    async def generate(self, prompt: list[int], max_tokens: int) -> GeneratedTurn:
        """The next assistant turn for ``prompt``, at most ``max_tokens`` long, ending at a stop token."""

    def finished(self) -> None:
        """One trajectory has ended (a batcher stops waiting for it)."""

    async def serve(self) -> None:
        """Serve requests until cancelled."""
