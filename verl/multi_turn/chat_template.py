"""Token ids of a conversation that grows turn by turn, kept equal to what the chat template gives.

The model's own tokens are never re-tokenised: an assistant turn enters the trajectory as the ids that were sampled
(re-tokenising the decoded text can give different ids, the "token drift" that makes the trainer score tokens the
model never produced). Everything else (the template's end-of-turn tail, tool and user messages, the next
generation prompt) is the difference between the template rendered before and after those messages.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ChatTemplate"]

_PROBE = "PROBE-7c1e"  # an assistant text to find where the template puts a message's content


class ChatTemplate:
    """The tokenizer's chat template as token ids, with the tool schemas of one trajectory."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.end_of_turn_id = self._find_end_of_turn()

    def render_ids(self, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool) -> list[int]:
        """Token ids of ``messages`` as the template renders them (text first, as the dataset does)."""
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, special tokens dropped (the end-of-turn token is not content)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def continuation_ids(
        self, messages: list[dict], new_messages: list[dict], tools: list[dict] | None
    ) -> tuple[list[int], list[int]]:
        """``(tail, added)`` for appending ``new_messages`` after the last (assistant) message of ``messages``.

        ``tail``: the template's ids after the assistant's end-of-turn token (e.g. the newline after
        ``<|im_end|>``); ``added``: the new messages plus the next generation prompt. Raises ValueError when the
        template does not render ``messages`` as a prefix of the longer conversation (then no exact incremental
        form exists).
        """
        before = self.render_ids(messages, tools, add_generation_prompt=False)
        after = self.render_ids(messages + new_messages, tools, add_generation_prompt=True)
        if after[: len(before)] != before:
            raise ValueError(
                "the chat template does not render the conversation as a prefix of its continuation; "
                "multi-turn rollouts need a prefix-stable template"
            )
        tail = []
        if self.end_of_turn_id is not None and self.end_of_turn_id in before:
            last = len(before) - 1 - before[::-1].index(self.end_of_turn_id)
            tail = before[last + 1 :]
        return tail, after[len(before) :]

    def _find_end_of_turn(self) -> int | None:
        """The token the template puts right after an assistant message's content (``<|im_end|>`` for ChatML)."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False)
        except Exception:  # a template that cannot render this pair: fall back to the EOS token alone
            return None
        after = text[text.index(_PROBE) + len(_PROBE) :] if _PROBE in text else ""
        ids = self.tokenizer.encode(after, add_special_tokens=False) if after else []
        return ids[0] if ids else None
