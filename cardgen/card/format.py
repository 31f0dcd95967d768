"""Number formatting for the card: three significant figures, thousands separators, units spelled out.
Every function takes None (or NaN) and returns an en dash."""

from __future__ import annotations

import math

DASH = "–"


def _missing(x: float | None) -> bool:
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
    return f"{sig(low * scale)}–{sig(high * scale)}"


def integer_interval(low: float | None, high: float | None) -> str:
    """``low–high`` as whole numbers with thousands separators (token counts)."""
    if _missing(low) or _missing(high):
        return DASH
    return f"{integer(low)}–{integer(high)}"


def signed_pct(x: float | None) -> str:
    return DASH if _missing(x) else f"{x:+.1f} %"


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
