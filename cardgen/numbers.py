"""How cardgen writes a number, for every reader: the card, the site and its charts, ``cardgen diff`` and the
calibration report. A figure has three significant figures and thousands separators (``8,030``, ``52.7``,
``0.0123``), a count is whole (``113,200 tokens``), a ratio has three decimals (``1.042``), units are spelled
out; a missing value (None or NaN) is :data:`DASH` everywhere, a range's ends are joined by an en dash.

Pure and imported by every layer, so it imports nothing of cardgen.
"""

from __future__ import annotations

import math

from typing_extensions import TypeIs

DASH = "—"  # a missing value: an em dash, never the en dash that joins the ends of a range
RANGE = "–"


def _missing(x: float | None) -> TypeIs[None]:
    """None, NaN or infinite: shown as a dash. (Typed ``TypeIs[None]`` so that the other branch knows a float;
    the NaN that also answers True is only ever shown as the dash.)"""
    return x is None or not math.isfinite(x)


def sig(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures: 8033.9 -> ``8,030``; 52.72 -> ``52.7``; 0.01234 -> ``0.0123``."""
    if _missing(x):
        return DASH
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{round(x, digits - 1 - magnitude):,.{decimals}f}"


def integer(x: float | None) -> str:
    return DASH if _missing(x) else f"{x:,.0f}"


def tok_s(x: float | None) -> str:
    return DASH if _missing(x) else f"{sig(x)} tok/s"


def ms(seconds: float | None) -> str:
    return DASH if _missing(seconds) else f"{sig(seconds * 1000)} ms"


def secs(seconds: float | None) -> str:
    return DASH if _missing(seconds) else f"{sig(seconds)} s"


def pct(fraction: float | None) -> str:
    return DASH if _missing(fraction) else f"{sig(100 * fraction)} %"


def half_width(fraction: float | None) -> str:
    """A 95 % half-width given as a fraction of its figure, to two significant figures: 0.0183 -> ``±1.8 %``."""
    return DASH if _missing(fraction) else f"±{sig(100 * fraction, 2)} %"


def tokens(x: float | None) -> str:
    return DASH if _missing(x) else f"{integer(x)} tokens"


def interval(low: float | None, high: float | None, scale: float = 1.0) -> str:
    """``low–high`` in the same rounding as :func:`sig` (``scale`` multiplies both, e.g. 1000 for ms)."""
    if _missing(low) or _missing(high):
        return DASH
    return f"{sig(low * scale)}{RANGE}{sig(high * scale)}"


def integer_interval(low: float | None, high: float | None) -> str:
    """``low–high`` as whole numbers with thousands separators (token counts)."""
    if _missing(low) or _missing(high):
        return DASH
    return f"{integer(low)}{RANGE}{integer(high)}"


def signed_pct(x: float | None) -> str:
    return DASH if _missing(x) else f"{x:+.1f} %"


def error_pct(percent: float | None) -> str:
    """An error or a tolerance in whole percent, either way: 7.6 -> ``±8 %``."""
    return DASH if _missing(percent) else f"±{percent:.0f} %"


def signed_ms(seconds: float | None) -> str:
    """A difference in milliseconds with its sign: ``+2.10 ms``, ``−58.6 ms``; under 1 µs (the resolution of
    the timestamps) ``0 ms``."""
    if _missing(seconds):
        return DASH
    if abs(seconds) < 1e-6:
        return "0 ms"
    text = sig(abs(seconds) * 1000)
    return "0 ms" if text == "0" else f"{'+' if seconds > 0 else '−'}{text} ms"


def signed_integer(x: float | None) -> str:
    """A whole-number difference with its sign: ``+1,024``, ``−3``, ``0``."""
    if _missing(x):
        return DASH
    text = integer(abs(x))
    return "0" if text == "0" else f"{'+' if x > 0 else '−'}{text}"


def gib(n_bytes: float | None) -> str:
    """Bytes in GiB to three significant figures: ``21.5 GiB``."""
    return DASH if _missing(n_bytes) else f"{sig(n_bytes / 1024**3)} GiB"


def joules(x: float | None) -> str:
    return DASH if _missing(x) else f"{sig(x)} J"


def watts(x: float | None) -> str:
    return DASH if _missing(x) else f"{sig(x)} W"


def figure(x: float | None, unit: str = "") -> str:
    """A figure whose unit is said elsewhere (a column title): a count of ``tokens`` whole, anything else to
    three significant figures."""
    return integer(x) if unit == "tokens" else sig(x)


def ratio(x: float | None) -> str:
    """A ratio of two figures (B / A), three decimals: ``1.042``."""
    return DASH if _missing(x) else f"{x:.3f}"


def ratio_interval(low: float | None, high: float | None) -> str:
    """The interval of a ratio, ``0.981–1.103``."""
    if _missing(low) or _missing(high):
        return DASH
    return f"{ratio(low)}{RANGE}{ratio(high)}"


def tick(value: float) -> str:
    """An axis tick, as short as it can be: ``0``, ``2.5``, ``1,500``, ``25k``."""
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def file_size(n_bytes: int) -> str:
    """A file's size in decimal units: ``512 B``, ``1.2 MB``."""
    if n_bytes < 1000:
        return f"{n_bytes} B"
    value, unit = n_bytes / 1000, "kB"
    for bigger in ("MB", "GB"):
        if value < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:,.1f} {unit}"


def duration_text(seconds: float) -> str:
    """``3 h 05 min``, ``12 min 30 s``, ``45 s``."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def usd(x: float | None) -> str:
    """US dollars to three significant figures: ``$0.0412``, ``$1.25``, ``$2,150``."""
    return DASH if _missing(x) else f"${sig(x)}"


def latency(seconds: float | None) -> str:
    """A latency in the unit that reads best: ``850 ms`` under a second, ``2.31 s`` from one."""
    return DASH if _missing(seconds) else ms(seconds) if abs(seconds) < 1 else secs(seconds)
