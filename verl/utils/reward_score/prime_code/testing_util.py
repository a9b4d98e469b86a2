"""Run a program against stdin/stdout (or call-based) test cases, each case in the local sandbox with a time limit."""

from __future__ import annotations

import json

from verl.utils.sandbox import run_python

__all__ = ["run_test"]

# Call-based cases (``fn_name``): the program defines the function; this harness feeds it JSON-decoded inputs.
_CALL_HARNESS = """
import json, sys
_args = json.loads(sys.stdin.read())
_fn = {fn_name}
_out = _fn(*_args) if isinstance(_args, list) else _fn(_args)
print(json.dumps(_out))
"""
_MAX_OUTPUT_CHARS = 1 << 20  # a case's expected output is far smaller; more is a wrong answer anyway


def _outputs_match(actual: str, expected) -> bool:
    """Compare program output with the expected text, line by line, ignoring trailing whitespace."""
    if not isinstance(expected, str):
        expected = json.dumps(expected) if not isinstance(expected, list) else "\n".join(map(str, expected))
    actual_lines = [line.rstrip() for line in actual.strip().splitlines()]
    expected_lines = [line.rstrip() for line in expected.strip().splitlines()]
    return actual_lines == expected_lines


def run_test(
    in_outs: dict, test: str | None = None, debug: bool = False, timeout: float = 5, memory_limit_mb: int = 1024
) -> tuple[list, list]:
    """``(results, metadata)``: per case True (passed), False (wrong answer), -1 (timeout/runtime error), -2 (no code).

    ``in_outs`` has ``inputs`` and ``outputs`` lists and optionally ``fn_name`` (call-based cases). Every case runs
    in ``verl.utils.sandbox.run_python`` (no network, no writes outside its own directory, ``memory_limit_mb``).
    """
    if not isinstance(in_outs, dict) or "inputs" not in in_outs or "outputs" not in in_outs:
        raise ValueError(f"in_outs must be a dict with 'inputs' and 'outputs', got {type(in_outs).__name__}")
    if not test:
        return [-2] * len(in_outs["inputs"]), [{"error": "no code"}]
    fn_name = in_outs.get("fn_name")
    program = test + (_CALL_HARNESS.format(fn_name=fn_name) if fn_name else "")
    results, metadata = [], []
    for index, (stdin, expected) in enumerate(zip(in_outs["inputs"], in_outs["outputs"], strict=True)):
        if fn_name:
            stdin = stdin if isinstance(stdin, str) else json.dumps(stdin)
            expected = json.dumps(json.loads(expected) if isinstance(expected, str) else expected)
        run = run_python(
            program, stdin=str(stdin), timeout_s=timeout, memory_mb=memory_limit_mb, max_output_chars=_MAX_OUTPUT_CHARS
        )
        if run.status != "ok":
            # timeout, memory_error, blocked (a refused syscall), runtime_error or sandbox_error: the case fails
            results.append(-1)
            metadata.append({"case_index": index, "status": run.status, "stderr": run.stderr[-2000:]})
            continue
        passed = _outputs_match(run.stdout, expected)
        results.append(passed)
        metadata.append({"case_index": index, "status": "success" if passed else "wrong_answer"})
        if debug:
            print(f"case {index}: {'passed' if passed else 'failed'}")
    return results, metadata
