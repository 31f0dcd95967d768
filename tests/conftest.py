"""Suite-wide test ordering and sharing.

- Tests marked ``engine`` (a real vLLM server, kept for the session) run last, so the engine's process does not
  share the two cores with the timing-sensitive load and server tests.
- Under pytest-xdist (``make test`` runs the untimed tests with ``--dist loadgroup``), the tests that share a
  fixture made once per module or per session (a calibrated run, a pair of runs to compare, a rendered card) go to
  one worker, so that fixture is made once, not once on each worker.
"""

from __future__ import annotations

import pytest


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The group of tests ``item`` must run with: the project's session-scoped fixture it uses (by name), else its
    module when it uses a module-scoped one; None when it shares nothing costly."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    scopes: dict[str, str] = {}
    for name, defs in info.name2fixturedefs.items():
        fixture = defs[-1]
        if fixture.baseid.startswith("tests") and fixture.scope in ("session", "module"):
            scopes[name] = fixture.scope
    session = sorted(name for name, scope in scopes.items() if scope == "session")
    if session:
        return f"session:{session[0]}"
    if scopes:
        return item.nodeid.split("::")[0]
    return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("engine") is not None)  # stable: order kept otherwise
    for item in items:
        group = shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(name=group))
