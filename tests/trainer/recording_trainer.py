"""A recipe-style trainer subclass for end-to-end tests: it keeps what a run logged, so a test can check it."""

from __future__ import annotations

from verl.trainer.ppo.ray_trainer import RayPPOTrainer


class StepRecordingTrainer(RayPPOTrainer):
    """Keeps every step's metrics in ``steps`` and every validation's in ``validations``."""

    steps: list[dict]
    validations: list[dict]

    def start_recording(self) -> StepRecordingTrainer:
        self.steps, self.validations = [], []
        return self

    def train_step(self, batch, timing_raw):
        batch, metrics = super().train_step(batch, timing_raw)
        self.steps.append(metrics)
        return batch, metrics

    def _validate(self):
        metrics = super()._validate()
        self.validations.append(metrics)
        return metrics
