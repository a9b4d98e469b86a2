"""An agent loop that a test's agent-loop config file names by import path."""

from verl.multi_turn.agent_loop import AgentLoopBase, AgentLoopOutput


class EchoAgentLoop(AgentLoopBase):
    """Answers "echo" without asking the engine; remembers the row fields each call received."""

    seen_fields: list[dict] = []

    async def run(self, **kwargs) -> AgentLoopOutput:
        EchoAgentLoop.seen_fields.append(kwargs)
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        prompt_ids = self.checked_prompt(self.context.chat.render_ids(messages, None, add_generation_prompt=True))
        ids = self.tokenizer.encode("echo", add_special_tokens=False)
        messages.append({"role": "assistant", "content": "echo"})
        return AgentLoopOutput(prompt_ids, ids, [1] * len(ids), messages=messages, metrics={"echo_rows": 1.0})
