"""Markdown text: front matter, the run files a card links to, GitHub alerts."""

from __future__ import annotations

from cardgen.site.mdtext import alerts_to_admonitions, localize_links, split_front_matter


def test_split_front_matter():
    assert split_front_matter("---\na: 1\n---\n# T\n") == ("a: 1", "# T\n")
    assert split_front_matter("# no front matter\n---\n") == ("", "# no front matter\n---\n")


def test_localize_links_keeps_existing_files_and_turns_the_rest_into_text(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "a.png").write_bytes(b"png")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.csv").write_text("x")
    (tmp_path.parent / "outside.txt").write_text("secret")
    card = (
        '![A](figures/a.png) <img src="./figures/a.png" width="800"/> [t](tables/t.csv#row)\n'
        "![B](figures/missing.png) <img src='gone.png' alt='Gone'> [out](../outside.txt)\n"
        "[web](https://example.org) [anchor](#method) [md](other.md)\n"
        "[ref]: figures/nothere.png\n"
        "```\n![code](figures/not-a-link.png)\n```\n"
    )
    out = localize_links(card, tmp_path)
    assert out.files == {"figures/a.png", "tables/t.csv"}
    assert "![A](figures/a.png)" in out.markdown and 'src="./figures/a.png"' in out.markdown
    assert "![B]" not in out.markdown and "\nB Gone out\n" in out.markdown
    assert "gone.png" not in out.markdown and "Gone" in out.markdown
    assert "outside.txt" not in out.markdown and "[md]" not in out.markdown
    assert "[web](https://example.org)" in out.markdown and "[anchor](#method)" in out.markdown
    assert "nothere" not in out.markdown
    assert "![code](figures/not-a-link.png)" in out.markdown  # code is left alone
    assert len(out.problems) == 5


def test_github_alerts_become_admonitions():
    card = (
        "# T\n\n> [!WARNING]\n> **Modelled.** Not measured.\n>\n> - one\n\n> plain quote\n\n"
        "```\n> [!NOTE]\n```\n"
    )
    out = alerts_to_admonitions(card)
    assert "!!! warning\n\n    **Modelled.** Not measured.\n\n    - one\n\n" in out
    assert "> plain quote" in out and "```\n> [!NOTE]\n```" in out


def test_a_list_after_a_paragraph_stays_a_list_in_a_note_box_and_outside():
    """A card's NOTE box lists what the run lacks right after its first line, as GitHub allows; Python-Markdown
    needs a blank line there, or the list shows as one line of dashes."""
    card = ("> [!NOTE]\n> This run lacks some figures:\n> - no ingestion\n> - no batch table\n\n"
            "Not run:\n- p16\n- p32\n\n| a |\n|---|\n| - x |\n\n1. one\n2. two\n")
    out = alerts_to_admonitions(card)
    assert "    This run lacks some figures:\n\n    - no ingestion\n    - no batch table\n" in out
    assert "Not run:\n\n- p16\n- p32\n" in out
    assert "| a |\n|---|\n| - x |" in out and "1. one\n2. two" in out  # tables and lists left as they are


def test_the_note_box_list_renders_as_a_list():
    import markdown

    html = markdown.markdown(alerts_to_admonitions("> [!NOTE]\n> Lacks:\n> - a\n> - b\n"),
                             extensions=["admonition"])
    assert "<ul>" in html and html.count("<li>") == 2 and "- a" not in html
