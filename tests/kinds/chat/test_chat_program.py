"""The chat program (cardgen/kinds/chat), driven directly: users hold their conversations, a failed turn ends
one. No clock, no socket, no server."""

from __future__ import annotations

from programkit import point_of, record_of

from cardgen.kinds.chat.program import ChatProgram


def test_chat_users_hold_their_conversations_and_a_failed_turn_ends_one():
    point = point_of(kind="chat", endpoint="chat", parallel=2, conversations=3, turns=2, prompt_tokens=64,
                   message_tokens=16, think_time_s=0.5, output_tokens=8)
    program = ChatProgram(point)
    assert [program.conversations(u) for u in (0, 1)] == [[0, 2], [1]]
    first = program.start()
    assert [(s.slot, s.conversation, s.turn, s.prompt_tokens, s.at) for s in first] == [
        (0, 0, 1, 64, None), (1, 1, 1, 64, None)]
    (second,) = program.ended(first[0], record_of(first[0], sent=0), 1.0)
    assert (second.conversation, second.turn, second.prompt_tokens, second.at) == (0, 2, 16, 1.5)
    (next_conversation,) = program.ended(second, record_of(second, sent=1.5), 2.5)  # the last turn: the next one
    assert (next_conversation.conversation, next_conversation.turn, next_conversation.at) == (2, 1, None)
    assert program.ended(first[1], record_of(first[1], sent=0, ok=False), 1.0) == []  # failed: user 1 has no more
    assert program.ended(next_conversation, record_of(next_conversation, sent=2.5, ok=False), 3.0) == []
    assert program.stop == "complete" and program.issued == 4
