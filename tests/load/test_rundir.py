from cardgen.redact import redact_argv
from cardgen.rundir import slugify


def test_slug_is_safe_for_any_model_name():
    assert slugify("codellama/CodeLlama-7b-Instruct-hf") == "codellama--codellama-7b-instruct-hf"
    for name in ["../../etc/passwd", "<script>alert(1)</script>", "", "...", "a" * 500, "模型", "x y\tz"]:
        s = slugify(name)
        assert s and s not in (".", "..") and "/" not in s and len(s) <= 80
        assert all(c.isalnum() or c in "-._" for c in s)


def test_secrets_are_redacted_from_the_command_line():
    argv = ["cardgen", "build", "m", "--api-key", "sk-123", "--url", "http://x", "--api-key=sk-456"]
    out = redact_argv(argv)
    assert "sk-123" not in " ".join(out) and "sk-456" not in " ".join(out)
    assert out[3:5] == ["--api-key", "***"] and out[-1] == "--api-key=***"
