from loadkit import write_suite  # noqa: F401  (a fixture: pytest finds it by name)
