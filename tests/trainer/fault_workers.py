"""A policy worker that SIGKILLs one of its ranks in a chosen phase (importable by Ray workers).

``killing_worker(phase, call, rank, stamp_file)`` returns a subclass whose rank ``rank`` kills itself on its
``call``-th call of ``phase`` (``generate_sequences`` and ``update_actor`` at the start of the call, after nothing was
computed; ``save_checkpoint`` after its shards were written, half way through the step's checkpoint), writing the
time of the kill to ``stamp_file`` first. The plan travels as class attributes (Ray pickles the dynamic subclass).
"""

import os
import signal
import time

from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker


class KillingActorRolloutRefWorker(ActorRolloutRefWorker):
    kill_phase: str | None = None
    kill_call: int = 1
    kill_rank: int = 1
    stamp_file: str | None = None

    def _count_and_maybe_die(self, phase: str) -> None:
        calls = self.__dict__.setdefault("_fault_calls", {})
        calls[phase] = calls.get(phase, 0) + 1
        if phase == self.kill_phase and calls[phase] == self.kill_call and self.rank == self.kill_rank:
            with open(self.stamp_file, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts):
        self._count_and_maybe_die("generate_sequences")
        return super().generate_sequences(prompts)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data):
        self._count_and_maybe_die("update_actor")
        return super().update_actor(data)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        result = super().save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)
        self._count_and_maybe_die("save_checkpoint")
        return result


def killing_worker(phase: str, call: int, rank: int, stamp_file: str) -> type:
    """A :class:`KillingActorRolloutRefWorker` with its plan."""
    plan = {"kill_phase": phase, "kill_call": call, "kill_rank": rank, "stamp_file": stamp_file}
    return type(f"KillIn_{phase}", (KillingActorRolloutRefWorker,), plan)
