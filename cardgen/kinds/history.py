"""Conversation histories: a rule offered to every kind whose requests hold conversations (the chat kind's turns),
kept by both interpreters (the load engine and the virtual-time driver), so a turn sends the same history in real
and virtual time. Whether a point's later turns renew the history's head is its kind's ``renews_history``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from cardgen.kinds.program import Send

M = TypeVar("M")


class Conversations(Generic[M]):
    """Each conversation's history, by one rule for both interpreters (messages of any type ``M``: text in real
    time, token counts in virtual time):

    - a first turn has no history; a later turn's is what its conversation's earlier turns asked and were
      answered;
    - a turn that failed adds nothing (its conversation ends);
    - with ``fresh`` (its kind's ``renews_history``) the history's first message is renewed every later turn (``renew``: a
      new request id at its head), so the server has no prefix to reuse.

    A conversation has one turn under way at a time (its turns follow each other)."""

    def __init__(self, *, fresh: bool) -> None:
        self.fresh = fresh
        self._said: dict[int, list[M]] = {}  # conversation -> its messages so far
        self._asking: dict[int, list[M]] = {}  # conversation -> the messages its turn under way sent

    def ask(self, send: Send, message: M, *, renew: Callable[[M], M]) -> list[M]:
        """The messages turn ``send`` sends: its conversation so far and ``message``."""
        conversation = send.conversation or 0
        history = self._said.get(conversation, []) if (send.turn or 1) > 1 else []
        if self.fresh and history:
            history = [renew(history[0]), *history[1:]]
        self._asking[conversation] = asked = [*history, message]
        return asked

    def answered(self, send: Send, reply: M | None) -> None:
        """Turn ``send`` ended: with the model's ``reply`` (it goes on the history), or None when it failed."""
        asked = self._asking.pop(send.conversation or 0, None)
        if reply is not None and asked is not None:
            self._said[send.conversation or 0] = [*asked, reply]
