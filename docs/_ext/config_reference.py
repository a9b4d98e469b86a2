"""The config reference, generated from ``verl/trainer/config/*.yaml`` at build time so it cannot drift.

Every key of a YAML becomes a row (dotted key, default as written in the YAML, meaning) and the meaning is the
comment block directly above the key. The key tree comes from OmegaConf, the comments from a line scan of the same
file; a key that one sees and the other does not is an error, so a YAML the scan cannot read fails the build.

As a Sphinx extension it writes ``docs/generated/config_<name>.md`` on ``builder-inited`` (before Sphinx reads the
sources); ``python docs/_ext/config_reference.py ppo_trainer`` prints one page.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[2] / "verl" / "trainer" / "config"
GENERATED_DIR = Path(__file__).resolve().parents[1] / "generated"

# (yaml name, page title, who reads it); the order of the pages in the reference
CONFIGS = (
    ("ppo_trainer", "PPO trainer (ppo_trainer.yaml)", "`python -m verl.trainer.main_ppo` and `RayPPOTrainer`"),
    ("sft_trainer", "SFT trainer (sft_trainer.yaml)", "`torchrun -m verl.trainer.fsdp_sft_trainer`"),
    ("generation", "Offline generation (generation.yaml)", "`python -m verl.trainer.main_generation`"),
    ("evaluation", "Offline evaluation (evaluation.yaml)", "`python -m verl.trainer.main_eval`"),
)

_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.\-]*):(?P<value>.*)$")


@dataclass
class Entry:
    """One key of a YAML: its dotted path, the default as written, the comment above it, and whether it is a section."""

    key: str
    default: str
    meaning: str
    is_section: bool

    @property
    def depth(self) -> int:
        return self.key.count(".") + 1


def scan_yaml(path: Path) -> list[Entry]:
    """Every key line of ``path`` in file order, with the comment block directly above it (no blank line between)."""
    lines = path.read_text().splitlines()
    entries: list[Entry] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the open sections
    for number, line in enumerate(lines):
        match = _KEY_LINE.match(line)
        if match is None:
            continue
        indent, key, value = len(match["indent"]), match["key"], match["value"].strip()
        if value.startswith("#"):
            value = ""
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        comment: list[str] = []
        above = number - 1
        while above >= 0 and lines[above].strip().startswith("#"):
            comment.insert(0, lines[above].strip().lstrip("#").strip())
            above -= 1
        nxt = next((ln for ln in lines[number + 1 :] if ln.strip() and not ln.strip().startswith("#")), "")
        is_section = value == "" and (len(nxt) - len(nxt.lstrip())) > indent and not nxt.strip().startswith("-")
        if is_section:
            stack.append((indent, key))
        entries.append(Entry(dotted, "" if is_section else (value or "null"), " ".join(comment), is_section))
    return entries


def leaf_keys(tree, prefix: str = "") -> list[str]:
    """Dotted leaf keys of a nested mapping (an empty mapping is a leaf, as Hydra overrides see it)."""
    out = []
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.extend(leaf_keys(value, path))
        else:
            out.append(path)
    return out


def config_file(name: str, config_dir: Path = CONFIG_DIR) -> Path:
    """The file that holds config ``name``'s whole tree: ``_generated_<name>.yaml`` for a config composed from a
    defaults list (verl/trainer/config/generated.py writes it), else ``<name>.yaml`` itself."""
    generated = config_dir / f"_generated_{name}.yaml"
    return generated if generated.exists() else config_dir / f"{name}.yaml"


def config_entries(name: str, config_dir: Path = CONFIG_DIR) -> list[Entry]:
    """The entries of config ``name`` (:func:`config_file`), checked against the key tree OmegaConf loads from it."""
    from omegaconf import OmegaConf

    path = config_file(name, config_dir)
    entries = [e for e in scan_yaml(path) if e.key != "defaults"]
    tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    tree.pop("defaults", None)
    loaded = set(leaf_keys(tree))
    scanned = {e.key for e in entries if not e.is_section}
    if loaded != scanned:
        raise ValueError(
            f"{path}: the line scan and OmegaConf disagree on the keys; only loaded: {sorted(loaded - scanned)}, "
            f"only scanned: {sorted(scanned - loaded)}"
        )
    return entries


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _row(key: str, default: str, meaning: str) -> list[str]:
    return [f"* - {key}", f"  - {default}", f"  - {meaning or '(no comment in the YAML)'}"]


_TABLE_HEAD = ["```{list-table}", ":header-rows: 1", ":widths: 38 22 40", ":class: config-table", ""]


def render_markdown(name: str, title: str, reader: str, entries: list[Entry]) -> str:
    """One MyST page: a heading per top-level and second-level section, a table of its keys under it."""
    out = [
        f"# {title}",
        "",
        f"Generated from `verl/trainer/config/{config_file(name).name}` when the documentation is built; "
        f"read by {reader}. "
        "Defaults are shown as the YAML writes them (`${...}` follows another key). Override a key as "
        "`a.b.c=value`; a key that is not listed needs `+a.b.c=value`.",
        "",
    ]
    rows: list[str] = []

    def flush():
        if rows:
            out.extend(_TABLE_HEAD + _row("key", "default", "meaning") + rows + ["```", ""])
            rows.clear()

    top_level_leaves = [e for e in entries if e.depth == 1 and not e.is_section]
    if top_level_leaves:
        out.extend(["## Top-level keys", ""])
        for e in top_level_leaves:
            rows.extend(_row(_code(e.key), _code(e.default), e.meaning))
        flush()
    for e in entries:
        if e.depth == 1 and not e.is_section:
            continue
        if e.is_section and e.depth <= 2:
            flush()
            out.extend([f"{'#' * (e.depth + 1)} `{e.key}`", ""])
            if e.meaning:
                out.extend([e.meaning, ""])
            continue
        default = "*(section)*" if e.is_section else _code(e.default)
        rows.extend(_row(_code(e.key), default, e.meaning))
    flush()
    return "\n".join(out)


def write_pages(out_dir: Path = GENERATED_DIR) -> list[Path]:
    """Write ``config_<name>.md`` for every config into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, title, reader in CONFIGS:
        page = out_dir / f"config_{name}.md"
        text = render_markdown(name, title, reader, config_entries(name))
        # rewrite only on change, so an incremental build does not re-read unchanged pages
        if not page.exists() or page.read_text() != text:
            page.write_text(text)
        written.append(page)
    return written


def _on_builder_inited(app) -> None:
    write_pages()


def setup(app):
    """Sphinx entry point."""
    app.connect("builder-inited", _on_builder_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    wanted = sys.argv[1] if len(sys.argv) > 1 else "ppo_trainer"
    for _name, _title, _reader in CONFIGS:
        if _name == wanted:
            print(render_markdown(_name, _title, _reader, config_entries(_name)))
