"""DAPO: GRPO with dynamic sampling (group filtering), clip-higher, token-mean loss and overlong reward shaping.

``python -m recipe.dapo.main_dapo`` with verl's Hydra overrides; ``RayDAPOTrainer`` for use from Python.
"""
