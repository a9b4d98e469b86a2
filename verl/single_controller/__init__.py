"""The single controller: a driver process calling groups of workers (Ray actors or in-process objects)."""

from pathlib import Path

from verl.single_controller.base import ClassWithInitArgs, ResourcePool, Worker, WorkerGroup

__version__ = (Path(__file__).parent.parent / "version" / "version").read_text().strip()

__all__ = ["Worker", "WorkerGroup", "ClassWithInitArgs", "ResourcePool"]
