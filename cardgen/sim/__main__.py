"""``python -m cardgen.sim MODEL [options]``: the same as ``cardgen serve-sim`` (how launch.py starts it)."""

from __future__ import annotations

import sys

from cardgen.cli.main import main

if __name__ == "__main__":
    main(["serve-sim", *sys.argv[1:]])
