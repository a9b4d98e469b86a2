"""Algorithms built on the trainer's layers (DAPO, PRIME, SPPO, ...): each recipe subclasses RayPPOTrainer or
registers estimators / losses instead of copying the trainer."""
