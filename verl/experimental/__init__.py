"""Interfaces that verl marks experimental (they may still change). ``verl.experimental.agent_loop`` is verl's path
of the agent loops, which live in ``verl.multi_turn.agent_loop``."""
