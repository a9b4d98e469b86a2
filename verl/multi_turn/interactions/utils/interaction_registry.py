"""Reading verl's interaction config file: ``interaction: [{class_name, config}]`` (YAML or JSON)."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from verl.utils.import_utils import load_class_by_name


def load_interaction_entries(interaction_config_file: str) -> list[dict]:
    """The ``interaction`` entries of the file as plain dicts, checked for shape (nothing is built)."""
    if not interaction_config_file or not os.path.isfile(interaction_config_file):
        raise FileNotFoundError(f"multi_turn.interaction_config_path: no such file {interaction_config_file!r}")
    raw = OmegaConf.to_container(OmegaConf.load(interaction_config_file), resolve=True)
    entries = raw.get("interaction") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{interaction_config_file}: expected a non-empty top-level 'interaction' list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{interaction_config_file}: interaction[{i}] needs a 'class_name' (module.Class)")
    return entries


def initialize_interaction_from_config(interaction_config_file: str):
    """Construct the file's first interaction as ``cls(config=dict)`` (verl uses the first entry)."""
    entry = load_interaction_entries(interaction_config_file)[0]
    cls = load_class_by_name(entry["class_name"], f"{interaction_config_file}: interaction[0].class_name")
    config = dict(entry.get("config") or {})
    if "name" in entry:  # verl >= 0.5 names the interaction on the entry; rows pick it by that name
        config.setdefault("name", entry["name"])
    return cls(config=config)
