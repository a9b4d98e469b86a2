"""The ``key=value`` Hydra overrides written in a recipe's shell script, with its shell variables filled in."""

from __future__ import annotations

import re

_OVERRIDE = re.compile(r'([a-z_][a-z0-9_]*\.[a-z0-9_.]+)=("?[^"\s]+"?)')


def script_overrides(path: str, variables: dict) -> list[str]:
    """One ``key=value`` per script line that holds a dotted key; ``$NAME`` replaced from ``variables``."""
    overrides = []
    with open(path) as f:
        for line in f:
            text = line.strip().replace('"$@"', "").replace("$@", "").rstrip("\\").strip()
            match = _OVERRIDE.fullmatch(text)
            if match:
                value = match.group(2).replace('"', "")
                for name, replacement in sorted(variables.items(), key=lambda kv: -len(kv[0])):
                    value = value.replace(f"${name}", str(replacement))
                overrides.append(f"{match.group(1)}={value}")
    return overrides
