"""The FSDP engine's optimizer: torch's fused AdamW kernel on CPU, the same update as the per-tensor loop."""

import math

import pytest
import torch

from verl.trainer.config import OptimConfig
from verl.workers.engine.fsdp.setup import build_optimizer, cpu_fused_adamw


def _module(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def test_cpu_parameters_get_the_fused_kernel_and_the_same_update_as_the_loop():
    fused_model, loop_model = _module(0), _module(0)
    config = OptimConfig(lr=1e-2, weight_decay=0.01, betas=[0.9, 0.999])
    fused, _ = build_optimizer(fused_model, config)
    loop = torch.optim.AdamW(loop_model.parameters(), lr=1e-2, weight_decay=0.01, betas=(0.9, 0.999), foreach=False)
    assert fused.param_groups[0]["fused"] is True
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        for model, optimizer in ((fused_model, fused), (loop_model, loop)):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    for got, want in zip(fused_model.parameters(), loop_model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    moved = [not torch.equal(a, b) for a, b in zip(fused_model.parameters(), _module(0).parameters(), strict=True)]
    assert all(moved)


def test_parameters_the_fused_kernel_cannot_take_keep_torchs_choice():
    assert cpu_fused_adamw([]) == {}
    assert cpu_fused_adamw([torch.nn.Parameter(torch.zeros(2, device="meta"))]) == {}
    assert cpu_fused_adamw([torch.nn.Parameter(torch.zeros(2))]) == {"fused": True}


def _lr_factors(optim_config: OptimConfig, steps: int) -> list[float]:
    optimizer, scheduler = build_optimizer(_module(0), optim_config)
    factors = []
    for _ in range(steps):
        factors.append(optimizer.param_groups[0]["lr"] / optim_config.lr)
        optimizer.step()
        scheduler.step()
    return factors


def test_optimizer_class_and_its_extra_arguments_come_from_the_config():
    """optim.optimizer / optimizer_impl name the class (betas go to the Adam family only);
    override_optimizer_config adds constructor arguments."""
    sgd, _ = build_optimizer(
        _module(0),
        OptimConfig(lr=0.1, optimizer="SGD", optimizer_impl="torch.optim", override_optimizer_config={"momentum": 0.9}),
    )
    assert type(sgd) is torch.optim.SGD and "betas" not in sgd.defaults
    assert (sgd.defaults["momentum"], sgd.defaults["weight_decay"]) == (0.9, 0.01)
    adam, _ = build_optimizer(_module(0), OptimConfig(optimizer="Adam", override_optimizer_config={"eps": 1e-5}))
    assert type(adam) is torch.optim.Adam and (adam.defaults["eps"], adam.defaults["betas"]) == (1e-5, (0.9, 0.999))


def test_lr_scheduler_type_and_its_older_name_give_one_schedule():
    cosine = dict(lr=1.0, total_training_steps=4, lr_warmup_steps=0, min_lr_ratio=0.0)
    by_new_name = _lr_factors(OptimConfig(lr_scheduler_type="cosine", **cosine), 5)
    assert by_new_name == pytest.approx([1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 - math.cos(math.pi / 4)) / 2, 0])
    assert _lr_factors(OptimConfig(warmup_style="cosine", **cosine), 5) == by_new_name
    # counted from 1: each factor is the next step's
    one_indexed = _lr_factors(OptimConfig(lr_scheduler_type="cosine", zero_indexed_step=False, **cosine), 4)
    assert one_indexed == pytest.approx(by_new_name[1:])
    assert _lr_factors(OptimConfig(lr=1.0), 3) == [1.0, 1.0, 1.0]
