"""``single_turn_agent``: the chat prompt, one assistant turn, done."""

from __future__ import annotations

from verl.multi_turn.agent_loop.base import AgentLoopBase, AgentLoopOutput, register

__all__ = ["SingleTurnAgentLoop"]


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    async def run(self, **kwargs) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        prompt_ids = self.checked_prompt(self.context.chat.render_ids(messages, None, add_generation_prompt=True))
        turn = await self.server.generate(prompt_ids, self.context.request.response_length)
        ids = turn.token_ids[: self.context.request.response_length]
        log_probs = list(turn.log_probs[: len(ids)]) if turn.log_probs is not None else None
        messages.append({"role": "assistant", "content": self.context.chat.decode(ids)})
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=ids,
            response_mask=[1] * len(ids),
            response_logprobs=log_probs,
            response_versions=list(turn.versions[: len(ids)]) if turn.versions is not None else None,
            num_turns=1,
            messages=messages,
        )
