"""File-system operations on local paths and, through the `hdfs dfs` command line, on hdfs:// paths."""

import logging
import os
import shutil
import subprocess

logger = logging.getLogger(__name__)

_HDFS_PREFIX = "hdfs://"


def _is_hdfs(path: str) -> bool:
    return path.startswith(_HDFS_PREFIX)


def _hdfs(*args: str) -> int:
    if shutil.which("hdfs") is None:
        raise RuntimeError("hdfs:// paths need the `hdfs` command line on PATH")
    return subprocess.run(["hdfs", "dfs", *args], check=False).returncode


def exists(path: str, **kwargs) -> bool:
    """Whether ``path`` exists (local or hdfs://)."""
    if _is_hdfs(path):
        return _hdfs("-test", "-e", path) == 0
    return os.path.exists(path)


def makedirs(name: str, mode: int = 0o777, exist_ok: bool = False, **kwargs) -> None:
    """``os.makedirs`` for local paths, ``hdfs dfs -mkdir -p`` for hdfs:// paths."""
    if _is_hdfs(name):
        _hdfs("-mkdir", "-p", name)
    else:
        os.makedirs(name, mode=mode, exist_ok=exist_ok)


def copy(src: str, dst: str, **kwargs) -> bool:
    """Copy a file or directory; either side may be hdfs://."""
    if _is_hdfs(src) or _is_hdfs(dst):
        if _is_hdfs(src) and _is_hdfs(dst):
            return _hdfs("-cp", "-f", src, dst) == 0
        if _is_hdfs(src):
            return _hdfs("-get", src, dst) == 0
        return _hdfs("-put", "-f", src, dst) == 0
    if os.path.isdir(src):
        shutil.copytree(src, dst, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst)
    return True
