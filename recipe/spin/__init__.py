"""SPIN (self-play fine-tuning) as online DPO: ``python -m recipe.spin.main_spin``; see recipe/spin/README.md."""
