"""The compact console line: one readable line per training step instead of every metric.

A step logs about 60 metrics; printed whole they wrap over several terminal lines and bury the few a person
watches. ``StepLine`` keeps step, epoch, reward, validation score, step time, tokens/s and the ETA; every metric
still reaches the other trackers and ``metrics.jsonl`` (``trainer.console_format=full`` prints them all, as verl).
"""

from __future__ import annotations

import time

__all__ = ["StepLine", "REWARD_KEYS"]

# the first of these present is the step's reward (the score before any KL penalty, as the curve's panel)
REWARD_KEYS = ("critic/score/mean", "critic/rewards/mean")


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _val_core(data: dict) -> float | None:
    """The first validation headline score (``val-core/...``) in ``data``, if any."""
    for key in sorted(data):
        if key.startswith("val-core/"):
            return float(data[key])
    return None


class StepLine:
    """Formats a step's metric dict as ``step 12/60 | epoch 0 | reward 0.653 | val 0.850 | 2.31 s | ... | ETA``.

    ``total_steps``: the run's step count (None or <= 0: no ETA and no ``/total``). The ETA is the mean wall time
    per step seen so far times the steps left; ``clock`` is injectable for tests.
    """

    def __init__(self, total_steps: int | None = None, clock=time.monotonic):
        self.total_steps = total_steps if total_steps and total_steps > 0 else None
        self._clock = clock
        self._first: tuple[int, float] | None = None

    def format(self, data: dict, step: int) -> str:
        """One line for the metrics logged at ``step`` (a validation-only dict gives a validation line)."""
        val = _val_core(data)
        if "training/global_step" not in data and not any(k.startswith(("timing_s/", "critic/")) for k in data):
            return f"validation @ step {step}: score {val:.3f}" if val is not None else f"step {step}"
        now = self._clock()
        parts = [f"step {step}/{self.total_steps}" if self.total_steps else f"step {step}"]
        if "training/epoch" in data:
            parts.append(f"epoch {int(data['training/epoch'])}")
        reward = next((float(data[k]) for k in REWARD_KEYS if k in data), None)
        if reward is not None:
            parts.append(f"reward {reward:.3f}")
        if val is not None:
            parts.append(f"val {val:.3f}")
        step_time = data.get("timing_s/step")
        if step_time is not None:
            parts.append(f"{float(step_time):.2f} s/step")
            tokens = data.get("perf/total_num_tokens")
            if tokens is not None and step_time > 0:
                parts.append(f"{float(tokens) / float(step_time):,.0f} tok/s")
        eta = self._eta(step, now, step_time)
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        return " | ".join(parts)

    def _eta(self, step: int, now: float, step_time) -> float | None:
        if self.total_steps is None:
            return None
        left = max(self.total_steps - step, 0)
        if self._first is None:
            # the first logged step: no wall-clock rate yet, its own step time is the best estimate
            self._first = (step, now)
            return left * float(step_time) if step_time is not None else None
        first_step, first_time = self._first
        if step <= first_step:
            return None
        return left * (now - first_time) / (step - first_step)
