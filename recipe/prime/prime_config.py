"""PRIME's own config keys, read once into typed settings and checked before Ray starts.

The keys (spec 05 §9) live in ``config/prime_trainer.yaml`` as extra keys of the ``data``, ``algorithm`` and
``reward_model`` sections; `check_prime_config` refuses a wrong type or an out-of-range value with a ConfigError
naming the key, the value and what is expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from verl.trainer.config import ConfigError, OptimConfig

__all__ = ["PrimeDataSettings", "PrimeRewardModelSettings", "check_prime_config", "prime_algorithm_coefs"]

UPDATE_STYLES = ("before", "after", "none")
LOSS_TYPES = ("ce", "dpo")
REF_TYPES = ("freeze",)
GRANULARITIES = ("token", "whole")
NORMS = ("batch_norm", "none")


def _get(config, key: str):
    node = config
    for part in key.split("."):
        if isinstance(node, Mapping) or hasattr(node, "__getitem__"):
            try:
                node = node[part]
                continue
            except (KeyError, AttributeError, TypeError):
                pass
        if not hasattr(node, part):
            raise ConfigError(f"{key}: missing; PRIME expects it (see recipe/prime/config/prime_trainer.yaml)")
        node = getattr(node, part)
    return node


def _number(config, key: str, low: float | None = None, high: float | None = None, low_open: bool = False) -> float:
    value = _get(config, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}={value!r} must be a number")
    too_low = low is not None and (value <= low if low_open else value < low)
    if too_low or (high is not None and value > high):
        bound = f"{'>' if low_open else '>='} {low}" if low is not None else ""
        bound += (" and " if bound and high is not None else "") + (f"<= {high}" if high is not None else "")
        raise ConfigError(f"{key}={value!r} must be {bound}")
    return float(value)


def _flag(config, key: str) -> bool:
    value = _get(config, key)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be a boolean (True or False)")
    return value


def _choice(config, key: str, choices: tuple[str, ...]) -> str:
    value = _get(config, key)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not supported; expected one of {list(choices)}")
    return value


def _positive_int(config, key: str) -> int:
    value = _get(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value!r} must be an integer >= 1")
    return value


@dataclass
class PrimeDataSettings:
    """``data.{filter_accuracy, accuracy_lower_bound, accuracy_upper_bound, oversample_factor, filter_truncate}``."""

    filter_accuracy: bool
    accuracy_lower_bound: float
    accuracy_upper_bound: float
    oversample_factor: float
    filter_truncate: bool
    train_batch_size: int
    max_response_length: int

    @classmethod
    def from_config(cls, config) -> PrimeDataSettings:
        """Read and check the ``data`` keys of a composed (or typed) PRIME config."""
        lower = _number(config, "data.accuracy_lower_bound", 0.0, 1.0)
        upper = _number(config, "data.accuracy_upper_bound", 0.0, 1.0)
        if lower > upper:
            raise ConfigError(f"data.accuracy_lower_bound={lower} must be <= data.accuracy_upper_bound={upper}")
        return cls(
            filter_accuracy=_flag(config, "data.filter_accuracy"),
            accuracy_lower_bound=lower,
            accuracy_upper_bound=upper,
            oversample_factor=_number(config, "data.oversample_factor", 1.0),
            filter_truncate=_flag(config, "data.filter_truncate"),
            train_batch_size=_positive_int(config, "data.train_batch_size"),
            max_response_length=_positive_int(config, "data.max_response_length"),
        )

    @property
    def generation_batch_size(self) -> int:
        """Prompts drawn per step: ``train_batch_size * oversample_factor``."""
        return int(self.train_batch_size * self.oversample_factor)


@dataclass
class PrimeRewardModelSettings:
    """The implicit PRM's keys: ``reward_model.model.{ref_path, update, beta_train, loss_type, ref_type, optim}``,
    ``reward_model.{prime_granularity, prime_norm, mini_batch_size}``."""

    path: str
    ref_path: str
    update: str
    beta_train: float
    loss_type: str
    ref_type: str
    granularity: str
    norm: str
    mini_batch_size: int
    optim: OptimConfig
    grad_clip: float

    @classmethod
    def from_config(cls, reward_model) -> PrimeRewardModelSettings:
        """Read and check a ``reward_model`` section (DictConfig or typed); keys are named from ``reward_model``."""
        root = {"reward_model": reward_model}
        optim_node = _get(root, "reward_model.model.optim")
        try:
            optim = OptimConfig.from_config(optim_node)
        except TypeError as exc:
            raise ConfigError(f"reward_model.model.optim: {exc}") from exc
        _number({"lr": optim.lr}, "lr", 0.0)
        grad_clip = optim.extra.get("grad_clip", 10.0)
        if isinstance(grad_clip, bool) or not isinstance(grad_clip, int | float) or grad_clip <= 0:
            raise ConfigError(f"reward_model.model.optim.grad_clip={grad_clip!r} must be a number > 0")
        path = _get(root, "reward_model.model.path")
        ref_path = _get(root, "reward_model.model.ref_path") or path
        return cls(
            path=path,
            ref_path=ref_path,
            update=_choice(root, "reward_model.model.update", UPDATE_STYLES),
            beta_train=_number(root, "reward_model.model.beta_train", 0.0, low_open=True),
            loss_type=_choice(root, "reward_model.model.loss_type", LOSS_TYPES),
            ref_type=_choice(root, "reward_model.model.ref_type", REF_TYPES),
            granularity=_choice(root, "reward_model.prime_granularity", GRANULARITIES),
            norm=_choice(root, "reward_model.prime_norm", NORMS),
            mini_batch_size=_positive_int(root, "reward_model.mini_batch_size"),
            optim=optim,
            grad_clip=float(grad_clip),
        )


def prime_algorithm_coefs(config) -> tuple[float, float]:
    """``(algorithm.reward_dpo_coef, algorithm.reward_gt_coef)``, checked to be numbers."""
    return _number(config, "algorithm.reward_dpo_coef"), _number(config, "algorithm.reward_gt_coef")


def check_prime_config(config) -> None:
    """Refuse a PRIME config whose recipe keys have a wrong type or value (ConfigError naming the key).

    Also checks what the recipe needs of the shared keys: the reward model on, no KL in the reward (the advantage
    does not read it), ``rollout.n >= 2`` (leave-one-out baselines) and a generation batch the workers split evenly.
    """
    data = PrimeDataSettings.from_config(config)
    prime_algorithm_coefs(config)
    if not _flag(config, "reward_model.enable"):
        raise ConfigError("reward_model.enable=False: PRIME trains an implicit process reward model; set it True")
    PrimeRewardModelSettings.from_config(_get(config, "reward_model"))
    if _flag(config, "algorithm.use_kl_in_reward"):
        raise ConfigError(
            "algorithm.use_kl_in_reward=True: the PRIME advantage is built from the PRM's rewards and the verifier's "
            "outcome only; regularise with actor_rollout_ref.actor.use_kl_loss=True instead"
        )
    n = _positive_int(config, "actor_rollout_ref.rollout.n")
    if n < 2:
        raise ConfigError(f"actor_rollout_ref.rollout.n={n} must be >= 2: PRIME's baselines leave one response out")
    workers = _positive_int(config, "trainer.n_gpus_per_node") * _positive_int(config, "trainer.nnodes")
    gen = data.generation_batch_size
    if gen % workers != 0:
        raise ConfigError(
            f"data.train_batch_size * data.oversample_factor = {gen} prompts per step must be divisible by the number "
            f"of workers ({workers})"
        )
