"""One-step off-policy training: the rollout generates batch k+1 on a pool of its own while batch k trains.

``python -m recipe.one_step_off_policy.main_ppo`` with verl's Hydra overrides; ``OneStepOffRayTrainer`` for use from
Python. See docs/one_step_off_policy.md.
"""
