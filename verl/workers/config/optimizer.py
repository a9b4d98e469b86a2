"""A role's optimizer block (`optim`, optim/fsdp.yaml): the optimizer class (AdamW by default) and its learning-rate
schedule."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.workers.config.aliases import unify

__all__ = ["CriticOptimConfig", "FSDPOptimizerConfig", "McoreOptimizerConfig", "OptimConfig"]


@dataclass
class OptimConfig(BaseConfig):
    """`actor.optim`: the optimizer (`optimizer_impl`.`optimizer`, AdamW by default) and its learning-rate schedule.

    `lr_scheduler_type` (verl 0.9) and `warmup_style` (its older name) are one setting: see `aliases.unify`.
    `clip_grad` is the role's `grad_clip` (the role section unifies the two)."""

    lr: float = 1e-6
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    min_lr_ratio: float | None = 0.0
    num_cycles: float = 0.5
    warmup_style: str | None = "constant"
    total_training_steps: int = -1
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    optimizer: str = "AdamW"
    optimizer_impl: str = "torch.optim"
    clip_grad: float = 1.0
    lr_scheduler_type: str = "constant"
    zero_indexed_step: bool = True
    override_optimizer_config: dict | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        # null (verl 0.9's default for the old name) means "not given"
        unify(self, "lr_scheduler_type", "warmup_style", unset=(None,))

    def warmup_steps(self) -> int:
        """`lr_warmup_steps`, or `lr_warmup_steps_ratio` of the total steps when that is negative."""
        if self.lr_warmup_steps >= 0:
            return self.lr_warmup_steps
        return int(self.lr_warmup_steps_ratio * max(self.total_training_steps, 0))


@dataclass
class CriticOptimConfig(OptimConfig):
    """`critic.optim`: as the actor's, with verl's critic defaults."""

    lr: float = 1e-5
    # null: the cosine schedule's floor is 0
    min_lr_ratio: float | None = None


# verl's names of the optimizer block (the `_target_`s of optim/fsdp.yaml and optim/megatron.yaml): one AdamW here
FSDPOptimizerConfig = OptimConfig
McoreOptimizerConfig = OptimConfig
