"""The driver's side of a standalone rollout's weights: the actor group sends, the rollout group receives.

With ``actor_rollout_ref.hybrid_engine=False`` the rollout runs on a resource pool of its own, so the actor's weights
reach it through the checkpoint engine (``verl/checkpoint_engine/``): a transfer group of the actor's rank 0 (the
sender, transfer rank 0) and every rollout rank (transfer ranks 1..n). Both sides of a collective must be called at
once, and a worker-group call waits for its workers, so the two calls run in threads of the driver. In-process
worker groups (every worker in the driver) use the checkpoint engine's ``local`` transport instead, whose calls run
one after the other: the actor's first, then the rollout's.
"""

from __future__ import annotations

import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, is_dataclass

__all__ = ["WeightSync", "call_together", "resolve_result"]

# the local transport's mailbox is named by the rendezvous address: one per WeightSync of this process, so a second
# trainer in the same process (a test comparing two trainers) does not join the first one's transfer group
_LOCAL_GROUPS = itertools.count(1)


def resolve_result(value):
    """The value of a worker-group call, waiting for it if the method was registered non-blocking."""
    from verl.protocol import DataProtoFuture

    if isinstance(value, DataProtoFuture):
        return value.get()
    if callable(getattr(value, "wait", None)):  # a non-blocking call under the watchdog: waits within its deadline
        return value.wait()
    if isinstance(value, list) and value and type(value[0]).__name__ == "ObjectRef":
        import ray

        return ray.get(value)
    return value


def call_together(*calls):
    """Run worker-group calls at the same time (both sides of one collective); their results, in order."""
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="weight-sync") as pool:
        futures = [pool.submit(lambda c=call: resolve_result(c())) for call in calls]
        return [future.result() for future in futures]


def _as_dict(stats) -> dict:
    if is_dataclass(stats):
        return asdict(stats)
    return dict(stats)


class WeightSync:
    """Versioned weight transfers from ``actor_wg`` to ``rollout_wg``; ``version`` is the rollout's current one
    (None before the first transfer) and ``history`` holds every transfer's stats."""

    def __init__(self, actor_wg, rollout_wg):
        self.actor_wg, self.rollout_wg = actor_wg, rollout_wg
        self.version: int | None = None
        self.history: list[dict] = []
        from verl.single_controller.inprocess import InProcessWorkerGroup

        self._in_process = isinstance(actor_wg, InProcessWorkerGroup)
        backend = "local" if self._in_process else None  # None: rollout.checkpoint_engine.backend
        # the sender, actor rank 0, hosts the rendezvous (the local transport needs none)
        addr, port = ("127.0.0.1", next(_LOCAL_GROUPS)) if self._in_process else actor_wg.checkpoint_engine_address()[0]
        world_size = 1 + rollout_wg.world_size  # the sender and every rollout rank
        self._call(
            lambda: actor_wg.init_checkpoint_engine(addr, port, world_size, 0, backend=backend),
            lambda: rollout_wg.init_checkpoint_engine(addr, port, world_size, 1, backend=backend),
        )

    def _call(self, actor_call, rollout_call):
        if self._in_process:  # the local transport: the sender's call leaves the buckets, the receiver's reads them
            return [resolve_result(actor_call()), resolve_result(rollout_call())]
        return call_together(actor_call, rollout_call)

    def send(self, version: int) -> dict:
        """Send the actor's current weights as ``version``; the transfer's stats (``version``, ``bytes``,
        ``seconds``, ``buckets``, ... as the sender measured them, plus the driver's ``wall_seconds``)."""
        start = time.perf_counter()
        try:
            sent, _ = self._call(lambda: self.actor_wg.send_weights(version), self.rollout_wg.receive_weights)
        except Exception as exc:
            # a dead worker on one side shows on the other as a broken collective: name the one that died
            lost = self._lost_worker(exc)
            if lost is None:
                raise
            raise lost from exc
        wall = time.perf_counter() - start
        per_rank = [_as_dict(s) for s in (sent if isinstance(sent, list) else [sent]) if s]
        stats = max(per_rank, key=lambda s: s.get("bytes", 0)) if per_rank else {"version": version}
        stats["wall_seconds"] = wall
        self.version = version
        self.history.append(stats)
        return stats

    def _lost_worker(self, error: Exception) -> Exception | None:
        """A ``WorkerLostError`` naming the rollout's or the actor's worker that is dead after a failed transfer (Ray
        groups: each worker is pinged, 10 s at most), or None when every worker answers."""
        for group, phase in ((self.rollout_wg, "receive_weights"), (self.actor_wg, "send_weights")):
            if not hasattr(group, "_worker_lost"):  # in-process groups: nothing can die apart from the driver
                continue
            import ray

            pings = [worker.__ray_ready__.remote() for worker in group.workers]
            ready, _ = ray.wait(pings, num_returns=len(pings), timeout=10)
            for ping in ready:
                try:
                    ray.get(ping)
                except ray.exceptions.RayActorError as died:
                    return group._worker_lost(phase, died)
        return None

    def send_if_behind(self, version: int) -> dict | None:
        """Send ``version`` unless the rollout has it already."""
        return None if self.version == version else self.send(version)
