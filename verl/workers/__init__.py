"""Engines: actors, critics, rollouts, sharding managers, reward managers and the Ray workers composing them."""
