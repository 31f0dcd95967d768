"""tests/kinds: each kind's tests in its own folder (tests/kinds/<kind>/, beside cardgen/kinds/<kind>/), and
here what spans the kinds. As for tests/conftest.py, pytest puts this file's folder on ``sys.path`` (its
``prepend`` import mode: the test folders have no ``__init__.py``), so the kinds' test modules import
``programkit`` by name."""
