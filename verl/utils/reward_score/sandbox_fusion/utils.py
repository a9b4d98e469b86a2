"""Client of a SandboxFusion service: run one program per test case over HTTP and grade its stdout.

Result codes per case (what ``check_correctness`` returns): ``True`` passed, ``False`` wrong answer, ``-1`` API or
sandbox error, ``-2`` runtime error, ``-3`` time limit, ``-4`` compile error (or skipped after one).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import time
from typing import Any

import requests

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_RETRIES",
    "INITIAL_RETRY_DELAY",
    "API_TIMEOUT",
    "SUPPORTED_LANGUAGES",
    "call_sandbox_api",
    "check_correctness",
]

DEFAULT_TIMEOUT = 10  # seconds to compile and to run one case
MAX_RETRIES = 3
INITIAL_RETRY_DELAY = 1  # seconds; attempt k waits k times this after a 504
API_TIMEOUT = 10  # seconds of HTTP overhead allowed on top of compile and run time

SUPPORTED_LANGUAGES = [
    "python",
    "cpp",
    "nodejs",
    "go",
    "go_test",
    "java",
    "php",
    "csharp",
    "bash",
    "typescript",
    "sql",
    "rust",
    "cuda",
    "lua",
    "R",
    "perl",
    "D_ut",
    "ruby",
    "scala",
    "julia",
    "pytest",
    "junit",
    "kotlin_script",
    "jest",
    "verilog",
    "python_gpu",
    "lean",
    "swift",
    "racket",
]

# fn_name mode: the submitted code defines the function (or a LeetCode-style ``Solution`` method); the case's stdin
# holds its arguments (JSON, or a Python literal when the test data was str()-ed) and stdout must be the JSON result
_CALL_HARNESS = """

if __name__ == "__main__":
    import ast as _ast
    import json as _json
    import sys as _sys

    _raw = _sys.stdin.read()
    try:
        _args = _json.loads(_raw)
    except ValueError:
        _args = _ast.literal_eval(_raw)
    _fn = globals().get({fn_name!r}) or getattr(globals()["Solution"](), {fn_name!r})
    _out = _fn(*_args) if isinstance(_args, list) else _fn(_args)
    print(_json.dumps(_out))
