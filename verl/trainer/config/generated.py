"""The flat reference files `_generated_<name>.yaml`: what Hydra composes from a config's defaults list, written out
with each key's comment from the file that set it.

The per-component files (`actor/`, `rollout/`, `engine/`, ...) are where keys and defaults are written; a reader who
wants the whole tree of one config in one place reads the generated file. A test regenerates it and compares, so it
never drifts from the sources. Regenerate after editing a config file:

    python -m verl.trainer.config.generated
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from omegaconf import OmegaConf

CONFIG_DIR = os.path.dirname(os.path.abspath(__file__))
GENERATED = ("ppo_trainer", "ppo_megatron_trainer")
_KEY = re.compile(r"^( *)([A-Za-z0-9_\-]+):(.*)$")
_ENTRY = re.compile(r"^(override\s+)?([A-Za-z0-9_./]+?)(?:@([A-Za-z0-9_.]+))?(?::\s*(\S+))?$")


@dataclass
class _Source:
    """One key as a file writes it: the comment lines above it and the text after the colon."""

    comments: list[str]
    value: str
    tail: list[str] = field(default_factory=list)


def _read_sources(path: str) -> tuple[dict[str, _Source], list[str]]:
    """Every key of one YAML file by its dotted path (relative to the file's package), and its defaults entries."""
    sources: dict[str, _Source] = {}
    defaults: list[str] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    in_defaults = False
    last: _Source | None = None
    last_indent = 0
    with open(path) as f:
        for line in f.read().splitlines():
            text = line.strip()
            if not text:  # a comment belongs to the key right below it; a blank line ends a file's header
                pending = []
                continue
            if text.startswith("#"):
                if not text.startswith("# @package"):
                    pending.append(text)
                continue
            match = _KEY.match(line)
            if match and not text.startswith("- "):
                indent, key = len(match.group(1)), match.group(2)
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                in_defaults = indent == 0 and key == "defaults"
                dotted = ".".join([k for _, k in stack] + [key])
                last, last_indent = _Source(pending, match.group(3)), indent
                if not in_defaults:
                    sources[dotted] = last
                stack.append((indent, key))
                pending = []
            elif in_defaults and text.startswith("- "):
                defaults.append(text[2:].strip())
                pending = []
            elif last is not None:  # a block list item or a continued value
                last.tail.append(line[last_indent:])
    return sources, defaults


def _join(package: str, key: str) -> str:
    return f"{package}.{key}" if package and key else package or key


def _walk(
    directory: str, name: str, package: str, choices: dict[str, str], out: dict[str, _Source], primary: bool
) -> None:
    """Apply one config file and its defaults list in Hydra's order, the last writer of a key winning."""
    sources, defaults = _read_sources(os.path.join(directory, f"{name}.yaml"))
    if primary:  # group choices first, so `${model_engine}` and `override` resolve as Hydra resolves them
        for entry in defaults:
            match = _ENTRY.match(entry)
            if match and match.group(4) and (match.group(1) or match.group(2) not in choices):
                choices[match.group(2)] = match.group(4)
    self_done = False
    for entry in defaults:
        if entry == "_self_":
            _apply(sources, package, out)
            self_done = True
            continue
        match = _ENTRY.match(entry)
        if match is None or match.group(1):
            continue
        group, at, option = match.group(2), match.group(3), match.group(4)
        if option is None:  # a config of the same folder, same package
            _walk(directory, group, package, choices, out, primary)
            continue
        option = re.sub(r"\$\{(\w+)\}", lambda m: choices[m.group(1)], choices.get(group, option))
        target_dir = os.path.normpath(os.path.join(directory, group))
        target_package = _join(package, at if at is not None else group.split("/")[-1])
        with open(os.path.join(target_dir, f"{option}.yaml")) as f:
            if f.readline().startswith("# @package _global_"):
                target_package = ""
        if target_package and target_package != package and target_package not in out:
            relative = os.path.relpath(os.path.join(target_dir, f"{option}.yaml"), CONFIG_DIR)
            out[target_package] = _Source([f"# Composed from {relative} (see its comments)."], "")
        _walk(target_dir, option, target_package, choices, out, False)
    if not self_done:
        _apply(sources, package, out)


def _apply(sources: dict[str, _Source], package: str, out: dict[str, _Source]) -> None:
    for key, source in sources.items():
        full = _join(package, key)
        previous = out.get(full)
        if previous is not None and not source.comments:
            source = _Source(previous.comments, source.value, source.tail)
        out[full] = source


def render(name: str) -> str:
    """The flat file for config `name`: Hydra's composition, each key with its comment from the file that set it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        composed = OmegaConf.to_container(compose(config_name=name), resolve=False)
    sources: dict[str, _Source] = {}
    _walk(CONFIG_DIR, name, "", {}, sources, True)
    lines = [
        f"# Generated by `python -m verl.trainer.config.generated` from {name}.yaml and the files its defaults list",
        "# names; do not edit (edit those files, then regenerate). The whole composed tree in one place.",
        "",
    ]

    def emit(node: dict, prefix: str, indent: int) -> None:
        for key, value in node.items():
            path = _join(prefix, str(key))
            source = sources.get(path)
            if source is None:
                raise KeyError(f"{path}: composed by Hydra but written by no file that {name}.yaml names")
            pad = " " * indent
            lines.extend(pad + c for c in source.comments)
            if isinstance(value, dict) and value:
                lines.append(f"{pad}{key}:")
                lines.append("")
                emit(value, path, indent + 2)
            else:
                lines.append(f"{pad}{key}:{source.value}")
                lines.extend(pad + t for t in source.tail)
                lines.append("")

    emit(composed, "", 0)
    return "\n".join(lines).rstrip() + "\n"


def generated_path(name: str) -> str:
    return os.path.join(CONFIG_DIR, f"_generated_{name}.yaml")


def main() -> None:
    for name in GENERATED:
        with open(generated_path(name), "w") as f:
            f.write(render(name))
        print(f"wrote {generated_path(name)}")


if __name__ == "__main__":
    main()
