"""The entropy mechanism recipe: Clip-Cov / KL-Cov policy losses on DAPO's trainer (dynamic sampling, overlong
shaping). ``python -m recipe.entropy.main_entropy`` with verl's Hydra overrides."""
