"""Checkpoint integrity: the manifest written at save time and the check made before a resume.

At publish time the completion marker (``checkpoint_complete.json``) records a manifest of every file of the
checkpoint: its size and a CRC32 of its first and last MiB (cheap on multi-GB shards, and it catches truncation
and a damaged tail, where torch's zip index lives). :func:`verify_checkpoint` checks a folder before it is loaded:

* with a manifest: every listed file is present with its size and checksum;
* always: every role folder (``actor``, ``critic``, ...) holds the model / optimizer / extra-state shard of every
  rank of the world size it was saved with (``fsdp_config.json``), and every ``.pt`` file opens as a zip archive
  (what ``torch.save`` writes) whose central directory is intact.

Checkpoints written without a manifest (verl's, or this project's before the manifest) get the second check only:
a file cut short or damaged inside is then found when its zip index no longer reads.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
import zlib

__all__ = ["CheckpointDamagedError", "build_manifest", "checkpoint_problems", "verify_checkpoint"]

MANIFEST_KEY = "files"
_EDGE_BYTES = 1 << 20
_SHARD = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")


class CheckpointDamagedError(RuntimeError):
    """A checkpoint folder that cannot be resumed from; ``path`` names the bad file (or the folder)."""

    def __init__(self, folder: str, path: str, reason: str) -> None:
        super().__init__(f"checkpoint {folder} is damaged: {path}: {reason}")
        self.folder, self.path, self.reason = folder, path, reason


def _edge_crc32(path: str, size: int) -> int:
    """CRC32 of the first and the last MiB of the file (the whole file when it is smaller than 2 MiB)."""
    with open(path, "rb") as f:
        crc = zlib.crc32(f.read(_EDGE_BYTES))
        if size > _EDGE_BYTES:
            f.seek(max(_EDGE_BYTES, size - _EDGE_BYTES))
            crc = zlib.crc32(f.read(_EDGE_BYTES), crc)
    return crc


def build_manifest(folder: str, skip: tuple[str, ...] = ()) -> dict[str, dict]:
    """``{relative path: {"size", "crc32_edges"}}`` of every file under ``folder`` except the names in ``skip``."""
    manifest = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            if name in skip:
                continue
            path = os.path.join(dirpath, name)
            size = os.path.getsize(path)
            manifest[os.path.relpath(path, folder)] = {"size": size, "crc32_edges": _edge_crc32(path, size)}
    return manifest


def _manifest_problems(folder: str, manifest: dict) -> list[tuple[str, str]]:
    problems = []
    for rel, expected in sorted(manifest.items()):
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            problems.append((path, "missing (listed in the manifest)"))
            continue
        size = os.path.getsize(path)
        if size != expected["size"]:
            problems.append((path, f"{size} bytes, the manifest says {expected['size']} (truncated or rewritten)"))
        elif "crc32_edges" in expected and _edge_crc32(path, size) != expected["crc32_edges"]:
            problems.append((path, "checksum does not match the manifest (the file was damaged after the save)"))
    return problems


def _saved_world_size(role_dir: str) -> int | None:
    path = os.path.join(role_dir, "fsdp_config.json")
    try:
        with open(path) as f:
            return int(json.load(f)["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _shard_set_problems(role_dir: str) -> list[tuple[str, str]]:
    """Every shard kind present for some rank must be present for every rank of the saved world size."""
    kinds: dict[str, set[int]] = {}
    sizes: set[int] = set()
    for name in os.listdir(role_dir):
        match = _SHARD.match(name)
        if match:
            kinds.setdefault(match.group(1), set()).add(int(match.group(3)))
            sizes.add(int(match.group(2)))
    if not kinds:
        return []
    world_size = _saved_world_size(role_dir) or max(sizes)
    problems = []
    for kind, ranks in sorted(kinds.items()):
        for rank in range(world_size):
            if rank not in ranks:
                path = os.path.join(role_dir, f"{kind}_world_size_{world_size}_rank_{rank}.pt")
                problems.append((path, f"missing: the checkpoint was saved with world_size={world_size}"))
    return problems


def _zip_problem(path: str) -> str | None:
    """Why ``path`` (a ``torch.save`` file) cannot be read, or None; reads only its central directory."""
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        return f"not a readable torch file ({type(e).__name__}: {e})"
    return None


def checkpoint_problems(folder: str, marker_name: str = "checkpoint_complete.json") -> list[tuple[str, str]]:
    """``(path, reason)`` for everything wrong with the checkpoint ``folder``; empty when it can be resumed from."""
    if not os.path.isdir(folder):
        return [(folder, "no such folder")]
    problems = []
    marker = os.path.join(folder, marker_name)
    manifest = None
    if os.path.isfile(marker):
        try:
            with open(marker) as f:
                manifest = json.load(f).get(MANIFEST_KEY)
        except (OSError, ValueError) as e:
            problems.append((marker, f"unreadable completion marker ({e})"))
    if manifest is not None:
        problems += _manifest_problems(folder, manifest)
    for name in sorted(os.listdir(folder)):
        role_dir = os.path.join(folder, name)
        if os.path.isdir(role_dir) and not name.startswith("."):
            problems += _shard_set_problems(role_dir)
    bad = {p for p, _ in problems}
    for dirpath, _dirs, files in os.walk(folder):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            if name.endswith(".pt") and path not in bad:
                reason = _zip_problem(path)
                if reason:
                    problems.append((path, reason))
    return problems


def verify_checkpoint(folder: str) -> None:
    """Raise :class:`CheckpointDamagedError` naming the first bad file of ``folder``; return when it is whole."""
    problems = checkpoint_problems(folder)
    if problems:
        path, reason = problems[0]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise CheckpointDamagedError(folder, path, reason + more)
