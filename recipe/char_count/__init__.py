"""char_count: a tutorial recipe (SFT, then GRPO with its own reward function) that runs on CPU in minutes."""
