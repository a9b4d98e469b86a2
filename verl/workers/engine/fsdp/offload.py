"""Offloading a trained FSDP model's parameters and optimizer state to host memory between calls."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from verl.utils.device import get_device_name
from verl.utils.fsdp_utils import (
    load_fsdp_model_to_gpu,
    load_fsdp_optimizer,
    offload_fsdp_model_to_cpu,
    offload_fsdp_optimizer,
)

__all__ = ["OffloadGuard"]


class OffloadGuard:
    """Where a trained model's parameters and optimizer state live between calls (``fsdp_config.param_offload`` /
    ``optimizer_offload``): offloaded to host memory after start-up, brought back for the length of a call."""

    def __init__(self, offload_param: bool, offload_optimizer: bool) -> None:
        self.offload_param = offload_param
        self.offload_optimizer = offload_optimizer
        self.module = self.optimizer = None

    def attach(self, module, optimizer=None) -> None:
        """Guard ``module`` (and ``optimizer``) and offload them now, as configured."""
        self.module, self.optimizer = module, optimizer
        if self.offload_param:
            offload_fsdp_model_to_cpu(module)
        self.offload_optimizer_state()

    def offload_optimizer_state(self) -> None:
        if self.optimizer is not None and self.offload_optimizer:
            offload_fsdp_optimizer(self.optimizer)

    @contextmanager
    def resident(self, with_optimizer: bool = False):
        """The model (and, ``with_optimizer``, its optimizer state) on the device for the block."""
        optimizer = self.optimizer if with_optimizer and self.offload_optimizer else None
        if self.offload_param:
            load_fsdp_model_to_gpu(self.module)
        if optimizer is not None:
            load_fsdp_optimizer(optimizer, torch.device(get_device_name()))
        try:
            yield
        finally:
            if self.offload_param:
                offload_fsdp_model_to_cpu(self.module)
            if optimizer is not None:
                offload_fsdp_optimizer(optimizer)
