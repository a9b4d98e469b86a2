"""Fully asynchronous training: a Rollouter generates continuously into a bounded queue while the trainer consumes
mini-batches as they are ready, with weights pushed every ``async_training.trigger_parameter_sync_step`` updates.

``python -m recipe.fully_async_policy.fully_async_main`` with verl's Hydra overrides; ``FullyAsyncRayTrainer`` for
use from Python. See docs/fully_async.md.
"""
