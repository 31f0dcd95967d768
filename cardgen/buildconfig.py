"""What a build is: one frozen, versioned :class:`BuildConfig`, the only thing ``cardgen build`` hands on.

The command line parses its options into it (:mod:`cardgen.cli.build`), and every stage after takes it whole,
as mkdocs hands its config from stage to stage: the measured, calibrated and real-time runs
(:mod:`cardgen.cli.measure`), the modelled run (:mod:`cardgen.sim.modelled`), the card. ``run.json`` stores it
(``RunInfo.build``), and ``cardgen resume`` reads back how the run was built (``--run-saturated``) from there
instead of searching the saved command line.

    BuildConfig         version, model, price_per_hour, calibrate_tolerance (None: not calibrated)
      suite             SuiteChoice: the name or file as given, the suite parsed and its points, expanded once
                        (neither saved: run.json keeps the suite once, in ``suite_spec``)
      target            UrlTarget      a running server (--url)
                        LaunchTarget   an engine cardgen starts (--launch, --engine-args, --lora-module)
                        VirtualTarget  the virtual server, in virtual time or over HTTP (--real-time), and what
                                       its model does (ServedOptions)
                        each: --engine, the GPUs, tensor parallel, --model-config
      load              LoadOptions: workers (parsed: a count or auto), the Locust master, scrapes,
                        --run-saturated
      outputs           Outputs: where the run directory goes, --no-card, --quiet

Secrets are never written to a run directory, so none is a field: the API key travels beside the config, as
an argument of the stage that sends requests; ``--engine-args`` is saved with its secrets masked
(:mod:`cardgen.redact`).

The command line checks every option once, as it parses them (:func:`cardgen.cli.build.parse_build`): the parts
hold what it checked (the server's base URL, the count of workers), and no stage checks them again. A run over
HTTP is this config with what the run resolved (its directory, the server's URL): a
:class:`cardgen.runinfo.RunPlan`.

As an input it forbids unknown fields (a typo fails); as saved (:meth:`BuildConfig.load_saved`) it ignores them,
so a run.json from a newer cardgen that only added fields still loads. A change an older cardgen would misread
bumps ``version``. Pure: no click, no file, no clock.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_serializer, model_validator

from cardgen.errors import UsageError
from cardgen.points import Point, expand
from cardgen.redact import MASK, redact_argv
from cardgen.suite import Suite

BUILD_CONFIG_VERSION: Final = 1
_SAVED = "saved"  # the validation context of a config read back from run.json


class _Part(BaseModel):
    """A frozen piece of the config: unknown fields fail, except when read back as saved."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _saved_ignores_unknown(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and info.context and info.context.get(_SAVED):
            return {key: value for key, value in data.items() if key in cls.model_fields}
        return data


class SuiteChoice(_Part):
    """The suite: as ``--suite`` named it (quick | standard | full | a .yaml file), parsed, and its points (the
    suite expanded once, when it is parsed: every stage of the build takes these)."""

    name: str
    spec: Suite | None = Field(default=None, exclude=True)  # None only as read back: run.json has ``suite_spec``
    points: tuple[Point, ...] = Field(default=(), exclude=True)  # expand(spec); () as read back

    @model_validator(mode="before")
    @classmethod
    def _expanded(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("spec"), Suite) and "points" not in data:
            return {**data, "points": tuple(expand(data["spec"]))}
        return data


class ServedOptions(_Part):
    """What the virtual server's model does besides answering, as given (``cardgen.sim.served.ServedModel`` is
    made from these and the suite's adapters)."""

    reasoning_share: float = 0.0
    spec_tokens: int = 0
    spec_acceptance: float | None = None
    spec_method: str = "ngram"
    lora_rank: int | None = None
    max_loras: int | None = None
    host_s_per_token: float = 0.0


class _Target(_Part):
    """What every server is described by. ``engine``: ``--engine`` as given (a real server's adapter or engine
    profile, the virtual server's profile; None: detect, or vllm). With a real server, the GPU, tensor parallel
    and config.json are for the cost plan and a calibration's starting point."""

    kind: str
    engine: str | None = None
    gpus: tuple[str, ...] = ("A100-80GB",)
    gpu_given: bool = False  # --gpu given, not its default
    tp: int = 1
    model_config_path: Path | None = None  # --model-config: a Hugging Face config.json


class UrlTarget(_Target):
    """A running OpenAI-compatible server."""

    kind: Literal["url"] = "url"
    url: str  # its base URL, as the command line checked it (cardgen.urls.check_url: no trailing / or /v1)


class LaunchTarget(_Target):
    """An engine cardgen starts on loopback, measures and stops."""

    kind: Literal["launch"] = "launch"
    launch: str  # vllm | sglang | tgi | llamacpp
    engine_args: str = ""  # as given to --engine-args (saved with its secrets masked)
    lora_modules: tuple[str, ...] = ()  # NAME=PATH, each served beside the model

    @field_serializer("engine_args")
    def _masked(self, engine_args: str) -> str:
        try:
            return shlex.join(redact_argv(shlex.split(engine_args)))
        except ValueError:  # not a command line cardgen can read: nothing of it is saved
            return MASK if engine_args else ""


