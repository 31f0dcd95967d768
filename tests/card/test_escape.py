from __future__ import annotations

import yaml
from markupsafe import Markup

from cardgen.card.escape import front_matter, md_escape
from cardgen.card.markdown import md_image, md_table


def test_md_escape_keeps_untrusted_text_inert():
    out = md_escape('<script>alert("x")</script> [a](javascript:1) *b* `c` | d_e ~f~ $x$\n# h')
    assert "<" not in out and ">" not in out
    assert "&lt;script&gt;alert(\"x\")" in out
    assert r"\[a\]" in out and r"\*b\*" in out and r"\`c\`" in out and r"\|" in out and r"d\_e" in out
    assert "\n" not in out
    assert md_escape(Markup("<b>ours</b>")) == "<b>ours</b>"


def test_front_matter_round_trips_and_holds_no_raw_tag():
    data = {"base_model": "<script>alert(1)</script>", "tags": ["benchmark", "a&b"],
            "cardgen": {"x": 1.5, "none": None, "nested": {"yes": True, "empty": {}}, "no": "on",
                        "text": "line\nbreak: \u2028 \U0001F600"}}
    text = str(front_matter(data))
    assert text.startswith("---\n") and text.endswith("\n---")
    assert "<" not in text and ">" not in text and "&" not in text
    assert yaml.safe_load(text.strip("-\n")) == data


def test_md_table_escapes_cells_and_md_image_needs_our_path():
    class T:
        columns = ["a", "b|c"]
        rows = [["<x>", "1"]]
        align = ["l", "r"]

    table = md_table(T())
    assert table.endswith("\n\n") and table.strip().splitlines() == ["| a | b\\|c |", "| :--- | ---: |", "| &lt;x&gt; | 1 |"]
    assert md_image(None, "alt") == ""
    assert md_image(Markup("figures/a.png"), "<alt>") == "![&lt;alt&gt;](figures/a.png)\n\n"
    try:
        md_image("figures/a.png", "alt")
    except TypeError:
        pass
    else:
        raise AssertionError("a plain str path must be refused")


def test_templates_are_found_package_first(tmp_path, monkeypatch):
    from importlib import resources

    from cardgen.card import templates

    repo = templates.template_dirs()[-1]
    assert (repo / templates.CARD_TEMPLATE).is_file()
    pkg = tmp_path / "cardgen"
    (pkg / "templates").mkdir(parents=True)
    (pkg / "templates" / "card.md.j2").write_text("packaged {{ title }}")
    monkeypatch.setattr(resources, "files", lambda name: pkg)
    assert templates.template_dirs()[0] == pkg / "templates"
    assert templates.get_template().render(title="<x>") == "packaged &lt;x&gt;"
