"""rate_limited: a burst of reward calls against a local HTTP scorer never exceeds the concurrency cap, keeps the
rate cap, and calls that time out or fail score 0 with a warning and are counted."""

import asyncio
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl.trainer.ppo.reward import load_reward_manager
from verl.workers.reward_manager import RateLimitedRewardManager, get_reward_manager_cls
from verl.workers.reward_manager.async_scoring import CallLimits, score_concurrently


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # the default backlog of 5 drops connections of a burst (1 s SYN retries)


class CountingScorer:
    """An HTTP scorer on 127.0.0.1: GET /<answer>/<truth>/<delay_ms> answers 1.0 or 0.0 after the delay."""

    def __init__(self):
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.starts: list[float] = []
        scorer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                with scorer.lock:
                    scorer.in_flight += 1
                    scorer.max_in_flight = max(scorer.max_in_flight, scorer.in_flight)
                    scorer.starts.append(time.monotonic())
                try:
                    answer, truth, delay_ms = self.path.strip("/").split("/")
                    time.sleep(int(delay_ms) / 1000)
                    body = b"1.0" if answer == truth else b"0.0"
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except BrokenPipeError:
                    pass  # the client gave up on a call that timed out
                finally:
                    with scorer.lock:
                        scorer.in_flight -= 1

            def log_message(self, *args):
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scorer():
    s = CountingScorer()
    yield s
    s.close()


def async_judge(port):
    """A verl-style async reward function: one HTTP request per sample (raw asyncio streams, no extra package)."""

    async def compute_score(data_source, solution_str, ground_truth, extra_info=None, delay_ms=20):
        delay = (extra_info or {}).get("delay_ms", delay_ms)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /{solution_str.strip()}/{ground_truth}/{delay} HTTP/1.0\r\n\r\n".encode())
        await writer.drain()
        response = await reader.read()
        writer.close()
        return float(response.split(b"\r\n\r\n", 1)[1])

    return compute_score


def _calls(n, delay_ms=20, slow=()):
    return [
        {
            "data_source": "judge",
            "solution_str": str(i % 7),
            "ground_truth": "3",
            "extra_info": {"delay_ms": 2000 if i in slow else delay_ms},
        }
        for i in range(n)
    ]


def test_a_burst_never_exceeds_the_concurrency_cap(scorer):
    outcome = score_concurrently(async_judge(scorer.port), _calls(400), CallLimits(max_concurrent=8, timeout=30))
    assert scorer.max_in_flight <= 8 and scorer.max_in_flight >= 4  # capped, and the cap is used
    assert outcome.results == [1.0 if i % 7 == 3 else 0.0 for i in range(400)] and not any(outcome.failed)


def test_the_rate_cap_holds_within_ten_percent(scorer):
    per_second = 100
    start = time.monotonic()
    score_concurrently(async_judge(scorer.port), _calls(300, delay_ms=1), CallLimits(max_rpm=per_second * 60))
    elapsed = time.monotonic() - start
    # one second's budget may go at once, then the bucket refills at the cap
    assert elapsed >= (300 - per_second) / per_second * 0.9, elapsed
    starts = sorted(scorer.starts)
    worst = max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts)
    assert worst <= 2 * per_second * 1.1, worst  # at most one banked second plus one second's refill per window


def test_a_call_that_times_out_scores_zero_with_a_warning(scorer, caplog):
    caplog.set_level(logging.WARNING)
    outcome = score_concurrently(
        async_judge(scorer.port), _calls(20, slow={3, 10}), CallLimits(max_concurrent=20, timeout=0.5)
    )
    assert outcome.timed_out == [i in (3, 10) for i in range(20)] and outcome.failed == outcome.timed_out
    assert outcome.results[3] is None and outcome.results[10] is None and outcome.results[17] == 1.0
    assert "took longer than timeout=0.5s" in caplog.text


