"""Where every page of the site goes: a pure function from the gathered runs to a :class:`SitePlan`.

Every page is ``<dir>/index.md`` (``use_directory_urls: false``), so a relative link written into a page's raw
HTML resolves the same way in the source tree, in the built site and from a ``file://`` URL.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field

from cardgen.rundir import slugify
from cardgen.site.runs import SiteRun

UNKNOWN_GPU = "unknown GPU"
UNKNOWN_ENGINE = "unknown"


@dataclass(frozen=True)
class PlannedRun:
    run: SiteRun
    page_dir: str  # "runs/<model-slug>/<stamp>"
    model_dir: str  # "models/<model-slug>"
    gpu_dir: str  # "gpus/<gpu-slug>"
    compare_dir: str | None  # "compare/<model-slug>" when the model has two runs or more

    @property
    def model(self) -> str:
        return self.run.summary.model

    @property
    def gpu(self) -> str:
        return self.run.summary.gpu or UNKNOWN_GPU

    @property
    def engine(self) -> str:
        s = self.run.summary
        name = s.engine or UNKNOWN_ENGINE
        return f"{name} {s.engine_version}" if s.engine_version else name

    @property
    def configuration(self) -> tuple[str, str, bool]:
        """What a Compare page tells apart: GPU, engine with its version, modelled or measured."""
        return (self.gpu, self.engine, self.run.summary.modelled)


@dataclass(frozen=True)
class Group:
    name: str
    page_dir: str
    runs: list[PlannedRun] = field(default_factory=list)  # oldest first

    @property
    def compare_runs(self) -> list[PlannedRun]:
        """The runs a Compare page puts side by side: the newest run of each configuration (GPU, engine and
        version, measured or modelled), in the order the configurations were first measured, so the baseline is
        the oldest configuration; every run when the model has a single configuration."""
        newest: dict[tuple[str, str, bool], PlannedRun] = {}
        for r in self.runs:  # oldest first: the last one seen is the newest; insertion order is the first seen
            newest[r.configuration] = r
        return list(newest.values()) if len(newest) > 1 else list(self.runs)


@dataclass(frozen=True)
class SitePlan:
    runs: list[PlannedRun]  # oldest first
    models: list[Group]  # by name
    gpus: list[Group]

    @property
    def compared(self) -> list[Group]:
        """Models with two runs or more: each gets a Compare page."""
        return [g for g in self.models if len(g.runs) >= 2]


def _unique(slug: str, taken: set[str]) -> str:
    candidate, n = slug, 2
    while candidate in taken:
        candidate = f"{slug}-{n}"
        n += 1
    taken.add(candidate)
    return candidate


def _group_dirs(names: Iterable[str], prefix: str) -> dict[str, str]:
    taken: set[str] = {"index"}
    return {name: f"{prefix}/{_unique(slugify(name), taken)}" for name in sorted(set(names))}


def plan_site(runs: list[SiteRun]) -> SitePlan:
    """Give every run, model and GPU a unique page directory; group runs by model and by GPU."""
    model_dirs = _group_dirs((r.summary.model for r in runs), "models")
    gpu_dirs = _group_dirs((r.summary.gpu or UNKNOWN_GPU for r in runs), "gpus")
    per_model: dict[str, int] = {}
    for r in runs:
        per_model[r.summary.model] = per_model.get(r.summary.model, 0) + 1
    taken: set[str] = set()
    planned: list[PlannedRun] = []
    for r in sorted(runs, key=lambda r: r.sort_key):
        parts = [slugify(p) for p in r.rel.parts] if r.rel.parts else []
        if not parts:
            parts = [slugify(r.summary.model), slugify(r.run_dir.name)]
        key = _unique("/".join(parts), taken)
        model = r.summary.model
        compare_dir = "compare/" + model_dirs[model].split("/", 1)[1] if per_model[model] >= 2 else None
        planned.append(
            PlannedRun(
                run=r,
                page_dir=f"runs/{key}",
                model_dir=model_dirs[model],
                gpu_dir=gpu_dirs[r.summary.gpu or UNKNOWN_GPU],
                compare_dir=compare_dir,
            )
        )
    models = [Group(name, d, [p for p in planned if p.model == name]) for name, d in model_dirs.items()]
    gpus = [Group(name, d, [p for p in planned if p.gpu == name]) for name, d in gpu_dirs.items()]
    return SitePlan(runs=planned, models=models, gpus=gpus)


def href(from_dir: str, to_dir: str, file: str = "index.html") -> str:
    """The relative URL from the page in ``from_dir`` to ``file`` in ``to_dir`` (site-relative dirs)."""
    target = posixpath.join(to_dir, file) if to_dir else file
    return posixpath.relpath(target, from_dir or ".")
