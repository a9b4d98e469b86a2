"""verl-compatible RL post-training library for LLMs (single-controller, HybridFlow design)."""

import logging
import os
from pathlib import Path

from verl.protocol import DataProto

__version__ = (Path(__file__).parent / "version" / "version").read_text().strip()

# Library code logs at WARNING unless the user asks for more (VERL_LOGGING_LEVEL=INFO, DEBUG, ...).
logging.basicConfig(level=os.environ.get("VERL_LOGGING_LEVEL", "WARNING").upper())

if os.environ.get("VERL_USE_MODELSCOPE", "false").lower() == "true":
    import importlib.util

    if importlib.util.find_spec("modelscope") is None:
        raise ImportError("VERL_USE_MODELSCOPE=true needs the modelscope package: pip install modelscope")

__all__ = ["DataProto", "__version__"]
