"""One secret rule (cardgen.redact), seen from everywhere a secret could leak: the command line saved in run.json,
an engine's launch record (command, arguments, engine arguments, environment), its log, and the card.

Each case below was once masked by one of three rules and not by another: the launch's own argument parser
masked only --api-key, --token and --hf-token; the launch's environment filter and the card's used words
(TOKEN, KEY...) where cardgen.redact used the shape of a name; and none looked inside --engine-args or at the
shape of a value.
"""

from __future__ import annotations

import shlex

import pytest
from simruns import synthetic_run

from cardgen.analysis.analyse import analyse
from cardgen.card.render import render_card
from cardgen.card.sections.launch import launch_table
from cardgen.engines import launched_engine
from cardgen.engines.launch import parse_arguments
from cardgen.redact import MASK, redact_argv, redact_mapping, scrub, secret_values

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
# (engine arguments, the secret they hold): flags only cardgen.redact called secret, a credential-shaped value
FLAG_CASES = [
    (["--admin-api-key", "sekrit-admin"], "sekrit-admin"),
    (["--x-api-key=sekrit-x"], "sekrit-x"),
    (["--ssl-secret", "sekrit-ssl"], "sekrit-ssl"),
    (["--db-password", "sekrit-db"], "sekrit-db"),
    (["--auth-token", "sekrit-auth"], "sekrit-auth"),
    (["--access-token=sekrit-access"], "sekrit-access"),
    (["--served-model-name", HF], HF),  # no secret name: the value's shape gives it away
]
# environment variables only the word rule called secret
ENV_CASES = {"VLLM_S3_ACCESS_KEY_ID": "sekrit-env1", "SGLANG_TOKEN_FILE": "sekrit-env2", "VLLM_KEY": "sekrit-env3"}


@pytest.mark.parametrize(("args", "secret"), FLAG_CASES)
def test_each_formerly_disagreeing_flag_is_masked_on_every_path(args, secret):
    assert secret not in " ".join(redact_argv(["cardgen", "build", "m", "--launch", "vllm", *args]))
    assert secret not in repr(parse_arguments(["serve", "m", *args]))
    # cardgen's own command line holds the engine's as one argument (--engine-args), with or without '='
    joined = shlex.join(args)
    for argv in (["cardgen", "build", "m", "--engine-args", joined], ["cardgen", "build", "m", f"--engine-args={joined}"]):
        shown = redact_argv(argv)
        assert secret not in " ".join(shown) and MASK in " ".join(shown)
        assert secret in secret_values(argv)


def test_a_nested_command_line_without_secrets_is_kept_as_it_was():
    argv = ["cardgen", "build", "m", "--engine-args", "--enforce-eager --max-num-seqs 8",
            "--engine-args=--rope-scaling '{\"a\": 1}'"]
    assert redact_argv(argv) == argv and secret_values(argv) == []


def test_mappings_and_text_are_masked_by_the_same_rule():
    assert redact_mapping({"served_model_name": HF, "eos_token": "</s>", "db_password": "x"}) == {
        "served_model_name": MASK, "eos_token": "</s>", "db_password": MASK}
    assert scrub(f"args: {{'admin_api_key': 'sekrit-admin', 'x': '{HF}'}}", ["sekrit-admin"]) == (
        "args: {'admin_api_key': '***', 'x': '***'}")


def test_a_launched_engine_records_and_logs_no_secret(fake, tmp_path):
    args = [a for case, _ in FLAG_CASES for a in case]
    log = tmp_path / "server.log"
    with launched_engine(fake, "org/model", engine_args=shlex.join(args), log_path=log,
                         env={**ENV_CASES, "VLLM_CPU_KVCACHE_SPACE": "1"}) as srv:
        info = srv.launch_info
    text = log.read_text()
    assert "fake engine: non-default args" in text  # the engine echoed its arguments ...
    record = repr(info)
    for _, secret in FLAG_CASES:  # ... and neither its log nor its record holds a secret
        assert secret not in text and secret not in record, secret
    for name, secret in ENV_CASES.items():
        assert name not in info["env"] and secret not in record
    assert info["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"

    # the card: the launch table and the whole card, from a run.json that holds that record
    data, _ = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")
    run_info = data.info.model_copy(deep=True)
    run_info.server.launch = {**info, "env": {**info["env"], **ENV_CASES}}  # an older run.json kept them
    rows = launch_table(run_info).rows
    card = render_card(analyse(type(data)(info=run_info, requests=data.requests, metrics=data.metrics)),
                       date="2026-01-01")
    for secret in [s for _, s in FLAG_CASES] + list(ENV_CASES.values()):
        assert secret not in repr(rows) and secret not in card, secret
    assert ["env VLLM_S3_ACCESS_KEY_ID", MASK] in rows


def test_an_old_run_json_with_secrets_in_clear_is_masked_on_the_card():
    data, _ = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")
    info = data.info.model_copy(deep=True)
    args = [a for case, _ in FLAG_CASES for a in case]
    info.server.launch = {"engine": "vllm", "command": ["vllm", "serve", "m", *args], "engine_args": args,
                          "positional": [HF], "env": ENV_CASES}
    rows = launch_table(info).rows
    for secret in [s for _, s in FLAG_CASES] + list(ENV_CASES.values()):
        assert secret not in repr(rows), secret
