"""Multi-turn chat: the entry's points (with the cache-defeated twin), the virtual-time driver holding
conversations with think time, and the kind's analysis (summary.json's ``kinds.chat``) and section of the card:
TTFT per turn with and without the prefix cache."""

from __future__ import annotations

import pytest
from simruns import simulate

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import load_run
from cardgen.card.render import render_card
from cardgen.kinds.chat.analysis import ChatTurns
from cardgen.kinds.chat.program import ChatProgram
from cardgen.points import expand
from cardgen.sim.config import SimConfig
from cardgen.suite import parse_suite

SUITE = """name: chat
endpoint: completions
scenarios:
  - kind: chat
    name: chat
    users: 2
    conversations: 2
    turns: 4
    first_tokens: 1024
    message_tokens: 64
    output_tokens: 32
    think_time_s: 3
"""


def test_a_chat_entry_expands_to_a_cached_point_and_its_no_cache_twin():
    cached, fresh = expand(parse_suite(SUITE, source="x"))
    assert (cached.name, fresh.name) == ("chat-u2-t4-in1024+64-out32", "chat-u2-t4-in1024+64-out32-nocache")
    assert cached.endpoint == fresh.endpoint == "chat" and (cached.params.fresh_history, fresh.params.fresh_history) == (False, True)
    assert cached.expected_requests() == 8 and cached.prompt_lengths() == [64, 1024]
    assert [ChatProgram(cached).conversations(u) for u in (0, 1)] == [[0], [1]]
    more = expand(parse_suite(SUITE.replace("conversations: 2", "conversations: 5"), source="x"))[0]
    assert [ChatProgram(more).conversations(u) for u in (0, 1)] == [[0, 2, 4], [1, 3]]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    sim = simulate(parse_suite(SUITE, source="x"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"),
                   run_dir=run_dir)
    return sim, analyse(load_run(run_dir))


def test_each_turn_sends_the_history_after_the_think_time(run):
    sim, _ = run
    records = [r for r in sim.drive.records if r.scenario == "chat-u2-t4-in1024+64-out32"]
    by_conv: dict[int, list] = {}
    for r in records:
        by_conv.setdefault(r.conversation, []).append(r)
    assert sorted(by_conv) == [0, 1]
    for turns in by_conv.values():
        turns.sort(key=lambda r: r.turn)
        assert [r.turn for r in turns] == [1, 2, 3, 4]
        assert turns[0].prompt_tokens == 1024
        for a, b in zip(turns, turns[1:], strict=False):
            # the reply with its message overhead (4), then the new message: 64 tokens as a one-message
            # conversation, less the reply header (3) counted once per prompt
            assert b.prompt_tokens == a.prompt_tokens + 32 + 4 + 64 - 3
            assert b.sent_at == pytest.approx(a.end_at + 3)


def test_the_card_shows_ttft_per_turn_and_what_the_cache_saves(run):
    _, analysis = run
    (chat,) = ChatTurns.model_validate(analysis.summary.kinds["chat"]).entries
    assert chat.cached.hit_rate > 0.5 and chat.no_cache.hit_rate == 0
    cached = {t.turn: t.ttft_s.p50 for t in chat.cached.turns}
    fresh = {t.turn: t.ttft_s.p50 for t in chat.no_cache.turns}
    assert all(fresh[n] > 2 * cached[n] for n in (2, 3, 4))  # the history is served from the cache
    prompts = [t.prompt_tokens.p50 for t in chat.cached.turns]
    assert prompts == sorted(prompts) and prompts[0] == 1024  # the history grows turn by turn
    card = render_card(analysis, date="2026-11-22")
    section = card.split("## Multi-turn chat")[1].split("\n## ")[0]
    assert "| Turn | Requests | Prompt tokens (median) |" in section and "Speed-up" in section
    assert "(with the cache defeated: 0 %)" in section
