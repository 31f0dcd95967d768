"""Secrets are redacted from a command line before it is stored (cardgen.redact)."""

from cardgen.redact import redact_argv


def test_secrets_are_redacted_from_the_command_line():
    argv = ["cardgen", "build", "m", "--api-key", "sk-123", "--url", "http://x", "--api-key=sk-456"]
    out = redact_argv(argv)
    assert "sk-123" not in " ".join(out) and "sk-456" not in " ".join(out)
    assert out[3:5] == ["--api-key", "***"] and out[-1] == "--api-key=***"
