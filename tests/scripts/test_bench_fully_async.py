"""bench_fully_async.py's verdict from two validation curves (``[step, seconds since launch, score]``)."""

from tests.benchmark_scripts import load_benchmark

compare = load_benchmark("bench_fully_async").compare


def test_async_reaching_syncs_score_in_time_meets_the_target():
    sync = {"curve": [[0, 40.0, 0.0], [8, 100.0, 0.2], [16, 150.0, 0.5]], "wall_s": 155.0}
    fa = {"curve": [[0, 35.0, 0.0], [8, 70.0, 0.3], [16, 95.0, 0.48]], "wall_s": 100.0}
    result = compare(sync, fa)
    # 0.48 is within 0.03 of sync's 0.5: reached at 95 s, 95 / 150 of sync's time
    assert result["async_time_to_sync_val_s"] == 95.0
    assert result["async_over_sync_time"] == round(95 / 150, 3)
    assert result["sync_val_rose"] is True and result["target_met"] is True
    slow = {"curve": [[0, 35.0, 0.0], [16, 120.0, 0.5]], "wall_s": 125.0}
    assert compare(sync, slow)["target_met"] is False  # 120 / 150 > 2/3
    never = {"curve": [[0, 35.0, 0.0], [16, 90.0, 0.1]], "wall_s": 95.0}
    assert compare(sync, never)["async_time_to_sync_val_s"] is None and compare(sync, never)["target_met"] is False


def test_a_score_sync_never_rose_to_is_no_target():
    flat = {"curve": [[0, 40.0, 0.0], [16, 150.0, 0.0]], "wall_s": 155.0}
    fa = {"curve": [[0, 35.0, 0.0], [16, 95.0, 0.0]], "wall_s": 100.0}
    result = compare(flat, fa)
    assert result["sync_val_rose"] is False and result["target_met"] is None
