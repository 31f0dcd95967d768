"""Calibration table: every figure of reference/published.md, published vs predicted by the virtual server."""

from __future__ import annotations

from cardgen.sim.calibration import calibration_markdown


def main() -> None:
    print(calibration_markdown(), end="")


if __name__ == "__main__":
    main()
