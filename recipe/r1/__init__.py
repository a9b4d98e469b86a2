"""R1-style benchmark evaluation: sample with ``main_generation``, score pass@k per data source with ``main_eval``."""
