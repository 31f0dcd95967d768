"""The conversation history rule both interpreters keep (cardgen/kinds/history.py)."""

from __future__ import annotations

from cardgen.kinds.history import Conversations
from cardgen.kinds.program import Send


def test_one_chat_history_rule_for_both_interpreters():
    def turn(conversation: int, n: int) -> Send:
        return Send(prompt_tokens=10, output_tokens=5, conversation=conversation, turn=n)

    chats: Conversations[str] = Conversations(fresh=False)
    assert chats.ask(turn(0, 1), "q1", renew=str.upper) == ["q1"]
    chats.answered(turn(0, 1), "a1")
    assert chats.ask(turn(0, 2), "q2", renew=str.upper) == ["q1", "a1", "q2"]
    chats.answered(turn(0, 2), None)  # failed: nothing goes on the history
    assert chats.ask(turn(0, 3), "q3", renew=str.upper) == ["q1", "a1", "q3"]
    assert chats.ask(turn(1, 1), "other", renew=str.upper) == ["other"]  # conversations apart
    assert chats.ask(turn(0, 1), "again", renew=str.upper) == ["again"]  # a first turn starts afresh
    fresh: Conversations[str] = Conversations(fresh=True)
    fresh.ask(turn(0, 1), "q1", renew=lambda m: "id " + m)
    fresh.answered(turn(0, 1), "a1")
    assert fresh.ask(turn(0, 2), "q2", renew=lambda m: "id " + m) == ["id q1", "a1", "q2"]
