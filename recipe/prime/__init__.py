"""PRIME: PPO with an online implicit process reward model (``python -m recipe.prime.main_prime``)."""
