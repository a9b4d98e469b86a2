"""verl-compatible RL post-training library for LLMs (single-controller, HybridFlow design)."""

from pathlib import Path

from verl.protocol import DataProto
from verl.utils.logging_utils import set_basic_config

__version__ = (Path(__file__).parent / "version" / "version").read_text().strip()

set_basic_config()

# VERL_USE_MODELSCOPE=true: model ids resolve through ModelScope's local cache (verl.utils.fs.copy_to_local); the
# modelscope package is needed, and imported, only to download a model that is not cached.

__all__ = ["DataProto", "__version__"]
