"""The FSDP engine's optimizer: torch's fused AdamW kernel on CPU, the same update as the per-tensor loop."""

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
