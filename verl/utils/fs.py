"""Resolve model and data paths to local files: local paths pass through, hdfs:// paths are copied to a cache, and
with ``VERL_USE_MODELSCOPE=true`` a model id (``owner/name``) resolves to its copy in ModelScope's local cache."""

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


def use_modelscope() -> bool:
    """True when ``VERL_USE_MODELSCOPE`` is ``true`` (any case): model ids resolve through ModelScope."""
    return os.environ.get("VERL_USE_MODELSCOPE", "false").lower() == "true"


def _modelscope_cache_roots() -> list[str]:
    """Where ModelScope keeps downloaded models: ``$MODELSCOPE_CACHE`` (and its ``hub/``) or ~/.cache/modelscope/hub."""
    root = os.environ.get("MODELSCOPE_CACHE")
    if root:
        return [root, os.path.join(root, "hub")]
    return [os.path.join(os.path.expanduser("~"), ".cache", "modelscope", "hub")]


def resolve_modelscope_model(model_id: str) -> str:
    """The local folder of ModelScope model ``model_id`` (``owner/name``), read from ModelScope's cache.

    Releases of modelscope lay their cache out as ``<root>/models/<owner>/<name>`` or ``<root>/<owner>/<name>``, older
    ones spelling each ``.`` of the name as ``___``. Without a cached copy the ``modelscope`` package, if installed,
    downloads it (``snapshot_download``); modelscope is imported only then.
    """
    owner, _, name = model_id.partition("/")
    names = [name, name.replace(".", "___")]
    candidates = [
        os.path.join(r, sub, owner, n) for r in _modelscope_cache_roots() for sub in ("models", "") for n in names
    ]
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "config.json")):
            return candidate
    try:
        from modelscope import snapshot_download
    except ImportError as exc:
        raise FileNotFoundError(
            f"VERL_USE_MODELSCOPE=true: model {model_id!r} is not in ModelScope's cache (looked in {candidates}) and "
            "the modelscope package is not installed to download it: pip install modelscope, or set MODELSCOPE_CACHE "
            "to the cache that holds it"
        ) from exc
    return snapshot_download(model_id)


def is_model_id(path: str) -> bool:
    """``owner/name`` that is not an existing path: a hub model id."""
    return not path.startswith(("/", ".", "~")) and path.count("/") == 1 and not os.path.exists(path)


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
    if use_modelscope() and is_model_id(src):
        src = resolve_modelscope_model(src)
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
