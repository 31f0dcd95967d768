"""One frozen, versioned build config: the command line parses into it, run.json keeps it (no secret in it), and
``cardgen resume`` reads back how the run was built from it, where a run.json written before it existed is read
by its command line."""

from __future__ import annotations

import json

import pytest
from clirun import cardgen
from pydantic import ValidationError

from cardgen.buildconfig import (
    BuildConfig,
    LaunchTarget,
    LoadOptions,
    SuiteChoice,
    UrlTarget,
    VirtualTarget,
    worker_count,
)
from cardgen.cli.build import build, parse_build
from cardgen.cli.resume import parse_resume, resume
from cardgen.errors import UsageError
from cardgen.points import expand
from cardgen.rundir import RunDir
from cardgen.runinfo import begin_run_info
from cardgen.schemas.run import RunInfo, ServerInfo
from cardgen.suite import load_suite, parse_suite

SUITE = parse_suite("name: tiny\nscenarios:\n- {kind: closed, name: pair, prompt_tokens: 64, output_tokens: 16, "
                    "parallel: [1], min_requests: 4}\n", source="test")
T0 = 1_800_000_000.0


def parsed(*args: str) -> BuildConfig:
    with build.make_context("build", list(args)) as ctx:
        return parse_build(ctx)


def test_the_command_line_parses_into_one_config():
    virtual = parsed("CodeLlama-7b", "--suite", "quick", "--gpu", "A100-80GB,H100", "--tp", "2",
                     "--reasoning-share", "0.5", "--run-saturated", "--price-per-hour", "2.5")
    assert isinstance(virtual.target, VirtualTarget) and not virtual.over_http
    assert virtual.target.gpus == ("A100-80GB", "H100") and virtual.target.gpu_given and virtual.target.tp == 2
    assert virtual.target.served.reasoning_share == 0.5
    assert virtual.load.run_saturated and virtual.price_per_hour == 2.5 and virtual.calibrate_tolerance is None
    assert virtual.suite.name == "quick" and virtual.parsed_suite == load_suite("quick")

    measured = parsed("m", "--url", "http://127.0.0.1:9", "--workers", "auto", "--calibrate", "--api-key", "k")
    assert isinstance(measured.target, UrlTarget) and measured.over_http
    assert measured.load.workers == "auto" and measured.calibrate_tolerance == 0.05
    assert not measured.target.gpu_given
    launched = parsed("m", "--launch", "vllm", "--engine-args", "--enforce-eager", "--lora-module", "a=/x")
    assert isinstance(launched.target, LaunchTarget) and launched.target.lora_modules == ("a=/x",)
    assert parsed("m", "--real-time").over_http


@pytest.mark.parametrize("args,says", [
    (["m", "--url", "http://127.0.0.1:9", "--launch", "vllm"], "not both"),
    (["m", "--url", "http://127.0.0.1:9", "--real-time"], "--real-time is for the virtual server"),
    (["m", "--workers", "2"], "--workers applies to a load against a server"),
    (["m", "--low-latency"], "--low-latency applies to a load against a server"),
    (["m", "--calibrate"], "--calibrate measures a server"),
])
def test_options_that_do_not_go_together_fail_in_one_line(args, says):
    with pytest.raises(UsageError, match=says):
        parsed(*args)


def test_the_saved_config_masks_secrets_and_has_no_api_key():
    config = BuildConfig(model="m", suite=SuiteChoice(name="tiny", spec=SUITE),
                         target=LaunchTarget(launch="vllm", engine_args="--api-key sk-abcdefghijklmnopqrstuvw -O3"))
    saved = json.dumps(config.saved())
    assert "sk-abcdefghijklmnopqrstuvw" not in saved and "***" in saved
    assert config.target.engine_args.startswith("--api-key sk-")  # the run itself still has it
    assert "spec" not in config.saved()["suite"]  # run.json keeps the suite once, in suite_spec
    with pytest.raises(ValidationError):
        BuildConfig(model="m", suite=SuiteChoice(name="tiny"), target=UrlTarget(url="http://x"), api_key="k")


def test_an_input_forbids_unknown_fields_and_a_saved_one_ignores_them():
    config = BuildConfig(model="m", suite=SuiteChoice(name="tiny"), target=UrlTarget(url="http://x"),
                         load=LoadOptions(run_saturated=True))
    newer = config.saved() | {"added_later": 1}
    newer["load"] = newer["load"] | {"also_added": True}
    with pytest.raises(ValidationError):
        BuildConfig.model_validate(newer)
    assert BuildConfig.load_saved(newer) == config.model_copy(update={"suite": SuiteChoice(name="tiny")})
    with pytest.raises(ValueError, match="version 2"):
        BuildConfig.load_saved(newer | {"version": 2})
    with pytest.raises(ValidationError, match="frozen"):
        setattr(config.load, "run_saturated", False)  # noqa: B010  frozen: nothing changes a config once made


def run_json(tmp_path, *, command: list[str], build: BuildConfig | None, clock: str = "virtual") -> RunInfo:
    info = begin_run_info(argv=command, model="m", suite=SUITE, server=ServerInfo(url="http://x"),
                          started_unix=T0, clock=clock, modelled=clock == "virtual", build=build)
    info.status = "interrupted"
    RunDir(tmp_path).save_run_info(info)
    return RunDir(tmp_path).load_run_info()


