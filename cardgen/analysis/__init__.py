"""Analysis: pure functions from a run's raw records to ``summary.json`` and ``tables/``."""
