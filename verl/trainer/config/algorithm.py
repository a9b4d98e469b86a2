"""`algorithm`: advantage estimation and the in-reward KL penalty."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = ["AlgoConfig", "FilterGroupsConfig", "KLControlConfig", "PFPPOConfig", "RolloutCorrectionConfig"]


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
class FilterGroupsConfig(BaseConfig):
    """`algorithm.filter_groups` (DAPO's dynamic sampling): drop prompt groups whose `metric` has no spread and
    generate more, at most `max_num_gen_batches` dataloader batches per step (<= 0: no limit)."""

    enable: bool = False
    metric: str | None = None
    max_num_gen_batches: int = 0
    # verl 0.9: generation batches in flight at once (the DAPO trainer here runs one at a time)
    max_inflight_gen_batches: int = 1


@dataclass
class RolloutCorrectionConfig(BaseConfig):
    """`algorithm.rollout_correction` (verl >= 0.6): IS weights and rejection for the rollout-vs-training policy gap.

    `rollout_is`: null, token or sequence; `rollout_is_threshold`: truncation bound, or "lower_upper" (IcePop);
    `rollout_rs`: null or comma-separated rejection options (`verl.trainer.ppo.rollout_corr_helper.RS_OPTIONS`);
    `bypass_mode`: the rollout's log-probs serve as the old ones (no recompute); `loss_type` (bypass mode only):
    ppo_clip or reinforce. See docs/rollout_correction.md.

    verl 0.7.0's two keys, gone from 0.7.1 on, are read too: `rollout_rs_threshold_lower` (0.7.1 writes it into
    `rollout_rs_threshold` as "lower_upper"; here it means exactly that) and `rollout_token_veto_threshold` (no
    later spelling: a sequence with a token ratio below it is rejected whole).

    verl 0.6's two mode switches are read as the keys that replaced them: `bypass_old_logprob_for_rollout=True` is
    `bypass_mode=True`, `use_pure_rollout_correction=True` is `loss_type=reinforce` (the IS-weighted policy gradient
    without clipping, which 0.6 allowed in bypass mode only: checks.rollout_correction refuses it otherwise).
    """

    rollout_is: str | None = None
    rollout_is_threshold: float | str = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: float | str | None = None
    rollout_rs_threshold_lower: float | None = None
    rollout_token_veto_threshold: float | None = None
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"
    bypass_old_logprob_for_rollout: bool = False
    use_pure_rollout_correction: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        # verl 0.6's spellings set the keys every reader of this section uses
        if self.bypass_old_logprob_for_rollout:
            self.bypass_mode = True
        if self.use_pure_rollout_correction and self.loss_type == "ppo_clip":
            self.loss_type = "reinforce"


@dataclass
class AlgoConfig(BaseConfig):
    """`algorithm`."""

    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: str | None = "gae"  # null only for a recipe with its own advantage step (SPPO)
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    use_pf_ppo: bool = False
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
