"""The SandboxFusion client against a local stand-in service (tests/sandbox_fusion_server.py) and patched clients."""

import json
import multiprocessing
import threading

import pytest

from tests.sandbox_fusion_server import sandbox_fusion_server, unused_local_url
from verl.utils.reward_score import default_compute_score, sandbox_fusion
from verl.utils.reward_score.sandbox_fusion import utils

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_CASES = {"inputs": ["1 2\n", "3 4\n", "5 5\n"], "outputs": ["3\n", "7\n", "11\n"]}
# the spec's metadata keys, written out here so that a renamed or missing key fails the test
METADATA_KEYS = set(
    "case_index input expected_output api_request_error api_response status stdout stderr exit_code duration "
    "compile_duration compile_stderr api_status compile_status run_status".split()
)
PAYLOAD_KEYS = set("compile_timeout run_timeout code stdin memory_limit_MB language files fetch_files".split())


@pytest.fixture(scope="module")
def server():
    with sandbox_fusion_server() as s:
        yield s


@pytest.fixture
def fresh_server():
    with sandbox_fusion_server() as s:
        yield s


def test_stdin_cases_graded_in_order(server):
    results, metadata = utils.check_correctness(server.url, ADD_CASES, ADD, 5, 256)
    assert results == [True, True, False]
    assert [m["status"] for m in metadata] == ["success", "success", "wrong_answer"]
    assert all(set(m) == METADATA_KEYS for m in metadata)
    assert metadata[2]["stdout"] == "10\n" and metadata[2]["expected_output"] == "11\n"
    assert metadata[0]["api_status"] == "Success" and metadata[0]["run_status"] == "Finished"
    payload = server.payloads[-1]
    assert set(payload) == PAYLOAD_KEYS
    assert (payload["files"], payload["fetch_files"], payload["memory_limit_MB"]) == ({}, [], 256)


def test_runtime_error_timeout_and_memory(server):
    code = (
        "x = input()\nif x == 'loop':\n    while True: pass\n"
        "if x == 'mem':\n    b = bytearray(10**10)\nprint(1 // int(x))\n"
    )
    in_outs = {"inputs": ["1", "0", "loop", "mem"], "outputs": ["1", "", "", ""]}
    results, metadata = utils.check_correctness(server.url, in_outs, code, 1)
    assert results == [True, -2, -3, -2]
    assert [m["status"] for m in metadata] == ["success", "runtime_error", "timeout", "runtime_error"]
    assert "ZeroDivisionError" in metadata[1]["stderr"] and "MemoryError" in metadata[3]["stderr"]


def test_function_call_mode(server):
    code = "def f(x):\n    return 10 // x\n"
    in_outs = {"inputs": [[2], "[5]", [0]], "outputs": [5, "2", 0], "fn_name": "f"}
    results, _ = utils.check_correctness(server.url, in_outs, code, 5)
    assert results == [True, True, -2]
    # the positional call verl's own tests make: (url, in_outs, code, timeout, language)
    assert utils.check_correctness(server.url, ADD_CASES, ADD, 5, "python")[0] == [True, True, False]


@pytest.mark.parametrize("bad", [None, {}, {"inputs": ["1"]}, "not a dict"])
def test_invalid_in_outs(bad):
    assert utils.check_correctness("http://unused", bad, ADD) == ([-1], [{"error": "Invalid input/output data"}])


def test_empty_and_mismatched_cases():
    assert utils.check_correctness("http://unused", {"inputs": [], "outputs": []}, ADD) == ([], [])
    results, metadata = utils.check_correctness("http://unused", {"inputs": ["1", "2"], "outputs": ["1"]}, ADD)
    assert results == [-1, -1]
    assert metadata == [{"error": "Input/output count mismatch", "case_index": i} for i in range(2)]


def test_504_is_retried_with_linear_backoff(fresh_server, monkeypatch):
    sleeps = []
    monkeypatch.setattr(utils.time, "sleep", sleeps.append)
    fresh_server.fail_next_with_504 = 2
    response, error = utils.call_sandbox_api(fresh_server.url, "print(7)", "", 5, 5, 256)
    assert error is None and response["run_result"]["stdout"] == "7\n"
    assert fresh_server.requests == 3 and sleeps == [utils.INITIAL_RETRY_DELAY * 1, utils.INITIAL_RETRY_DELAY * 2]
    fresh_server.fail_next_with_504 = 10
    response, error = utils.call_sandbox_api(fresh_server.url, "print(7)", "", 5, 5, 256)
    assert response is None and "504" in error and fresh_server.requests == 3 + utils.MAX_RETRIES


def test_connection_refused_is_an_api_error():
    url = unused_local_url()
    response, error = utils.call_sandbox_api(url, "print(1)", "", 1, 1, 256)
    assert response is None and "ConnectionError" in error
    result, metadata = utils._process_single_case(0, "", "1", url, "print(1)", 1, 256, "python")
    assert result == -1 and metadata["status"] == "api_error" and "ConnectionError" in metadata["api_request_error"]
    assert utils.call_sandbox_api(url, "x", "", 1, 1, 256, language="brainfuck")[1].startswith("Unsupported language")


