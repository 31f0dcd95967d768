"""What the card template sees: a typed context assembled from the card's sections (pure).

Each section lives in its own module of :mod:`cardgen.card.sections`; this module only puts them together under
the names the template uses. Tables arrive as :class:`~cardgen.card.table.TableView` of already-formatted cell
strings; the template escapes every cell when it prints it. Only values cardgen itself made (figure paths, the
front matter) are marked safe.
"""

from __future__ import annotations

from typing import TypedDict

from markupsafe import Markup

from cardgen.analysis.analyse import Analysis
from cardgen.card.kindparts import kind_methods, kind_sections
from cardgen.card.sections.adapters import AdaptersSection, adapters_section
from cardgen.card.sections.calibration import CalibrationView, calibration_view
from cardgen.card.sections.cost import cost_table
from cardgen.card.sections.datasets import DatasetSection, dataset_sections, nightly_code, nightly_table
from cardgen.card.sections.figures import figure_paths
from cardgen.card.sections.frames import fastgen_view
from cardgen.card.sections.gpu import gpu_tables, no_telemetry_reason
from cardgen.card.sections.head import banner, card_front_matter, title
from cardgen.card.sections.kv_cache import kv_estimates
from cardgen.card.sections.launch import launch_table
from cardgen.card.sections.main import main_table
from cardgen.card.sections.modelled_error import ModelledError, modelled_error
from cardgen.card.sections.parameters import parameters_table
from cardgen.card.sections.reasoning import ReasoningSection, reasoning_section
from cardgen.card.sections.replay import ReplaySection, replay_sections
from cardgen.card.sections.scenarios import scenarios_table
from cardgen.card.sections.server_vs_client import server_vs_client_tables
from cardgen.card.sections.speculative import SpeculativeSection, speculative_section
from cardgen.card.sections.time_budget import dominant_notes, engine_ingestion, time_budget_table
from cardgen.card.table import TableView
from cardgen.saturation import MAX_KV_USAGE, MIN_SPEED_TOK_S, WATCHED_FULL_USAGE
from cardgen.schemas.summary import Summary


class SaturationRule(TypedDict):
    """The thresholds of :mod:`cardgen.saturation`, for the card's method text."""

    max_kv_usage: float
    min_speed_tok_s: float
    watched_full_usage: float  # a watched point saturates when requests wait at this KV usage or more


class WorkloadSections(TypedDict):
    nightly: TableView | None  # seed 003's serving table, its columns exactly
    nightly_json: Markup | None
    datasets: list[DatasetSection]


class CardContext(TypedDict):
    s: Summary
    title: str
    front_matter: Markup
    banner: str | None
    card_date: str
    figures: dict[str, Markup | None]
    main: TableView
    kv_estimates: TableView | None
    fastgen: TableView | None
    parameters: TableView
    launch: TableView | None
    gpu: TableView | None
    gpu_per_device: TableView | None
    gpu_reason: str
    server_latency: TableView | None
    server_tokens: TableView | None
    server_points: TableView | None
    server_notes: list[str]
    scenarios: TableView | None
    saturation: SaturationRule
    workloads: WorkloadSections  # dataset serving tests (issue 11)
    modelled_error: ModelledError | None  # a modelled run's expected error per headline (issue 12)
    reasoning: ReasoningSection | None  # reasoning models, speculative decoding, LoRA adapters (issue 22)
    speculative: SpeculativeSection | None
    adapters: AdaptersSection | None
    cost: TableView | None  # cost per million tokens per point, with a price (issue 23)
    replays: list[ReplaySection]  # replayed traces (issue 23)
    calibration: CalibrationView | None  # a calibrated run: measured and predicted points (issue 21)
    time_budget: TableView | None  # where the time goes: each point's TTFT in the engine's parts (issue 27)
    time_notes: list[str]  # a part other than prompt compute that takes most of the time, and why
    engine_ingestion: str | None  # the engine's own ingestion speed beside the client's
    kind_methods: Markup  # the installed kinds' paragraphs of the method text (cardgen.card.kindparts)
    kind_sections: dict[str, Markup]  # the installed kinds' own sections, by the card's slot (cardgen.card.kindparts)


def _workload_sections(analysis: Analysis) -> WorkloadSections:
    w = analysis.workloads
    if w is None:
        return WorkloadSections(nightly=None, nightly_json=None, datasets=[])
    return WorkloadSections(nightly=nightly_table(w), nightly_json=nightly_code(w), datasets=dataset_sections(w))


def card_context(analysis: Analysis, *, date: str) -> CardContext:
    """Everything the card template prints, from the analysis and the figure files listed in its summary."""
    s = analysis.summary
    t = analysis.tables
    gpu, gpu_per_device = gpu_tables(s.gpu_telemetry)
    server_latency, server_tokens, server_points, server_notes = server_vs_client_tables(s.server_vs_client)
    saturation = SaturationRule(max_kv_usage=MAX_KV_USAGE, min_speed_tok_s=MIN_SPEED_TOK_S,
                                watched_full_usage=WATCHED_FULL_USAGE)
    return CardContext(
        s=s, title=title(s), front_matter=card_front_matter(s), banner=banner(s), card_date=date,
        figures=figure_paths(s), main=main_table(s), kv_estimates=kv_estimates(s.kv_cache),
        fastgen=fastgen_view(t.get("fastgen")),
        parameters=parameters_table(s, analysis.info, date), launch=launch_table(analysis.info), gpu=gpu,
        gpu_per_device=gpu_per_device, gpu_reason=no_telemetry_reason(s.gpu_telemetry),
        server_latency=server_latency, server_tokens=server_tokens, server_points=server_points,
        server_notes=server_notes, scenarios=scenarios_table(s),
        saturation=saturation,
        workloads=_workload_sections(analysis),
        modelled_error=modelled_error(s, analysis.info),
        reasoning=reasoning_section(s), speculative=speculative_section(s), adapters=adapters_section(s),
        cost=cost_table(s), replays=replay_sections(s),
        calibration=calibration_view(s, analysis.info),
        time_budget=time_budget_table(s.time_budget), time_notes=dominant_notes(s.time_budget),
        engine_ingestion=engine_ingestion(s.time_budget, s.ingestion, s.scenarios),
        kind_sections=kind_sections(s), kind_methods=kind_methods(saturation=saturation),
    )
