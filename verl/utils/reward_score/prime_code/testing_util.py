"""Run a program against stdin/stdout (or call-based) test cases in subprocesses with a per-case time limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

__all__ = ["run_test"]

# Call-based cases (``fn_name``): the program defines the function; this harness feeds it JSON-decoded inputs.
_CALL_HARNESS = """
import json, sys
_args = json.loads(sys.stdin.read())
_fn = {fn_name}
_out = _fn(*_args) if isinstance(_args, list) else _fn(_args)
print(json.dumps(_out))
"""


def _outputs_match(actual: str, expected) -> bool:
    """Compare program output with the expected text, line by line, ignoring trailing whitespace."""
    if not isinstance(expected, str):
        expected = json.dumps(expected) if not isinstance(expected, list) else "\n".join(map(str, expected))
    actual_lines = [line.rstrip() for line in actual.strip().splitlines()]
    expected_lines = [line.rstrip() for line in expected.strip().splitlines()]
    return actual_lines == expected_lines


def run_test(in_outs: dict, test: str | None = None, debug: bool = False, timeout: float = 5) -> tuple[list, list]:
    """``(results, metadata)``: per case True (passed), False (wrong answer), -1 (timeout/runtime error), -2 (no code).

    ``in_outs`` has ``inputs`` and ``outputs`` lists and optionally ``fn_name`` (call-based cases).
    """
    if not isinstance(in_outs, dict) or "inputs" not in in_outs or "outputs" not in in_outs:
        raise ValueError(f"in_outs must be a dict with 'inputs' and 'outputs', got {type(in_outs).__name__}")
    if not test:
        return [-2] * len(in_outs["inputs"]), [{"error": "no code"}]
    fn_name = in_outs.get("fn_name")
    program = test + (_CALL_HARNESS.format(fn_name=fn_name) if fn_name else "")
    results, metadata = [], []
    with tempfile.TemporaryDirectory() as workdir:
        path = os.path.join(workdir, "solution.py")
        with open(path, "w") as f:
            f.write(program)
        for index, (stdin, expected) in enumerate(zip(in_outs["inputs"], in_outs["outputs"], strict=True)):
            if fn_name:
                stdin = stdin if isinstance(stdin, str) else json.dumps(stdin)
                expected = json.dumps(json.loads(expected) if isinstance(expected, str) else expected)
            try:
                proc = subprocess.run(
                    [sys.executable, path],
                    input=str(stdin),
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    cwd=workdir,
                )
            except subprocess.TimeoutExpired:
                results.append(-1)
                metadata.append({"case_index": index, "status": "timeout"})
                continue
            if proc.returncode != 0:
                results.append(-1)
                metadata.append({"case_index": index, "status": "runtime_error", "stderr": proc.stderr[-2000:]})
                continue
            passed = _outputs_match(proc.stdout, expected)
            results.append(passed)
            metadata.append({"case_index": index, "status": "success" if passed else "wrong_answer"})
            if debug:
                print(f"case {index}: {'passed' if passed else 'failed'}")
    return results, metadata