"""


def call_sandbox_api(
    sandbox_fusion_url: str,
    code: str,
    stdin: str,
    compile_timeout: int,
    run_timeout: int,
    memory_limit_mb: int,
    language: str = "python",
) -> tuple[dict | None, str | None]:
    """POST one program to ``sandbox_fusion_url``; ``(response json, None)`` or ``(None, error message)``.

    A 504 (the service's queue timed out) is retried ``MAX_RETRIES`` times with a linearly growing delay; any other
    failure is returned as the message, never raised.
    """
    if language not in SUPPORTED_LANGUAGES:
        return None, f"Unsupported language {language!r}; SandboxFusion runs one of {SUPPORTED_LANGUAGES}"
    payload = {
        "compile_timeout": compile_timeout,
        "run_timeout": run_timeout,
        "code": code,
        "stdin": stdin,
        "memory_limit_MB": memory_limit_mb,
        "language": language,
        "files": {},
        "fetch_files": [],
    }
    request_timeout = compile_timeout + run_timeout + API_TIMEOUT
    error = None
    for attempt in range(MAX_RETRIES):
        try:
            response = requests.post(sandbox_fusion_url, json=payload, timeout=request_timeout)
        except requests.exceptions.RequestException as e:
            return None, f"API Request Error: {type(e).__name__}: {e}"
        if response.status_code == 504:
            error = f"API Request Error: Gateway Timeout (504) after {attempt + 1} attempt(s)"
            if attempt + 1 < MAX_RETRIES:
                delay = INITIAL_RETRY_DELAY * (attempt + 1)
                logger.warning("SandboxFusion %s answered 504; retrying in %s s", sandbox_fusion_url, delay)
                time.sleep(delay)
            continue
        if response.status_code >= 400:
            return None, f"API Request Error: HTTP {response.status_code}: {response.text[:500]}"
        try:
            return response.json(), None
        except ValueError as e:
            return None, f"API Request Error: the response is not JSON ({e}): {response.text[:200]!r}"
    return None, error


def _outputs_match(stdout: str, expected: Any, fn_name: str | None) -> bool:
    if fn_name:  # compare values, so "[1,2]" and "[1, 2]" or 5 and "5" agree
        try:
            want = json.loads(expected) if isinstance(expected, str) else expected
            return json.loads(stdout) == want
        except ValueError:
            pass
    return str(stdout).rstrip("\n") == str(expected).rstrip("\n")


def _new_metadata(case_index: int, stdin_data: Any, expected_output: Any) -> dict:
    keys = (
        "api_request_error",
        "api_response",
        "status",
        "stdout",
        "stderr",
        "exit_code",
        "duration",
        "compile_duration",
        "compile_stderr",
        "api_status",
        "compile_status",
        "run_status",
    )
    return {"case_index": case_index, "input": stdin_data, "expected_output": expected_output, **dict.fromkeys(keys)}


def _grade(response: dict, metadata: dict, expected_output: Any, fn_name: str | None) -> bool | int:
    """Fill ``metadata`` from a SandboxFusion response and return the case's result code."""
    compile_result = response.get("compile_result") or {}
    run_result = response.get("run_result") or {}
    api_status = response.get("status")
    metadata.update(
        api_status=api_status,
        compile_status=compile_result.get("status"),
        compile_duration=compile_result.get("execution_time"),
        compile_stderr=compile_result.get("stderr"),
        run_status=run_result.get("status"),
        stdout=run_result.get("stdout"),
        stderr=run_result.get("stderr"),
        exit_code=run_result.get("return_code"),
        duration=run_result.get("execution_time"),
    )
    run_status, exit_code = run_result.get("status"), run_result.get("return_code")
    if api_status == "SandboxError":
        metadata["status"] = "sandbox_error"
        return -1
    if api_status == "Failed":
        compile_status = compile_result.get("status")
        compile_failed = compile_status in ("Error", "TimeLimitExceeded") or (
            compile_status == "Finished" and compile_result.get("return_code") not in (0, None)
        )
        if compile_result and compile_failed:
            metadata["status"] = "compile_timeout" if compile_status == "TimeLimitExceeded" else "compile_error"
            return -4
        if run_status == "TimeLimitExceeded":
            metadata["status"] = "timeout"
            return -3
        if run_status == "Error" or (run_status == "Finished" and exit_code not in (0, None)):
            metadata["status"] = "runtime_error"
            return -2
        metadata["status"] = "unknown_failure"
        return -1
    if api_status == "Success" and run_status == "Finished":
        if expected_output is None:  # a plain run (the tool): finishing is all there is to check
            metadata["status"] = "success"
            return True
        passed = _outputs_match(run_result.get("stdout") or "", expected_output, fn_name)
        metadata["status"] = "success" if passed else "wrong_answer"
        return passed
    metadata["status"] = "unknown_api_status"
    return -1


def _process_single_case(
    case_index: int,
    stdin_data: Any,
    expected_output: Any,
    sandbox_fusion_url: str,
    generation: str,
    timeout: int,
    memory_limit_mb: int,
    language: str,
    concurrent_semaphore=None,
    fn_name: str | None = None,
) -> tuple[bool | int, dict]:
    """Run one case through the service; ``(result code, metadata)`` as described in the module docstring."""
    code = generation + _CALL_HARNESS.format(fn_name=fn_name) if fn_name and language == "python" else generation
    metadata = _new_metadata(case_index, stdin_data, expected_output)
    kwargs = dict(
        sandbox_fusion_url=sandbox_fusion_url,
        code=code,
        stdin=str(stdin_data),
        compile_timeout=timeout,
        run_timeout=timeout,
        memory_limit_mb=memory_limit_mb,
        language=language,
    )
    try:
        # call_sandbox_api is read from this module's globals at call time, so a patched client takes effect
        if concurrent_semaphore is not None:
            with concurrent_semaphore:
                response, error = call_sandbox_api(**kwargs)
        else:
            response, error = call_sandbox_api(**kwargs)
    except Exception as e:  # a client bug costs this case, not the batch
        response, error = None, f"API Request Exception for case {case_index}: {type(e).__name__}: {e}"
    metadata["api_response"] = response
    if error is not None or not isinstance(response, dict):
        metadata["api_request_error"] = error or f"unexpected response {response!r}"
        metadata["status"] = "api_error"
        return -1, metadata
    return _grade(response, metadata, expected_output, fn_name), metadata


def check_correctness(
    sandbox_fusion_url: str,
    in_outs: dict | None,
    generation: str,
    timeout: int = DEFAULT_TIMEOUT,
    memory_limit_mb: int = 1024,
    language: str = "python",
    concurrent_semaphore=None,
) -> tuple[list, list[dict]]:
    """Run ``generation`` on every case concurrently; ``(results, metadata)`` in case order.

    ``in_outs`` has ``inputs`` and ``outputs`` lists and optionally ``fn_name`` (call the function, JSON in and out).
    """
    if not isinstance(in_outs, dict) or "inputs" not in in_outs or "outputs" not in in_outs:
        return [-1], [{"error": "Invalid input/output data"}]
    inputs, outputs = in_outs["inputs"], in_outs["outputs"]
    if len(inputs) != len(outputs):
        n = len(inputs)
        return [-1] * n, [{"error": "Input/output count mismatch", "case_index": i} for i in range(n)]
    if not inputs:
        return [], []
    fn_name = in_outs.get("fn_name")
    results: list = [None] * len(inputs)
    metadata: list = [None] * len(inputs)
    workers = min(len(inputs), max(32, 5 * (os.cpu_count() or 1)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            pool.submit(
                _process_single_case,
                i,
                stdin,
                expected,
                sandbox_fusion_url,
                generation,
                timeout,
                memory_limit_mb,
                language,
                concurrent_semaphore,
                fn_name,
            ): i
            for i, (stdin, expected) in enumerate(zip(inputs, outputs))
        }
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            results[i], metadata[i] = future.result()
    first_compile_error = next((i for i, r in enumerate(results) if r == -4), None)
    if first_compile_error is not None:
        # the program does not build, so later cases say that instead of whatever their run produced
        for i in range(first_compile_error + 1, len(results)):
            results[i] = -4
            metadata[i]["status"] = "compile_error_skipped"
    return results, metadata
