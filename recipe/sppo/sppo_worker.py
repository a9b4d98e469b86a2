"""The SPPO actor / rollout / reference worker: the stock FSDP worker, in a module that registers the SPPO loss.

The actor looks its loss up by name (``policy_loss.loss_mode=sppo``) in the process that runs it. A Ray worker
imports the module of its class, so naming this class in the trainer's role mapping is what makes ``sppo`` a
registered loss inside every worker process.
"""

from __future__ import annotations

from recipe.sppo import sppo_core  # noqa: F401  (registers the "sppo" policy loss in this process)
from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

__all__ = ["SPPOActorRolloutRefWorker"]


class SPPOActorRolloutRefWorker(ActorRolloutRefWorker):
    """``ActorRolloutRefWorker`` whose process has the ``sppo`` policy loss registered."""
