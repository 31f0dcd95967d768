"""Multi-turn chat: users holding conversations whose every turn sends the history so far.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`), its traits (here; listed in
:data:`cardgen.kinds.KINDS`), and its stages past the load: its analysis (``analysis.py``: TTFT per turn, with and
without the prefix cache, saved as ``summary.json`` ``kinds.chat``) and its part of the card (``section.py`` and
``section.md.j2``: "Multi-turn chat")."""

from __future__ import annotations

from cardgen.kinds.chat.program import ChatProgram
from cardgen.kinds.chat.schema import Chat, ChatParams
from cardgen.kinds.kind import USERS, Kind
from cardgen.kinds.view import Params

__all__ = ["CHAT", "Chat", "ChatParams", "ChatProgram"]


def _chat_longest(p: Params[ChatParams]) -> int:
    chat = p.params
    return p.prompt_tokens + max(0, chat.turns - 1) * (chat.message_tokens + p.output_tokens) + p.output_tokens


CHAT = Kind[ChatParams](
    "chat", description="multi-turn conversations on /v1/chat/completions: TTFT per turn, with and without the prefix cache",
    entry=Chat, params=ChatParams, program=ChatProgram, parallel=USERS, load_words="{parallel} parallel",
    renews_history=lambda p: p.params_as(ChatParams).fresh_history,
    expected_requests=lambda p: p.params.conversations * p.params.turns, longest_request=_chat_longest,
    prompt_lengths=lambda p: sorted({p.prompt_tokens, p.params.message_tokens}),
    analysis="cardgen.kinds.chat.analysis:ANALYSIS", section="cardgen.kinds.chat.section:SECTION")
