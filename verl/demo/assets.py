"""``builtin://`` paths: files shipped inside the package (``verl/assets``) that the default config points at.

``python -m verl.trainer.main_ppo`` with no overrides trains the shipped model (``builtin://default_model``) on the
shipped arithmetic task (``builtin://arithmetic/train.parquet``). The config keeps those strings; the driver
swaps them for absolute paths before validating (``resolve_builtin_paths``), so every later consumer (datasets,
``copy_to_local``, workers) sees an ordinary local path. Explicit paths pass through unchanged.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["ASSET_ROOT", "BUILTIN_PREFIX", "is_builtin_path", "resolve_builtin_path", "resolve_builtin_paths"]

BUILTIN_PREFIX = "builtin://"
ASSET_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")

# How to recreate each shipped asset when an install lacks it (e.g. a wheel built without package data).
_REBUILD_HINT = {
    "arithmetic": "python examples/data_preprocess/arithmetic.py --local_dir {root}/arithmetic",
    "default_model": "python scripts/build_default_model.py",
}


def is_builtin_path(value) -> bool:
    """True when ``value`` is a string of the form ``builtin://<relative path>``."""
    return isinstance(value, str) and value.startswith(BUILTIN_PREFIX)


def resolve_builtin_path(value: str, key: str = "path") -> str:
    """The absolute path of ``builtin://<rel>`` under ``verl/assets``; any other string is returned unchanged.

    Raises FileNotFoundError (naming ``key``) when the asset is not installed, and ValueError for a path that
    leaves the asset directory.
    """
    if not is_builtin_path(value):
        return value
    relative = value[len(BUILTIN_PREFIX) :].strip("/")
    path = os.path.normpath(os.path.join(ASSET_ROOT, relative))
    if not relative or os.path.commonpath([path, ASSET_ROOT]) != ASSET_ROOT:
        raise ValueError(f"{key}={value!r}: expected builtin://<file or folder under verl/assets>")
    if not os.path.exists(path):
        hint = _REBUILD_HINT.get(relative.split("/")[0], "reinstall verl with its package data")
        raise FileNotFoundError(
            f"{key}={value!r}: the built-in asset {path} is missing; recreate it with: {hint.format(root=ASSET_ROOT)}"
        )
    return path


def _walk(node, prefix: str) -> None:
    """Replace every literal ``builtin://`` leaf below ``node`` in place (interpolations are left alone)."""
    names = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
    for name in names:
        key = f"{prefix}.{name}" if prefix else str(name)
        child = node._get_node(name)
        if isinstance(child, DictConfig | ListConfig):
            if not child._is_none() and not child._is_missing() and not child._is_interpolation():
                _walk(child, key)
        elif child is not None and not child._is_interpolation() and is_builtin_path(child._value()):
            node[name] = resolve_builtin_path(child._value(), key)


def resolve_builtin_paths(config: DictConfig) -> DictConfig:
    """Swap every ``builtin://`` value in ``config`` for its absolute path (in place; returns ``config``).

    Keys that interpolate a swapped key (e.g. ``critic.model.tokenizer_path``) follow it automatically.
    """
    readonly = OmegaConf.is_readonly(config)
    OmegaConf.set_readonly(config, False)
    try:
        _walk(config, "")
    finally:
        OmegaConf.set_readonly(config, readonly)
    return config