class VirtualTarget(_Target):
    """The built-in virtual GPU server: computed in virtual time, or with ``real_time`` served on loopback and
    measured over HTTP by the load engine."""

    kind: Literal["virtual"] = "virtual"
    real_time: bool = False
    served: ServedOptions = ServedOptions()


Target = Annotated[UrlTarget | LaunchTarget | VirtualTarget, Field(discriminator="kind")]


class LoadOptions(_Part):
    """How the load runs: the Locust processes and master, GPU telemetry, and which points it skips."""

    # a count of processes or auto, as :func:`worker_count` parsed it (None: a resumed run's, as the run did);
    # saved as text, as older cardgens read it
    workers: int | Literal["auto"] | None = 0
    remote_workers: bool = False
    master_bind: str = "127.0.0.1"
    master_port: int = 0
    scrape_interval_s: float = 0.5
    gpu_metrics_url: str | None = None
    run_saturated: bool = False  # run the parallel counts a saturated point would skip
    low_latency: bool = False  # hold the load generator's CPUs out of idle while it sends (cardgen.load.wake)

    @field_serializer("workers")
    def _as_text(self, workers: int | str | None) -> str | None:
        return None if workers is None else str(workers)


def worker_count(value: int | str | None, *, remote_workers: bool = False) -> int | Literal["auto"]:
    """``--workers`` as the load runs it: a count of Locust worker processes (0: the load in this process), or
    ``auto`` (chosen for the suite on this machine's cores, so never with workers started on other machines); a
    one-line UsageError for anything else. The command line checks it once, before the load engine loads, and
    :class:`LoadOptions` keeps what it parsed."""
    text = str(value).strip().lower()
    if text == "auto":
        if remote_workers:
            raise UsageError("--workers auto counts this machine's cores: give the number of remote workers")
        return "auto"
    try:
        workers = int(text)
    except ValueError:
        raise UsageError(f"--workers must be a number of processes or auto, not {value!r}") from None
    if workers < 0:
        raise UsageError("--workers must be 0 (one process), more, or auto")
    return workers


class Outputs(_Part):
    """Where the run goes, and what is said and written besides the raw files."""

    out_dir: Path | None = None  # None: runs_root/<model>/<UTC time>/
    runs_root: Path = Path("runs")
    no_card: bool = False
    quiet: bool = False


class BuildConfig(_Part):
    """One ``cardgen build``: what is measured or modelled, with which suite, how, and where it goes."""

    version: Literal[1] = BUILD_CONFIG_VERSION
    model: str
    suite: SuiteChoice
    target: Target
    load: LoadOptions = LoadOptions()
    outputs: Outputs = Outputs()
    price_per_hour: float | None = None  # USD per GPU-hour (None: the GPU file's, or no price)
    calibrate_tolerance: float | None = None  # a calibrated build's spot-check tolerance; None: not calibrated

    @property
    def parsed_suite(self) -> Suite:
        """The suite as parsed; a config read back from run.json has none (take run.json's ``suite_spec``)."""
        if self.suite.spec is None:
            raise ValueError("a build config read back from run.json holds no parsed suite: read run.json's "
                             "suite_spec")
        return self.suite.spec

    @property
    def points(self) -> tuple[Point, ...]:
        """The suite's points, expanded once when the suite was parsed; a config read back from run.json has
        none."""
        if self.suite.spec is None:
            raise ValueError("a build config read back from run.json holds no points: expand run.json's suite_spec")
        return self.suite.points

    @property
    def over_http(self) -> bool:
        """Whether the build measures a server over HTTP (a real one, or the virtual one with ``real_time``)
        rather than computing a modelled run in virtual time."""
        return not isinstance(self.target, VirtualTarget) or self.target.real_time

    def saved(self) -> dict[str, Any]:
        """The config as run.json stores it: secrets masked, no parsed suite."""
        return self.model_dump(mode="json")

    @classmethod
    def load_saved(cls, data: Any) -> BuildConfig:
        """The config as run.json stored it. Fields a newer cardgen added are ignored; a newer ``version``
        fails."""
        if isinstance(data, dict) and data.get("version", BUILD_CONFIG_VERSION) != BUILD_CONFIG_VERSION:
            raise ValueError(f"the build config is version {data.get('version')}; this cardgen reads version "
                             f"{BUILD_CONFIG_VERSION}: upgrade cardgen")
        return cls.model_validate(data, context={_SAVED: True})


class ResumeConfig(_Part):
    """One ``cardgen resume``: the options of this session, the ones it shares with ``build`` parsed into the
    same parts. Not saved: run.json keeps how the run was built, and the session reads that back
    (``load.run_saturated`` is the session's ``--run-saturated`` or the build's; a run over HTTP has
    ``load.workers`` as the session's ``--workers``, parsed, or the count the run had)."""

    run_dir: Path
    url: str | None = None  # None: the server run.json names ...
    launch: str | None = None  # ... or start this engine again
    engine_args: str = ""
    engine: str | None = None  # --engine: force the adapter
    model_config_path: Path | None = None  # --model-config: the virtual server's config.json
    load: LoadOptions = LoadOptions(workers=None)
    outputs: Outputs = Outputs()
