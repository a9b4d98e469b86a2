"""What a run writes for a person to read, besides the trackers.

* ``run_report``: the progress bar with ETA, ``metrics.jsonl``, the learning-curve PNG and ``report.md``
  (``trainer.run_report``);
* ``generation_dump``: the ``{step}.jsonl`` generation dumps (``trainer.rollout_data_dir`` /
  ``trainer.validation_data_dir``).

The compact console line (``trainer.console_format=compact``) is the console tracker's format and lives with the
trackers, in ``verl.utils.console_line``.
"""
