from cardgen.cli.render import headline_text
from cardgen.schemas.summary import Headline, Summary


def test_headline_line_names_every_figure_and_says_modelled(tmp_path):
    s = Summary(model="m", modelled=True, kv_cache_method="server_config",
                headline=Headline(prompt_ingestion_tok_s=13582.4, generation_tok_s_at_10_parallel_1024_128=41.87,
                                  kv_cache_tokens=113200))
    (tmp_path / "summary.json").write_text(s.model_dump_json())
    line = headline_text(tmp_path)
    assert line.startswith("cardgen: MODELLED:")
    assert "13,582 tok/s" in line and "41.9 tok/s" in line and "113,200 tokens (server_config)" in line


def test_headline_line_with_missing_figures(tmp_path):
    (tmp_path / "summary.json").write_text(Summary(model="m").model_dump_json())
    line = headline_text(tmp_path)
    assert "measured" in line and line.count(" - ") + line.count("ingestion -") >= 1 and "None" not in line