def _sleepy_cases(n):
    return {"inputs": [str(i) for i in range(n)], "outputs": [str(i) for i in range(n)]}


SLEEPY = "import time\ntime.sleep(0.3)\nprint(input())\n"


def test_manager_semaphore_bounds_concurrency_across_callers(fresh_server):
    utils.check_correctness(fresh_server.url, _sleepy_cases(6), SLEEPY, 5)
    assert fresh_server.max_in_flight > 2  # without a semaphore the cases overlap freely
    fresh_server.max_in_flight = 0
    with multiprocessing.Manager() as manager:
        semaphore = manager.Semaphore(2)  # lives in the manager process: one bound for every process that holds it
        outcomes = []

        def call():
            outcomes.append(
                utils.check_correctness(fresh_server.url, _sleepy_cases(3), SLEEPY, 5, 1024, "python", semaphore)
            )

        threads = [threading.Thread(target=call) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [o[0] for o in outcomes] == [[True] * 3] * 2
    assert fresh_server.max_in_flight == 2


class _Fake:
    """A stand-in for call_sandbox_api that returns a fixed response and records how it was called."""

    def __init__(self, response, semaphore=None):
        self.response, self.semaphore, self.calls = response, semaphore, []

    def __call__(self, **kwargs):
        self.calls.append((kwargs, self.semaphore.held if self.semaphore else None))
        return self.response, None


class _CountingSemaphore:
    def __init__(self):
        self.held = False

    def __enter__(self):
        self.held = True

    def __exit__(self, *exc):
        self.held = False


def test_client_is_looked_up_at_call_time_with_exact_arguments(monkeypatch):
    semaphore = _CountingSemaphore()
    fake = _Fake(
        {"status": "Success", "run_result": {"status": "Finished", "stdout": "3\n", "return_code": 0}}, semaphore
    )
    monkeypatch.setattr(utils, "call_sandbox_api", fake)
    result, metadata = utils._process_single_case(4, 12, "3", "http://x", "code", 7, 512, "python", semaphore)
    assert result is True and metadata["case_index"] == 4 and metadata["input"] == 12
    kwargs, held = fake.calls[0]
    assert held is True
    assert kwargs == dict(
        sandbox_fusion_url="http://x",
        code="code",
        stdin="12",
        compile_timeout=7,
        run_timeout=7,
        memory_limit_mb=512,
        language="python",
    )


@pytest.mark.parametrize(
    "response, code, status",
    [
        (
            {"status": "Failed", "compile_result": {"status": "Finished", "return_code": 1, "stderr": "e"}},
            -4,
            "compile_error",
        ),
        ({"status": "Failed", "compile_result": {"status": "TimeLimitExceeded"}}, -4, "compile_timeout"),
        ({"status": "SandboxError", "message": "down"}, -1, "sandbox_error"),
        ({"status": "Failed", "run_result": {"status": "Finished", "return_code": 0}}, -1, "unknown_failure"),
        ({"status": "Success", "run_result": {"status": "Killed"}}, -1, "unknown_api_status"),
    ],
)
def test_response_codes(monkeypatch, response, code, status):
    monkeypatch.setattr(utils, "call_sandbox_api", _Fake(response))
    results, metadata = utils.check_correctness("http://x", {"inputs": ["1", "2"], "outputs": ["1", "2"]}, "c", 5)
    assert results[0] == code and metadata[0]["status"] == status
    if code == -4:  # later cases are marked as skipped after the first compile error
        assert results == [-4, -4] and metadata[1]["status"] == "compile_error_skipped"


def test_compute_score(server):
    right = f"Here:\n```python\n{ADD}```"
    assert sandbox_fusion.compute_score(server.url, None, 512, right, json.dumps(ADD_CASES))[0] == pytest.approx(2 / 3)
    cases = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    score, metadata = sandbox_fusion.compute_score(server.url, None, None, f"```py\n{ADD}```", cases)
    assert score == 1.0 and metadata[0]["status"] == "success"  # any fenced block when there is no python block
    wrong = "```python\nprint(0)\n```"
    assert sandbox_fusion.compute_score(server.url, None, 512, wrong, cases)[0] == 0.0
    assert sandbox_fusion.compute_score(server.url, None, 512, "a + b", cases) == (
        0.0,
        [{"error": "Invalid completion (missing code block)"}],
    )
    score, metadata = sandbox_fusion.compute_score(server.url, None, 512, right, "{not json")
    assert score == 0.0 and "test_cases" in metadata[0]["error"]
    assert sandbox_fusion.compute_score(unused_local_url(), None, 512, right, cases)[0] == 0.0


def test_compute_score_continuous_grades_first_ten(fresh_server):
    cases = {"inputs": [f"{i} 0\n" for i in range(12)], "outputs": [f"{i}\n" for i in range(10)] + ["x", "y"]}
    completion = f"```python\n{ADD}```"
    score, metadata = sandbox_fusion.compute_score(fresh_server.url, None, 512, completion, cases, continuous=True)
    assert score == 1.0 and len(metadata) == 10 and fresh_server.requests == 10
    assert (
        default_compute_score("codecontests", completion, json.dumps(cases), sandbox_fusion_url=fresh_server.url) == 1.0
    )
