"""Engines and role workers: training engines (``engine``), the PPO actor and critic over them, rollouts, weight
hand-off (``sharding_manager``), reward managers, and the role workers (``roles``) that the trainer drives."""
