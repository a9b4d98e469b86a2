"""verl-compatible RL post-training library for LLMs (single-controller, HybridFlow design)."""

import logging
import os
from pathlib import Path

from verl.protocol import DataProto

__version__ = (Path(__file__).parent / "version" / "version").read_text().strip()

# Library code logs at WARNING unless the user asks for more (VERL_LOGGING_LEVEL=INFO, DEBUG, ...).
logging.basicConfig(level=os.environ.get("VERL_LOGGING_LEVEL", "WARNING").upper())

# VERL_USE_MODELSCOPE=true: model ids resolve through ModelScope's local cache (verl.utils.fs.copy_to_local); the
# modelscope package is needed, and imported, only to download a model that is not cached.

__all__ = ["DataProto", "__version__"]
