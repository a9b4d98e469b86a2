"""Conversions between OmegaConf configs and typed dataclasses."""

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf


def omega_conf_to_dataclass(config: DictConfig | dict, dataclass_type: type | None = None) -> Any:
    """Build ``dataclass_type`` from a config section.

    Without ``dataclass_type`` the section's ``_target_`` names the class (Hydra's instantiate). Keys the dataclass
    does not declare raise a TypeError naming them, so a typo in a config is reported instead of ignored.
    """
    if dataclass_type is None:
        from hydra.utils import instantiate

        assert "_target_" in config, "omega_conf_to_dataclass: config has no '_target_' and no dataclass_type given"
        return instantiate(config, _convert_="partial")
    if not dataclasses.is_dataclass(dataclass_type):
        raise TypeError(f"omega_conf_to_dataclass: {dataclass_type} is not a dataclass")
    values = OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else dict(config)
    values.pop("_target_", None)
    known = {f.name for f in dataclasses.fields(dataclass_type)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"{dataclass_type.__name__} has no field(s) {unknown}; known fields: {sorted(known)}")
    return dataclass_type(**values)


def update_dict_with_config(dictionary: dict, config: DictConfig) -> None:
    """Overwrite the keys of ``dictionary`` that ``config`` also has."""
    for key in dictionary:
        if hasattr(config, key):
            dictionary[key] = getattr(config, key)
