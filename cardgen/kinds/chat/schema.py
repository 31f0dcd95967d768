"""Multi-turn chat: users holding conversations whose every turn sends the history so far: its suite entry (what a
suite file declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class Chat(Entry):
    """Multi-turn chat on ``/v1/chat/completions``: ``users`` users at once, together holding ``conversations``
    conversations (default one each) of ``turns`` turns. A turn sends the whole history (every earlier message
    and the model's own replies) and a new message, then the user thinks ``think_time_s`` before the next. The
    first message has ``first_tokens`` tokens, every later one ``message_tokens`` (each counted as a
    one-message conversation); every message starts with its request id. With ``compare_no_cache`` the same
    conversations run again with the history made new every turn (no prefix to reuse)."""

    kind: Literal["chat"]
    users: int = Field(default=4, ge=1)
    conversations: int | None = Field(default=None, ge=1)
    turns: int = Field(default=4, ge=1)
    first_tokens: int = Field(default=256, ge=1)
    message_tokens: int = Field(default=64, ge=1)
    output_tokens: int = Field(default=64, ge=1)
    think_time_s: float = Field(default=1.0, ge=0)
    # also run the same conversations with the cache defeated (the history starts with a new id every turn),
    # so the card can say what the prefix cache saves per turn, measured
    compare_no_cache: bool = True

    def point_fields(self) -> list[PointFields]:
        """The conversations, then (``compare_no_cache``) the same with a new history every turn; always on the
        chat endpoint."""
        conversations = self.conversations or self.users
        base = f"chat-u{self.users}-t{self.turns}-in{self.first_tokens}+{self.message_tokens}-out{self.output_tokens}"
        return [dict(name=base + ("-nocache" if fresh else ""), endpoint="chat", prompt_tokens=self.first_tokens,
                     output_tokens=self.output_tokens, parallel=min(self.users, conversations),
                     params=ChatParams(conversations=conversations, turns=self.turns,
                                       message_tokens=self.message_tokens, think_time_s=self.think_time_s,
                                       fresh_history=fresh))
                for fresh in ((False, True) if self.compare_no_cache else (False,))]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class ChatParams:
    """The header's ``parallel`` users hold ``conversations`` conversations of ``turns`` turns; the first message
    is the header's ``prompt_tokens`` long, later ones ``message_tokens``; ``think_time_s`` between a reply and the
    next turn; with ``fresh_history`` every turn's history starts with a new id (nothing for the cache to reuse)."""

    kind: Literal["chat"] = "chat"
    conversations: int = 0
    turns: int = 0
    message_tokens: int = 0
    think_time_s: float = 0.0
    fresh_history: bool = False
