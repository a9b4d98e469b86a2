"""Resolve model and data paths to local files: local paths pass through, hdfs:// paths are copied to a cache."""

import hashlib
import logging
import os
import shutil
import tempfile

from filelock import FileLock

from verl.utils.hdfs_io import copy, exists, makedirs  # noqa: F401  (tests monkeypatch fs.copy)

logger = logging.getLogger(__name__)

_HDFS_PREFIX = "hdfs://"


def is_non_local(path: str) -> bool:
    """True for paths that must be copied before use (hdfs://)."""
    return path.startswith(_HDFS_PREFIX)


def md5_encode(path: str) -> str:
    return hashlib.md5(path.encode()).hexdigest()


def get_local_temp_path(hdfs_path: str, cache_dir: str) -> str:
    """``{cache_dir}/{md5(hdfs_path)}/{basename}``: a stable cache location per remote path."""
    folder = os.path.join(cache_dir, md5_encode(hdfs_path))
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, os.path.basename(hdfs_path.rstrip("/")))


def _record_directory_structure(folder_path: str) -> str:
    record_file = os.path.join(folder_path, ".directory_record.txt")
    with open(record_file, "w") as f:
        for root, dirs, files in os.walk(folder_path):
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(root, name)
                if path != record_file:
                    f.write(os.path.relpath(path, folder_path) + "\n")
    return record_file


def _check_directory_structure(folder_path: str, record_file: str) -> bool:
    if not os.path.exists(record_file):
        return False
    with open(record_file) as f:
        recorded = set(f.read().splitlines())
    current = set()
    for root, dirs, files in os.walk(folder_path):
        for name in dirs + files:
            path = os.path.join(root, name)
            if path != record_file:
                current.add(os.path.relpath(path, folder_path))
    return recorded == current


def verify_copy(src: str, dest: str) -> bool:
    """Whether ``dest`` holds the same tree (names and sizes) as local ``src``."""
    if not os.path.exists(dest):
        return False
    if os.path.isfile(src):
        return os.path.isfile(dest) and os.path.getsize(src) == os.path.getsize(dest)
    for root, _dirs, files in os.walk(src):
        for name in files:
            s = os.path.join(root, name)
            d = os.path.join(dest, os.path.relpath(s, src))
            if not os.path.isfile(d) or os.path.getsize(s) != os.path.getsize(d):
                return False
    return True


def copy_to_shm(src: str) -> str:
    """Copy a local file or directory to ``/dev/shm/verl-cache/{md5}/`` (fast loading) and return the new path."""
    dest = os.path.join("/dev/shm/verl-cache", md5_encode(os.path.abspath(src)), os.path.basename(src.rstrip("/")))
    if verify_copy(src, dest):
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.isdir(src):
        shutil.copytree(src, dest, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dest)
    return dest


def copy_to_local(
    src: str,
    cache_dir: str | None = None,
    filelock: str = ".file.lock",
    verbose: bool = False,
    always_recopy: bool = False,
    use_shm: bool = False,
) -> str:
    """Return a local path for ``src``: local paths unchanged (or copied to shm), remote ones copied to a cache."""
    if src is None:
        return src
    if not is_non_local(src):
        if use_shm:
            return copy_to_shm(src)
        return src
    cache_dir = cache_dir or os.environ.get("VERL_CACHE_DIR") or tempfile.gettempdir()
    os.makedirs(cache_dir, exist_ok=True)
    local_path = get_local_temp_path(src, cache_dir)
    lock_path = os.path.join(cache_dir, md5_encode(src) + filelock)
    with FileLock(lock_path):
        if always_recopy and os.path.exists(local_path):
            shutil.rmtree(local_path, ignore_errors=True) if os.path.isdir(local_path) else os.remove(local_path)
        if not os.path.exists(local_path):
            if verbose:
                logger.warning("copy %s to %s", src, local_path)
            copy(src, local_path)
    if use_shm:
        return copy_to_shm(local_path)
    return local_path


def copy_local_path_from_hdfs(src: str, cache_dir=None, filelock=".file.lock", verbose=False) -> str:
    """Deprecated alias of :func:`copy_to_local` without shared-memory copies."""
    return copy_to_local(src, cache_dir=cache_dir, filelock=filelock, verbose=verbose)


def local_mkdir_safe(path: str) -> str:
    """``makedirs`` under a file lock (safe when many ranks create the same folder); returns the absolute path."""
    abs_path = os.path.abspath(path)
    lock_dir = os.path.join(tempfile.gettempdir(), "verl-mkdir-locks")
    os.makedirs(lock_dir, exist_ok=True)
    with FileLock(os.path.join(lock_dir, md5_encode(abs_path) + ".lock")):
        os.makedirs(abs_path, exist_ok=True)
    return abs_path