def test_sync_functions_run_in_threads_and_failures_are_counted():
    seen = set()

    def score(data_source, solution_str, ground_truth, extra_info=None):
        seen.add(threading.get_ident())
        time.sleep(0.05)
        if solution_str == "6":
            raise RuntimeError("judge unavailable")
        return {"score": float(solution_str == ground_truth), "acc": solution_str == ground_truth}

    start = time.monotonic()
    outcome = score_concurrently(score, _calls(14), CallLimits(max_concurrent=7, timeout=5))
    assert time.monotonic() - start < 0.5  # 14 calls of 50 ms, 7 at a time
    assert len(seen) > 1 and outcome.failed == [i % 7 == 6 for i in range(14)]


def test_the_manager_scores_a_batch_and_reports_failed_calls(scorer, tokenizer, make_batch):
    assert get_reward_manager_cls("limited") is get_reward_manager_cls("rate_limited") is RateLimitedRewardManager
    data = make_batch(["q"] * 6, ["3", "4", "3", "3", "1", "3"], ["3"] * 6, data_sources=["judge"] * 6)
    data.non_tensor_batch["extra_info"][2]["delay_ms"] = 3000
    manager = RateLimitedRewardManager(
        tokenizer, num_examine=0, compute_score=async_judge(scorer.port), max_concurrent=3, timeout=1.0
    )
    result = manager(data, return_dict=True)
    scores = result["reward_tensor"].sum(-1).tolist()
    assert scores == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert result["reward_extra_info"]["reward_call_failed"] == [False, False, True, False, False, False]


def test_concurrent_calls_of_one_manager_share_its_cap(scorer, tokenizer, make_batch):
    """The reward loop's scoring threads call one manager at once: its calls take turns, so max_concurrent holds
    for all of them together."""
    manager = RateLimitedRewardManager(
        tokenizer, num_examine=0, compute_score=async_judge(scorer.port), max_concurrent=2
    )
    batches = [make_batch(["q"] * 4, ["3", "4", "3", "3"], ["3"] * 4, data_sources=["judge"] * 4) for _ in range(3)]
    threads = [threading.Thread(target=manager, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(scorer.starts) == 12 and scorer.max_in_flight == 2  # 3 calls x 4 samples, never more than the cap


def test_an_async_custom_reward_function_runs_with_the_naive_manager(scorer, tokenizer, make_batch, tmp_path):
    """A verl user's async compute_score, loaded from custom_reward_function.path, runs unchanged."""
    path = tmp_path / "judge.py"
    path.write_text(
        "import asyncio\n"
        "async def compute_score(data_source, solution_str, ground_truth, extra_info=None, port=0):\n"
        "    reader, writer = await asyncio.open_connection('127.0.0.1', port)\n"
        "    writer.write(f'GET /{solution_str.strip()}/{ground_truth}/10 HTTP/1.0\\r\\n\\r\\n'.encode())\n"
        "    await writer.drain()\n"
        "    body = (await reader.read()).split(b'\\r\\n\\r\\n', 1)[1]\n"
        "    writer.close()\n"
        "    return float(body)\n"
    )
    config = {
        "custom_reward_function": {"path": str(path), "reward_kwargs": {"port": scorer.port}},
        "reward_model": {"reward_manager": "naive"},
    }
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    data = make_batch(["q"] * 8, ["3", "4"] * 4, ["3"] * 8, data_sources=["judge"] * 8)
    assert manager(data).sum(-1).tolist() == [1.0, 0.0] * 4
    assert scorer.max_in_flight > 1  # the samples were scored concurrently


def test_the_keys_are_refused_with_another_manager():
    from verl.trainer.config import ConfigError, PPOConfig
    from verl.trainer.config.checks.ppo import _check_rate_limits

    config = PPOConfig.from_config({"reward_model": {"max_concurrent": 8}})
    with pytest.raises(ConfigError, match=r"reward_model\.max_concurrent=8 is read only by .*rate_limited"):
        _check_rate_limits(config, None)
    limited = {"reward_manager": "limited"}
    _check_rate_limits(PPOConfig.from_config({"reward_model": {"max_concurrent": 8, **limited}}), None)
    with pytest.raises(ConfigError, match=r"reward_model\.timeout=0"):
        _check_rate_limits(PPOConfig.from_config({"reward_model": {"timeout": 0, **limited}}), None)
