"""The text of every generated page: pure functions from the :class:`~cardgen.site.plan.SitePlan` to Markdown.

Anything that came from a server or a command line (model, GPU and engine names, the card) is either
HTML-escaped here or passes through :mod:`cardgen.site.sanitize` when MkDocs renders it. Tables with links are
raw HTML, so their relative URLs are computed with :func:`~cardgen.site.plan.href`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import yaml

from cardgen import numbers
from cardgen.diff import CANNOT_TELL, FASTER, LARGER, NO_CHANGE, NO_SIGNIFICANT_CHANGE, FigureDiff
from cardgen.site import charts
from cardgen.site.compare import ScaleTable
from cardgen.site.mdtext import demote_headings
from cardgen.site.plan import Group, PlannedRun, SitePlan, href
from cardgen.site.tradeoff import COST_COLUMN, headline_cost, tradeoff_chart

HEADLINE_COLUMNS = (  # (headline key, column title, unit: how the card shows it, cardgen.numbers.figure)
    ("prompt_ingestion_tok_s", "Prompt ingestion (tok/s)", "tok/s"),
    ("generation_tok_s_at_10_parallel_1024_128", "Generation @10 parallel, 1024→128 (tok/s per request)", "tok/s"),
    ("kv_cache_tokens", "KV cache (tokens)", "tokens"),
)
CHART_X, CHART_Y = HEADLINE_COLUMNS[0], HEADLINE_COLUMNS[1]  # the leaderboard's chart


def headline_value(run: PlannedRun, key: str) -> float | None:
    """A headline figure of a run's summary (None when it was not measured)."""
    value = getattr(run.run.summary.headline, key, None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def front_matter(title: str, *, hide: Sequence[str] = (), search: bool = True) -> str:
    """YAML front matter; the theme prints the title as HTML, so it is escaped here. ``search=False`` keeps the
    page out of the search index: a run's, model's, GPU's or comparison's page is found through the leaderboard
    and the indexes (which are searched), and indexing thousands of card tables would cost most of a build."""
    meta: dict[str, object] = {"title": escape(title)}
    if hide:
        meta["hide"] = list(hide)
    if not search:
        meta["search"] = {"exclude": True}
    return "---\n" + yaml.safe_dump(meta, allow_unicode=True, sort_keys=False) + "---\n\n"


def fmt_date(iso: str | None) -> str:
    """``2026-11-21T19:57:00+00:00`` -> ``2026-11-21 19:57``; unknown -> :data:`cardgen.numbers.DASH`."""
    if not iso:
        return numbers.DASH
    return iso[:16].replace("T", " ")


def kind(run: PlannedRun) -> str:
    return "modelled" if run.run.summary.modelled else "measured"


def _badge(run: PlannedRun) -> str:
    k = kind(run)
    return f'<span class="cardgen-badge cardgen-{k}">{k}</span>'


def _row_key(r: PlannedRun) -> str:
    return r.page_dir


def leaderboard_chart(runs: Sequence[PlannedRun], *, here: str) -> str:
    """The headline figures of every run as a scatter (prompt ingestion across, generation at 10 parallel up):
    a colour per GPU, modelled runs hollow. Each marker is its run's row: filtering the table hides it."""
    (xkey, xtitle, _), (ykey, ytitle, _) = CHART_X, CHART_Y
    gpus = sorted({r.gpu for r in runs})
    series = []
    for g, gpu in enumerate(gpus):
        for modelled in (False, True):
            points = [charts.Point(x, y, title=f"{r.model} on {r.gpu} ({kind(r)}): {numbers.tok_s(x)} ingestion, "
                                   f"{numbers.tok_s(y)} per request", href=href(here, r.page_dir), key=_row_key(r))
                      for r in runs if r.gpu == gpu and r.run.summary.modelled == modelled
                      for x, y in [(headline_value(r, xkey), headline_value(r, ykey))]
                      if x is not None and y is not None]
            if points:
                series.append(charts.Series(f"{gpu} ({'modelled' if modelled else 'measured'})", points,
                                            charts.color(g), hollow=modelled, line=False))
    shown = sum(len(s.points) for s in series)
    notes = ["Filled: measured; hollow: modelled by cardgen's virtual server."]
    if shown < len(runs):
        notes.append(f"{len(runs) - shown} of {len(runs)} runs lack one of the two figures and are not drawn.")
    return charts.chart_svg(charts.Chart(title="Headline figures of every run", xlabel=xtitle, ylabel=ytitle,
                                         series=series, x_from_zero=True, notes=notes))


def leaderboard(runs: Sequence[PlannedRun], *, here: str, chart: bool = False) -> str:
    """A sortable, filterable table of runs (newest first) as one raw HTML block; ``here`` is the page dir.
    ``chart``: the headline figures drawn above the table. The filters and the sort are kept in the page's
    address (its ``#`` part), so a view can be shared."""
    head = [("Model", "text"), ("GPU", "text"), ("Engine", "text"), ("Figures", "text")]
    head += [(title, "number") for _, title, _ in HEADLINE_COLUMNS] + [(COST_COLUMN, "number"), ("Date (UTC)", "text")]
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
        for key, _, unit in HEADLINE_COLUMNS:
            value = headline_value(r, key)
            cells.append(("" if value is None else repr(value), numbers.figure(value, unit), "cardgen-num"))
        cost = headline_cost(s)
        cells.append(("" if cost is None else repr(cost), numbers.usd(cost), "cardgen-num"))
        cells.append((r.run.started_at or "", escape(fmt_date(r.run.started_at)), ""))
        tds = "".join(
            f'<td data-sort="{escape(sort)}"'
            + (f' class="{css}" align="right"' if css else "")
            + f">{shown}</td>"
            for sort, shown, css in cells
        )
        rows.append(f'<tr data-kind="{kind(r)}" data-key="{escape(_row_key(r))}">{tds}</tr>')
    gpus = sorted({r.gpu for r in runs})
    gpu_options = "".join(f'<option value="{escape(g.lower())}">{escape(g)}</option>' for g in gpus)
    return (
        '<div class="cardgen-board">\n'
        + (leaderboard_chart(runs, here=here) + "\n" + tradeoff_chart(runs, here=here, keys=_row_key) + "\n"
           if chart else "")
        + '<div class="cardgen-filters">'
        '<label>Filter <input type="search" class="cardgen-filter" placeholder="model, GPU, engine"'
        ' aria-label="Filter runs"></label> '
        '<label>GPU <select class="cardgen-gpu" aria-label="GPU">'
        f'<option value="">all</option>{gpu_options}</select></label> '
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
        + f"GPU{'s' * (n_gpus != 1)}. Click a column to sort; type or choose to filter (the address keeps the "
        + "view: copy it to share it). **Modelled** figures come from cardgen's virtual server, not from a GPU: "
        + "see the [methodology](methodology.md).\n\n"
        + leaderboard(plan.runs, here="", chart=True)
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


@dataclass(frozen=True)
class RunPage:
    """A run's page in parts: the card (front matter removed, links localized), a header of links that goes
    right after the card's title (raw HTML), and the downloadable raw files (a Markdown section, or nothing)."""

    title: str
    card: str
    header: str
    raw: str

    @property
    def split(self) -> int:
        """Where the header goes in the card: after its title line (0: before everything)."""
        match = re.match(r"\A\s*# .*\n", self.card)  # keep the card's own title first
        return match.end() if match else 0

    def text(self) -> str:
        """The page's source."""
        cut = self.split
        body = self.card[:cut] + "\n" + self.header + "\n" + self.card[cut:] if cut else self.header + "\n" + self.card
        return front_matter(self.title, search=False) + body.rstrip() + "\n" + self.raw


def run_page(r: PlannedRun, card_body: str, raw_files: Sequence[tuple[str, int]]) -> RunPage:
    """The card (front matter removed, links localized), a header of links and the downloadable raw files."""
    items = []
    for rel, size in raw_files:
        note = RAW_FILE_NOTES.get(rel, "table" if rel.startswith("tables/") else "")
        items.append(
            f'<li><a href="{escape(rel)}" download>{escape(rel)}</a> ({numbers.file_size(size)})'
            + (f": {escape(note)}" if note else "")
            + "</li>"
        )
    raw = (
        ('\n\n## Raw files\n\n<ul class="cardgen-files">\n' + "\n".join(items) + "\n</ul>\n") if items else ""
    )
    return RunPage(f"{r.model} on {r.gpu}", card_body, _header_links(r), raw)


def group_page(group: Group, *, what: str, chart_html: Sequence[str] = ()) -> str:
    """A model's or a GPU's page: for a model, its runs' curves overlaid first (``chart_html``), then its runs
    in a leaderboard (and a link to its Compare page)."""
    title = group.name
    lines = [front_matter(title, hide=("toc",), search=False), f"<h1>{escape(title)}</h1>\n\n"]
    others = sorted({(r.gpu if what == "model" else r.model) for r in group.runs})
    other_word = "GPU" if what == "model" else "model"
    lines.append(
        f"<p>{len(group.runs)} run{'s' * (len(group.runs) != 1)} on {len(others)} {other_word}"
        f"{'s' * (len(others) != 1)}: {escape(', '.join(others))}.</p>\n\n"
    )
    if chart_html:
        lines.append(
            "<p>Throughput against interactivity, every run overlaid: output tokens/s per GPU against what each "
            "user gets (median decode speed) and against the median TTFT, a point per parallel count; each run's "
            "Pareto front circled, modelled runs dashed and hollow. Click a point for its run.</p>\n\n"
            + '<div class="cardgen-charts">' + "".join(chart_html) + "</div>\n\n")
    if what == "model" and group.runs[0].compare_dir:
        lines.append(
            f'<p><a href="{escape(href(group.page_dir, group.runs[0].compare_dir))}">Compare these runs'
            "</a> (every figure's ratio with its significance).</p>\n\n"
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
        + "Each model's GPUs and engines side by side: each figure with its *scale*, the value divided by the "
        "baseline's, as in FlexGen's tables, and whether the difference is significant, as `cardgen diff` "
        "computes it.\n\n" + body
    )


def run_name(r: PlannedRun) -> str:
    """A run among the runs of its model: ``H100 · vllm 0.6.3 · 2026-11-21 19:57 (modelled)``."""
    return f"{r.gpu} · {r.engine} · {fmt_date(r.run.started_at)}" + (" (modelled)" if r.run.summary.modelled else "")


def run_label(i: int, r: PlannedRun) -> str:
    """A short, unique name for a run in a comparison."""
    return f"#{i + 1} {run_name(r)}"


_MARKS = {FASTER: ("▲", "better"), LARGER: ("▲", "better"), NO_SIGNIFICANT_CHANGE: ("=", "same"),
          NO_CHANGE: ("=", "same"), CANNOT_TELL: ("?", "unknown")}


def ratio_cell(d: FigureDiff | None) -> str:
    """B / A with its significance: ▲ significantly better, ▼ significantly worse, = no significant change, ?
    no interval; the interval and the verdict in the tooltip."""
    if d is None or d.ratio is None:
        return f'<td class="cardgen-num" align="right">{numbers.DASH}</td>'
    mark, css = _MARKS.get(d.verdict, ("▼", "worse"))
    if d.ci_low is not None and d.ci_high is not None:
        how = "exact" if d.interval == "exact" else f"95 % interval {numbers.ratio_interval(d.ci_low, d.ci_high)}"
        tip = f"{how}: {d.verdict}"
    else:
        tip = f"{d.verdict}" + (f": {d.note}" if d.note else "")
    return (f'<td class="cardgen-num cardgen-{css}" align="right" title="{escape(tip)}">'
            f"{numbers.ratio(d.ratio)} {mark}</td>")


def scale_table_html(table: ScaleTable, runs: Sequence[PlannedRun], *, here: str) -> str:
    head = "<th>Figure</th>" + "".join(
        f'<th><a href="{escape(href(here, r.page_dir))}">{escape(run_label(i, r))}</a></th>'
        + ("" if i == 0 else "<th>scale</th>")
        for i, r in enumerate(runs)
    )
    rows = []
    for label, cells in zip(table.rows, table.cells, strict=True):
        tds = [f"<td>{escape(label)}</td>"]
        for i, cell in enumerate(cells):
            tds.append(f'<td class="cardgen-num" align="right">{numbers.figure(cell.value, cell.unit)}</td>')
            if i:
                tds.append(ratio_cell(cell.diff))
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>\n"


def compare_page(group: Group, tables: Sequence[ScaleTable], chart_html: Sequence[str]) -> str:
    """Scale tables (headline first) with every ratio's significance, then the curves overlaid."""
    here = group.runs[0].compare_dir or ""
    runs = group.compare_runs
    older = [r for r in group.runs if r not in runs]
    by_configuration = len({r.configuration for r in runs}) > 1
    parts = [
        front_matter(f"Compare: {group.name}", search=False),
        f"<h1>Compare: {escape(group.name)}</h1>\n\n",
        f"<p>{len(runs)} {'configurations' if by_configuration else 'runs'} of "
        f'<a href="{escape(href(here, group.page_dir))}">{escape(group.name)}</a>'
        + (" (GPU, engine and version, measured or modelled: the newest run of each)" if by_configuration else "")
        + ". The baseline is #1; <em>scale</em> = figure ÷ baseline's, so above 1 means more of the figure "
        "(faster for a throughput, slower for a latency). Each scale carries its significance as "
        "<code>cardgen diff</code> computes it: ▲ significantly better, ▼ significantly worse, = no significant "
        "change (the 95 % bootstrap interval of the ratio, from each run's own requests, holds 1), ? no interval "
        "(too few rounds, or a figure without spread); the interval is in each scale's tooltip.</p>\n\n",
    ]
    if older:
        links = ", ".join(f'<a href="{escape(href(here, r.page_dir))}">{escape(run_name(r))}</a>' for r in older)
        parts.append(f"<p>Older runs of the same configurations, not shown: {links}.</p>\n\n")
    for table in tables:
        parts.append(f"## {escape(table.title)}\n\n" + scale_table_html(table, runs, here=here) + "\n")
    if not tables:
        parts.append("<p>These runs share no figure to compare.</p>\n\n")
    if chart_html:
        parts.append("## Curves\n\n" + '<div class="cardgen-charts">' + "".join(chart_html) + "</div>\n\n")
    return "".join(parts)


def methodology_page(static: str, calibration: str | None) -> str:
    """The committed methodology text, plus the virtual server's calibration report when there is one."""
    page = front_matter("Methodology") + static.rstrip() + "\n"
    if calibration and calibration.strip():
        page += "\n## Virtual server calibration\n\n" + demote_headings(calibration.strip()) + "\n"
    return page
