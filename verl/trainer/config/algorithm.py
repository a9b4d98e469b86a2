"""`algorithm`: advantage estimation and the in-reward KL penalty."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.base_config import BaseConfig

__all__ = ["AlgoConfig", "KLControlConfig", "PFPPOConfig"]


@dataclass
class KLControlConfig(BaseConfig):
    """`algorithm.kl_ctrl`: the coefficient of the in-reward KL (fixed, or adaptive towards `target_kl`)."""

    type: str = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1


@dataclass
class PFPPOConfig(BaseConfig):
    """`algorithm.pf_ppo`: preference-feedback PPO's reweighting."""

    reweight_method: str = "pow"
    weight_pow: float = 2.0


@dataclass
class AlgoConfig(BaseConfig):
    """`algorithm`."""

    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: str = "grpo"
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    use_pf_ppo: bool = False
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)
