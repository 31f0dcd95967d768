"""The text of every generated page: pure functions from the :class:`~cardgen.site.plan.SitePlan` to Markdown.

Anything that came from a server or a command line (model, GPU and engine names, the card) is either
HTML-escaped here or passes through :mod:`cardgen.site.sanitize` when MkDocs renders it. Tables with links are
raw HTML, so their relative URLs are computed with :func:`~cardgen.site.plan.href`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

import yaml

from cardgen.site.compare import ScaleTable, headline_value
from cardgen.site.mdtext import demote_headings
from cardgen.site.plan import Group, PlannedRun, SitePlan, href

HEADLINE_COLUMNS = (  # (headline key, column title, decimals)
    ("prompt_ingestion_tok_s", "Prompt ingestion (tok/s)", 0),
    ("generation_tok_s_at_10_parallel_1024_128", "Generation @10 parallel, 1024→128 (tok/s per request)", 1),
    ("kv_cache_tokens", "KV cache (tokens)", 0),
)


def front_matter(title: str, *, hide: Sequence[str] = ()) -> str:
    """YAML front matter; the theme prints the title as HTML, so it is escaped here."""
    meta: dict[str, object] = {"title": escape(title)}
    if hide:
        meta["hide"] = list(hide)
    return "---\n" + yaml.safe_dump(meta, allow_unicode=True, sort_keys=False) + "---\n\n"


def fmt_number(value: float | None, decimals: int = 0) -> str:
    return "—" if value is None else f"{value:,.{decimals}f}"


def fmt_auto(value: float | None) -> str:
    """Thousands without decimals, tens with one, small figures with three significant digits."""
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:,.1f}"
    return f"{value:.3g}"


def fmt_date(iso: str | None) -> str:
    """``2026-11-21T19:57:00+00:00`` -> ``2026-11-21 19:57``; unknown -> ``—``."""
    if not iso:
        return "—"
    return iso[:16].replace("T", " ")


def kind(run: PlannedRun) -> str:
    return "modelled" if run.run.summary.modelled else "measured"


def _badge(run: PlannedRun) -> str:
    k = kind(run)
    return f'<span class="cardgen-badge cardgen-{k}">{k}</span>'


def leaderboard(runs: Sequence[PlannedRun], *, here: str) -> str:
    """A sortable, filterable table of runs (newest first) as one raw HTML block; ``here`` is the page dir."""
    head = [("Model", "text"), ("GPU", "text"), ("Engine", "text"), ("Figures", "text")]
    head += [(title, "number") for _, title, _ in HEADLINE_COLUMNS] + [("Date (UTC)", "text")]
    ths = "".join(
        f'<th data-type="{t}" aria-sort="none"><button type="button">{escape(title)}</button></th>'
        for title, t in head
    )
    rows = []
    for r in sorted(runs, key=lambda r: r.run.sort_key, reverse=True):
        s = r.run.summary
        cells = [
            (s.model.lower(), f'<a href="{escape(href(here, r.page_dir))}">{escape(s.model)}</a>', ""),
            (r.gpu.lower(), f'<a href="{escape(href(here, r.gpu_dir))}">{escape(r.gpu)}</a>', ""),
            (r.engine.lower(), escape(r.engine), ""),
            (kind(r), _badge(r), ""),
        ]
        for key, _, decimals in HEADLINE_COLUMNS:
            value = headline_value(s, key)
            cells.append(("" if value is None else repr(value), fmt_number(value, decimals), "cardgen-num"))
        cells.append((r.run.started_at or "", escape(fmt_date(r.run.started_at)), ""))
        tds = "".join(
            f'<td data-sort="{escape(sort)}"'
            + (f' class="{css}" align="right"' if css else "")
            + f">{shown}</td>"
            for sort, shown, css in cells
        )
        rows.append(f'<tr data-kind="{kind(r)}">{tds}</tr>')
    return (
        '<div class="cardgen-board">\n'
        '<div class="cardgen-filters">'
        '<label>Filter <input type="search" class="cardgen-filter" placeholder="model, GPU, engine"'
        ' aria-label="Filter runs"></label> '
        '<label>Figures <select class="cardgen-kind" aria-label="Measured or modelled">'
        '<option value="">all</option><option value="measured">measured</option>'
        '<option value="modelled">modelled</option></select></label> '
        f'<span class="cardgen-count" aria-live="polite">{len(rows)} runs</span></div>\n'
        f"<table>\n<thead><tr>{ths}</tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + "\n</tbody>\n</table>\n</div>\n"
    )


def home_page(plan: SitePlan) -> str:
    n_models, n_gpus = len(plan.models), len(plan.gpus)
    return (
        front_matter("Leaderboard", hide=("navigation", "toc"))
        + "# Leaderboard\n\n"
        + f"{len(plan.runs)} runs of {n_models} model{'s' * (n_models != 1)} on {n_gpus} "
        + f"GPU{'s' * (n_gpus != 1)}. Click a column to sort; type to filter. **Modelled** figures come from "
        + "cardgen's virtual server, not from a GPU: see the [methodology](methodology.md).\n\n"
        + leaderboard(plan.runs, here="")
    )


def _header_links(r: PlannedRun) -> str:
    here = r.page_dir
    links = [
        f'Model: <a href="{escape(href(here, r.model_dir))}">{escape(r.model)}</a>',
        f'GPU: <a href="{escape(href(here, r.gpu_dir))}">{escape(r.gpu)}</a>',
        f"Engine: {escape(r.engine)}",
        _badge(r),
    ]
    if r.run.status and r.run.status != "complete":  # e.g. "died": the figures cover what was recorded
        links.append(f"Status: <strong>{escape(r.run.status)}</strong>")
    if r.compare_dir:
        links.append(f'<a href="{escape(href(here, r.compare_dir))}">compare with other runs</a>')
    return '<p class="cardgen-runinfo">' + " · ".join(links) + "</p>\n"


RAW_FILE_NOTES = {
    "summary.json": "the analysed figures (versioned JSON)",
    "requests.jsonl": "one JSON line per request, with raw timestamps",
    "run.json": "provenance: command line (secrets removed), versions, server",
}


def run_page(r: PlannedRun, card_body: str, raw_files: Sequence[tuple[str, int]]) -> str:
    """The card (front matter removed, links localized), a header of links and the downloadable raw files."""
    title = f"{r.model} on {r.gpu}"
    header = _header_links(r)
    match = re.match(r"\A\s*# .*\n", card_body)  # keep the card's own title first
    body = (
        (card_body[: match.end()] + "\n" + header + "\n" + card_body[match.end() :])
        if match
        else header + "\n" + card_body
    )
    items = []
    for rel, size in raw_files:
        note = RAW_FILE_NOTES.get(rel, "table" if rel.startswith("tables/") else "")
        items.append(
            f'<li><a href="{escape(rel)}" download>{escape(rel)}</a> ({_size(size)})'
            + (f": {escape(note)}" if note else "")
            + "</li>"
        )
    raw = (
        ('\n\n## Raw files\n\n<ul class="cardgen-files">\n' + "\n".join(items) + "\n</ul>\n") if items else ""
    )
    return front_matter(title) + body.rstrip() + "\n" + raw


def _size(n: int) -> str:
    """``1234567`` -> ``1.2 MB``."""
    if n < 1000:
        return f"{n} B"
    value, unit = n / 1000, "kB"
    for bigger in ("MB", "GB"):
        if value < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:,.1f} {unit}"


def group_page(group: Group, *, what: str) -> str:
    """A model's or a GPU's page: its runs in a leaderboard (and for a model, a link to its Compare page)."""
    title = group.name
    lines = [front_matter(title, hide=("toc",)), f"<h1>{escape(title)}</h1>\n\n"]
    others = sorted({(r.gpu if what == "model" else r.model) for r in group.runs})
    other_word = "GPU" if what == "model" else "model"
    lines.append(
        f"<p>{len(group.runs)} run{'s' * (len(group.runs) != 1)} on {len(others)} {other_word}"
        f"{'s' * (len(others) != 1)}: {escape(', '.join(others))}.</p>\n\n"
    )
    if what == "model" and group.runs[0].compare_dir:
        lines.append(
            f'<p><a href="{escape(href(group.page_dir, group.runs[0].compare_dir))}">Compare these runs'
            "</a> (scale tables and overlaid curves).</p>\n\n"
        )
    lines.append(leaderboard(group.runs, here=group.page_dir))
    return "".join(lines)


def index_page(title: str, groups: Sequence[Group], *, here: str, other: str, intro: str) -> str:
    """A list of models or GPUs: name, number of runs, and the other side (a model's GPUs, a GPU's models)."""
    rows = []
    for g in groups:
        others = sorted({(r.gpu if other == "GPUs" else r.model) for r in g.runs})
        rows.append(
            f'<tr><td><a href="{escape(href(here, g.page_dir))}">{escape(g.name)}</a></td>'
            f"<td>{len(g.runs)}</td><td>{escape(', '.join(others))}</td></tr>"
        )
    table = (
        f"<table>\n<thead><tr><th>Name</th><th>Runs</th><th>{escape(other)}</th></tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + "\n</tbody>\n</table>\n"
    )
    return front_matter(title, hide=("toc",)) + f"# {title}\n\n{intro}\n\n" + table


def compare_index(plan: SitePlan) -> str:
    groups = plan.compared
    rows = [
        f'<li><a href="{escape(href("compare", g.runs[0].compare_dir or ""))}">{escape(g.name)}</a>'
        f" ({len(g.runs)} runs)</li>"
        for g in groups
    ]
    body = (
        ("<ul>\n" + "\n".join(rows) + "\n</ul>\n")
        if rows
        else "<p>No model has two runs yet: a Compare page appears once a model is measured twice.</p>\n"
    )
    return (
        front_matter("Compare", hide=("toc",))
        + "# Compare\n\n"
        + "Runs of the same model side by side: each figure with its *scale*, the run's value divided by the "
        "baseline's (the oldest run), as in FlexGen's tables.\n\n" + body
    )


def run_label(i: int, r: PlannedRun) -> str:
    """A short, unique name for a run in a comparison."""
    return f"#{i + 1} {r.gpu} · {r.engine} · {fmt_date(r.run.started_at)}" + (
        " (modelled)" if r.run.summary.modelled else ""
    )


def scale_table_html(table: ScaleTable, runs: Sequence[PlannedRun], *, here: str) -> str:
    head = "<th>Figure</th>" + "".join(
        f'<th><a href="{escape(href(here, r.page_dir))}">{escape(run_label(i, r))}</a></th>'
        + ("" if i == 0 else "<th>scale</th>")
        for i, r in enumerate(runs)
    )
    rows = []
    for j, label in enumerate(table.rows):
        cells = [f"<td>{escape(label)}</td>"]
        for i in range(len(runs)):
            cells.append(f'<td class="cardgen-num" align="right">{fmt_auto(table.values[j][i])}</td>')
            if i:
                ratio = table.scale(j, i)
                cells.append(
                    f'<td class="cardgen-num" align="right">{"—" if ratio is None else f"{ratio:.3f}"}</td>'
                )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>\n"


def compare_page(group: Group, tables: Sequence[ScaleTable], figures: Sequence[tuple[str, str]]) -> str:
    """Scale tables (headline first), then the overlaid curves (``figures``: file name, caption)."""
    here = group.runs[0].compare_dir or ""
    parts = [
        front_matter(f"Compare: {group.name}"),
        f"<h1>Compare: {escape(group.name)}</h1>\n\n",
        f'<p>{len(group.runs)} runs of <a href="{escape(href(here, group.page_dir))}">{escape(group.name)}'
        "</a>. The baseline is the oldest run (#1); <em>scale</em> = run ÷ baseline, so above 1 means "
        "more of the figure (faster for a throughput, slower for a latency).</p>\n\n",
    ]
    for table in tables:
        parts.append(f"## {escape(table.title)}\n\n" + scale_table_html(table, group.runs, here=here) + "\n")
    if not tables:
        parts.append("<p>These runs share no figure to compare.</p>\n\n")
    if figures:
        parts.append("## Curves\n\n")
        for name, caption in figures:
            parts.append(
                f'<figure class="cardgen-figure"><img src="{escape(name)}" alt="{escape(caption)}">'
                f"<figcaption>{escape(caption)}</figcaption></figure>\n\n"
            )
    return "".join(parts)


def methodology_page(static: str, calibration: str | None) -> str:
    """The committed methodology text, plus the virtual server's calibration report when there is one."""
    page = front_matter("Methodology") + static.rstrip() + "\n"
    if calibration and calibration.strip():
        page += "\n## Virtual server calibration\n\n" + demote_headings(calibration.strip()) + "\n"
    return page
