"""Running untrusted code: ``run_python`` executes a program in a confined child interpreter (see ``local``)."""

from verl.utils.sandbox.local import STATUSES, SandboxResult, ensure_isolation, isolation_layers, run_python
from verl.utils.sandbox.policy import SandboxIsolationError

__all__ = ["STATUSES", "SandboxIsolationError", "SandboxResult", "ensure_isolation", "isolation_layers", "run_python"]
