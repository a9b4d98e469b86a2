"""Running untrusted code: ``run_python`` executes a program in a confined child interpreter (see ``local``)."""

from verl.utils.sandbox.local import STATUSES, SandboxResult, isolation_layers, run_python

__all__ = ["STATUSES", "SandboxResult", "isolation_layers", "run_python"]
