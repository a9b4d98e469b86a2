"""calc_tool: an agentic recipe (SFT, then multi-turn GRPO with a calculator tool) that learns on CPU in minutes."""
