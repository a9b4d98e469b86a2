"""Interfaces that verl marks experimental (they may still change): the agent loops of ``rollout.mode=async``."""
