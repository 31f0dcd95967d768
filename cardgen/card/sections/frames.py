"""Analysis tables the card prints as they are: the scale table (total generation speed), the serving table
(rates) and FastGen's table; every float to three significant figures, counts whole."""

from __future__ import annotations

import pandas as pd

from cardgen.card.table import TableView, float_formats, frame_view


def _whole(v: float) -> str:
    return f"{v:.0f}"


def scale_view(scale: pd.DataFrame | None) -> TableView | None:
    return frame_view(scale, {**float_formats(scale), "Parallel": _whole}) if scale is not None else None


def serving_view(serving: pd.DataFrame | None) -> TableView | None:
    if serving is None or serving.empty:
        return None
    return frame_view(serving.drop(columns=["GPU"]), float_formats(serving))


def fastgen_view(fastgen: pd.DataFrame | None) -> TableView | None:
    if fastgen is None or fastgen.empty:
        return None
    return frame_view(fastgen.drop(columns=["Kind"]), {**float_formats(fastgen), "Clients": _whole})
