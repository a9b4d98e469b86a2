"""SPPO (Self-Play Preference Optimization): ``python -m recipe.sppo.main_sppo`` (config ``sppo_trainer.yaml``).

Importing the package registers the ``sppo`` policy loss (``actor.policy_loss.loss_mode=sppo``).
"""

from recipe.sppo import sppo_core  # noqa: F401  (registers the loss)
