"""A reward function that raises or hangs costs its sample a zero score and a warning, never the run."""

import logging
import threading
import time

import pytest

from verl.utils.reward_score.guarded_call import GuardedCall
from verl.workers.reward_manager import DAPORewardManager, NaiveRewardManager


def flaky_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "raise":
        raise RuntimeError("scorer exploded")
    if solution_str == "hang":
        while True:  # a busy loop: only a process kill stops it
            pass
    if solution_str == "sleep":
        time.sleep(120)
    return 1.0


@pytest.mark.parametrize("mode", ["auto", "signal", "process", "thread"])
def test_naive_hang_and_raise_score_zero_with_warning(tokenizer, make_batch, caplog, mode):
    responses = ["ok", "raise", "sleep" if mode == "thread" else "hang", "ok"]
    data = make_batch(["p"] * 4, responses, ["x"] * 4)
    manager = NaiveRewardManager(tokenizer, 0, compute_score=flaky_score, timeout_s=1.0, timeout_mode=mode)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        result = manager(data, return_dict=True)
    elapsed = time.monotonic() - start
    assert elapsed < 8, elapsed
    rewards = result["reward_tensor"]
    assert rewards[0, 1] == 1.0 and rewards[3, 1] == 1.0 and rewards.sum() == 2.0
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("sample 1" in m and "scorer exploded" in m for m in messages)
    assert any("sample 2" in m and "timed out after 1.0 s" in m for m in messages)


def test_thread_mode_off_main_thread(tokenizer, make_batch):
    """Called from a worker thread, auto mode cannot use signals and falls back to a watched thread."""
    data = make_batch(["p", "p"], ["sleep", "ok"], ["x", "x"])
    manager = NaiveRewardManager(tokenizer, 0, compute_score=flaky_score, timeout_s=1.0)
    out = {}
    worker = threading.Thread(target=lambda: out.update(r=manager(data)))
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and out["r"].sum() == 1.0


def test_swallowing_scorer_still_stops():
    def stubborn():
        while True:
            try:
                time.sleep(10)
            except Exception:  # the deadline is a BaseException and is not caught here
                pass

    start = time.monotonic()
    ok, _, error = GuardedCall(stubborn, timeout_s=0.5, mode="signal")()
    assert not ok and "timed out" in error and time.monotonic() - start < 3


def test_dapo_hang_scores_zero(tokenizer, make_batch, caplog):
    data = make_batch(["p", "p"], ["hang", "ok"], ["x", "x"])
    manager = DAPORewardManager(tokenizer, 0, compute_score=flaky_score, timeout_s=1.0)
    with caplog.at_level(logging.WARNING):
        rewards = manager(data)
    assert rewards[0].sum() == 0.0 and rewards[1, 1] == 1.0
    assert any("timed out" in r.getMessage() for r in caplog.records)


def test_guarded_call_process_reuses_and_restarts():
    pid_calls = GuardedCall(lambda: __import__("os").getpid(), timeout_s=5, mode="process")
    first = pid_calls()
    assert first[0] and pid_calls()[1] == first[1]  # one helper process serves many calls
    hanging = GuardedCall(lambda x: time.sleep(30) if x else 3, timeout_s=0.5, mode="process")
    assert hanging(True)[:2] == (False, None)
    assert hanging(False) == (True, 3, None)  # a fresh helper replaces the killed one
    hanging.close()
    pid_calls.close()


def test_guarded_call_signal_based_scorer_works_in_process_mode():
    import signal

    def uses_alarm():
        # scorers such as math-verify guard themselves with SIGALRM, which only works in a main thread
        signal.signal(signal.SIGALRM, lambda *a: None)
        return threading.current_thread() is threading.main_thread()

    call = GuardedCall(uses_alarm, timeout_s=5, mode="process")
    assert call() == (True, True, None)
    call.close()


def test_guarded_call_inline_when_no_timeout():
    call = GuardedCall(lambda: 1 / 0, timeout_s=None)
    ok, result, error = call()
    assert call.mode == "inline" and not ok and "ZeroDivisionError" in error
