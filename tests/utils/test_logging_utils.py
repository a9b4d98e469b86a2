"""verl.utils.logging_utils.set_basic_config: the root level comes from the argument or VERL_LOGGING_LEVEL.

Each case runs in a fresh interpreter: pytest's own log capture owns the root logger in this process.
"""

import os
import subprocess
import sys


def _root_level(code: str, **env: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", f"import logging\n{code}\nprint(logging.getLogger().level)"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[-1])


def test_import_verl_sets_the_level_from_the_environment():
    assert _root_level("import verl", VERL_LOGGING_LEVEL="debug") == 10
    assert _root_level("import verl", VERL_LOGGING_LEVEL="WARNING") == 30


def test_an_explicit_level_wins_and_a_configured_root_is_left_alone():
    code = (
        "from verl.utils.logging_utils import set_basic_config\n"
        "logging.getLogger().handlers.clear()\n"  # undo what `import verl` configured
        "set_basic_config(40)\n"
        "set_basic_config('info')"
    )
    assert _root_level(code, VERL_LOGGING_LEVEL="DEBUG") == 40
