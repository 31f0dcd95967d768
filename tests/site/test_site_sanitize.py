"""The Markdown extension that keeps server text as text and the site local."""

from __future__ import annotations

import markdown
import pytest

from cardgen.site.sanitize import is_local_url, sanitize_html


@pytest.mark.parametrize(
    ("fragment", "expected"),
    [
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ('<img src="figures/x.png" width="800"/>', '<img src="figures/x.png" width="800" />'),
        ('<img src="https://e.com/x.png" alt="chart">', "chart"),
        ('<IMG SRC="jAvAsCrIpT:alert(1)" alt="a">', "a"),
        ('<a href="javascript:alert(1)" onclick="x()">y</a>', "<a>y</a>"),
        ('<a href="https://example.org/">y</a>', '<a href="https://example.org/">y</a>'),
        (
            '<div class="c" style="background:url(//x)">&amp; <b>b</b> < </div>',
            '<div class="c">&amp; <b>b</b> &lt; </div>',
        ),
        ("<svg onload=alert(1)>", "<svg>"),  # the site's charts are SVG: the element stays, the handler goes
        ('<circle fill="url(http://x/y#z)" stroke="#1f77b4" r="4"/>', '<circle stroke="#1f77b4" r="4" />'),
        ('<text transform="rotate(-90 1 2)">a</text>', '<text transform="rotate(-90 1 2)">a</text>'),
        ("<!-- hidden --><iframe src=x></iframe>", "&lt;iframe src=x&gt;&lt;/iframe&gt;"),
        ("<scr", "&lt;scr"),
    ],
)
def test_sanitize_html(fragment, expected):
    assert sanitize_html(fragment) == expected


def test_is_local_url():
    assert is_local_url("figures/a.png") and is_local_url("./a.png") and is_local_url("../x/index.html")
    for url in (
        "http://x/a.png",
        "//cdn/x.js",
        "data:image/png;base64,xx",
        " javascript:alert(1)",
        "\\\\host",
    ):
        assert not is_local_url(url), url


def _md(text: str) -> str:
    return markdown.Markdown(extensions=["cardgen.site.sanitize", "toc", "tables", "fenced_code"]).convert(
        text
    )


def test_markdown_pages_keep_server_text_as_text():
    html = _md(
        "# Card for <script>alert(1)</script>\n\n<script>\nalert(2)\n</script>\n\n"
        "[x](javascript:alert(3)) ![i](http://x/y.png) ![j](figures/a.png)\n\n"
        "```\n<script>code</script>\n```\n"
    )
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "alert(2)" in html
    assert "javascript:" not in html and "http://x/y.png" not in html
    assert '<img alt="j" src="figures/a.png" />' in html
    assert "<code>&lt;script&gt;code&lt;/script&gt;" in html  # code blocks are Markdown's job, unchanged
