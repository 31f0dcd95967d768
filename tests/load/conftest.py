from loadkit import write_suite  # noqa: F401  (fixture)