def test_resume_reads_run_saturated_back_from_run_json_and_the_command_line_only_of_an_older_one(tmp_path):
    built = BuildConfig(model="m", suite=SuiteChoice(name="tiny", spec=SUITE), target=VirtualTarget(),
                        load=LoadOptions(run_saturated=True))
    info = run_json(tmp_path / "new", command=["cardgen", "build", "m"], build=built)
    assert info.build is not None and info.build.load.run_saturated and info.ran_saturated()
    assert not run_json(tmp_path / "plain", command=["cardgen", "build", "m", "--run-saturated"],
                        build=built.model_copy(update={"load": LoadOptions()})).ran_saturated()
    assert run_json(tmp_path / "old", command=["cardgen", "build", "m", "--run-saturated"], build=None).ran_saturated()
    assert not run_json(tmp_path / "old2", command=["cardgen", "build", "m"], build=None).ran_saturated()

    with resume.make_context("resume", [str(tmp_path / "new")]) as ctx:
        assert parse_resume(ctx, info).load.run_saturated
    with resume.make_context("resume", [str(tmp_path / "new"), "--url", "http://x"]) as ctx, \
            pytest.raises(UsageError, match="modelled in virtual time"):
        parse_resume(ctx, info)


def test_resume_runs_the_load_as_the_run_did_unless_told_otherwise(tmp_path):
    far = LoadOptions(workers=3, remote_workers=True, master_bind="10.0.0.2", master_port=5557, scrape_interval_s=0.25,
                      gpu_metrics_url="http://gpu-host:9400/metrics", low_latency=True)
    built = BuildConfig(model="m", suite=SuiteChoice(name="tiny", spec=SUITE), target=UrlTarget(url="http://x"),
                        load=far)
    info = run_json(tmp_path / "far", command=["cardgen", "build", "m"], build=built, clock="real")
    info.workers = 3
    with resume.make_context("resume", [str(tmp_path / "far")]) as ctx:  # workers on other machines, again
        load = parse_resume(ctx, info).load
    assert (load.workers, load.remote_workers, load.master_bind, load.master_port) == (3, True, "10.0.0.2", 5557)
    assert load.scrape_interval_s == 0.25 and load.gpu_metrics_url == far.gpu_metrics_url and load.low_latency
    with resume.make_context("resume", [str(tmp_path / "far"), "--local-workers", "--workers", "2", "--master-bind",
                                        "127.0.0.1", "--master-port", "0", "--scrape-interval", "1",
                                        "--no-low-latency"]) as ctx:
        load = parse_resume(ctx, info).load
    assert (load.workers, load.remote_workers, load.master_bind, load.master_port) == (2, False, "127.0.0.1", 0)
    assert load.scrape_interval_s == 1.0 and not load.low_latency
    old = run_json(tmp_path / "old", command=["cardgen", "build", "m", "--url", "http://x"], build=None, clock="real")
    with resume.make_context("resume", [str(tmp_path / "old")]) as ctx:  # no saved config: the defaults
        load = parse_resume(ctx, old).load
    assert (load.workers, load.remote_workers, load.master_port, load.scrape_interval_s) == (0, False, 0, 0.5)
    assert not load.low_latency


def test_a_modelled_build_keeps_its_config_in_run_json(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text("name: tiny\nscenarios:\n- {kind: closed, name: pair, prompt_tokens: 64, output_tokens: 16, "
                     "parallel: [1], min_requests: 4}\n")
    proc = cardgen("build", "CodeLlama-7b", "--suite", str(suite), "--out", str(tmp_path / "run"), "--no-card",
                   "--quiet", "--run-saturated", "--tp", "2")
    assert proc.returncode == 0, proc.stderr
    info = RunDir(tmp_path / "run").load_run_info()
    assert info.build is not None and info.build.model == "CodeLlama-7b"
    assert info.build.suite.name == str(suite) and info.build.load.run_saturated
    assert isinstance(info.build.target, VirtualTarget) and info.build.target.tp == 2
    assert info.ran_saturated()


@pytest.mark.parametrize(("value", "remote", "says"), [
    ("many", False, "--workers must be a number of processes or auto, not 'many'"),
    (-1, False, "--workers must be 0 (one process), more, or auto"),
    ("auto", True, "--workers auto counts this machine's cores: give the number of remote workers"),
])
def test_one_workers_rule_for_the_command_line_and_the_load_stage(value, remote, says):
    """The command line checks --workers once, by worker_count, before the load engine loads (build and resume
    alike), and the config keeps what it parsed: the load stage checks it no more. (The stage is not imported
    here: Locust patches gevent into the process on import, which hangs an xdist worker's threads.)"""
    with pytest.raises(UsageError) as cli:
        worker_count(value, remote_workers=remote)
    assert str(cli.value) == says
    assert worker_count(" Auto ") == "auto" and worker_count("3") == 3 and worker_count(0, remote_workers=True) == 0


def test_the_config_holds_what_the_command_line_checked_once():
    """parse_build checks the URL and --workers once and keeps what it parsed (the base URL, the count), and the
    suite's points, expanded once: nothing after parses them again. run.json keeps --workers as text, so a
    run.json written before (``"0"``) and one an older cardgen reads both work."""
    config = parsed("m", "--url", "http://127.0.0.1:9/v1/", "--workers", "3", "--suite", "quick")
    assert isinstance(config.target, UrlTarget) and config.target.url == "http://127.0.0.1:9"
    assert config.load.workers == 3 and config.saved()["load"]["workers"] == "3"
    assert [p.name for p in config.points] == [p.name for p in expand(load_suite("quick"))]
    assert parsed("m", "--url", "http://127.0.0.1:9", "--workers", " Auto ").load.workers == "auto"
    older = config.saved() | {"load": config.saved()["load"] | {"workers": "0"}}
    assert BuildConfig.load_saved(older).load.workers == 0
    with pytest.raises(ValueError, match="no points"):
        BuildConfig.load_saved(older).points  # noqa: B018  read back: run.json's suite_spec has them
