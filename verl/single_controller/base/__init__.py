"""Backend-independent single-controller pieces: workers, worker groups, resource pools, `@register`."""

from verl.single_controller.base.handle_group import HandleWorkerGroup
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup

__all__ = ["Worker", "WorkerGroup", "HandleWorkerGroup", "ClassWithInitArgs", "ResourcePool"]
