import json

from cardgen.load.sse import parse_stream


def ev(obj) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def comp(text, id_="cmpl-1", finish=None):
    return {"id": id_, "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def chat(content=None, role=None, finish=None):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"id": "chatcmpl-9", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


USAGE = {"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}


def test_completion_stream_times_each_text_chunk_and_reads_usage():
    reads = [(1.0, ev(comp("a"))), (1.1, ev(comp("b"))), (1.2, ev(comp("c", finish="length"))),
             (1.3, ev(USAGE) + b"data: [DONE]\n\n")]
    r = parse_stream(reads)
    assert r.chunk_times == [1.0, 1.1, 1.2]
    assert r.first_token_at == 1.0
    assert (r.prompt_tokens, r.output_tokens) == (12, 3)
    assert r.done and r.response_id == "cmpl-1" and r.finish_reason == "length"
    assert r.malformed is None and r.server_error is None


def test_chat_role_only_and_empty_chunks_are_not_tokens():
    reads = [(1.0, ev(chat(content="", role="assistant"))), (1.5, ev(chat(content="Hi"))),
             (1.6, ev(chat(content=""))), (1.7, ev(chat(content="!"))), (1.8, b"data: [DONE]\n\n")]
    r = parse_stream(reads)
    assert r.chunk_times == [1.5, 1.7]
    assert r.response_id == "chatcmpl-9"


def test_event_split_across_reads_takes_the_time_of_the_completing_read():
    raw = ev(comp("x"))
    reads = [(1.0, raw[:7]), (2.0, raw[7:20]), (3.0, raw[20:]), (4.0, b"data: [DONE]\n\n")]
    r = parse_stream(reads)
    assert r.chunk_times == [3.0]


def test_several_events_in_one_read_share_its_time_and_crlf_is_accepted():
    raw = (ev(comp("a")) + ev(comp("b"))).replace(b"\n", b"\r\n")
    r = parse_stream([(5.0, raw), (6.0, b": keep-alive\r\n\r\ndata: [DONE]\r\n\r\n")])
    assert r.chunk_times == [5.0, 5.0]
    assert r.done


def test_malformed_event_is_reported():
    r = parse_stream([(1.0, ev(comp("a"))), (1.1, b"data: {not json\n\n"), (1.2, b"data: [DONE]\n\n")])
    assert r.malformed is not None and r.malformed.startswith("{not json")
    assert r.chunk_times == [1.0]


def test_cut_stream_is_not_done():
    raw = ev(comp("a")) + ev(comp("b"))
    r = parse_stream([(1.0, raw[: len(raw) - 5])])
    assert not r.done
    assert r.chunk_times == [1.0]


def test_error_event_in_stream():
    r = parse_stream([(1.0, ev({"error": {"message": "out of memory", "code": 500}}))])
    assert r.server_error == "out of memory"


def test_a_token_without_text_is_timed_but_is_no_text_chunk():
    # max_tokens=1 whose token is special (or half a UTF-8 character): vLLM sends text "" for it
    reads = [(1.0, ev(chat(content="", role="assistant"))), (1.4, ev(chat(content="", finish="length"))),
             (1.5, ev(USAGE) + b"data: [DONE]\n\n")]
    r = parse_stream(reads)
    assert r.chunk_times == [] and r.silent_times == [1.4]  # the role-only chunk is not a token
    reads = [(2.0, ev(comp(""))), (2.1, ev(comp("a"))), (2.2, b"data: [DONE]\n\n")]
    r = parse_stream(reads)
    assert r.chunk_times == [2.1] and r.silent_times == [2.0] and r.first_token_at == 2.1


# --- the template fast path gives what a full parse gives ----------------------------------------------------

def _compact(obj) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()


def _same(reads):
    from cardgen.load.sse import _parse_lines

    fast, full = parse_stream(reads), _parse_lines(reads)
    assert fast == full
    return fast


def test_texts_with_quotes_backslashes_and_empty_strings_are_parsed_as_in_full():
    texts = ["a", 'say "hi"', "ends with \\", "\\", "", "é", "😀", "x\\\"y", "tab\tnew\nline", "", "z"]
    for dump in (_compact, ev):
        reads = [(float(i), dump(comp(t))) for i, t in enumerate(texts)]
        reads.append((50.0, dump(comp("last", finish="length")) + dump(USAGE) + b"data: [DONE]\n\n"))
        r = _same(reads)
        assert r.chunk_times == [float(i) for i, t in enumerate(texts) if t] + [50.0]
        assert r.silent_times == [float(i) for i, t in enumerate(texts) if not t]
        assert (r.finish_reason, r.output_tokens, r.events) == ("length", 3, len(texts) + 2)


def test_chat_role_chunk_then_content_then_empty_content_as_in_full():
    reads = [(1.0, _compact(chat(content="", role="assistant"))), (1.1, _compact(chat(content="", role="assistant"))),
             (1.2, _compact(chat(content="Hi"))), (1.3, _compact(chat(content=""))), (1.4, _compact(chat(content="!"))),
             (1.5, _compact(chat(content="x", finish="stop"))), (1.6, b"data: [DONE]\n\n")]
    r = _same(reads)
    assert r.chunk_times == [1.2, 1.4, 1.5] and r.silent_times == [1.3] and r.finish_reason == "stop"


def test_an_event_unlike_the_template_is_parsed_in_full():
    odd = {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "b", "finish_reason": None}],
           "usage": {"prompt_tokens": 5, "completion_tokens": 9}}
    err = {"id": "cmpl-1", "object": "text_completion", "error": {"message": "boom"}}
    reads = [(1.0, _compact(comp("a"))), (1.1, _compact(odd)), (1.2, _compact(comp("c"))),
             (1.3, b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":\n\n'),
             (1.4, _compact(err)), (1.5, b"data: [DONE]\n\n")]
    r = _same(reads)
    assert r.chunk_times == [1.0, 1.1, 1.2] and r.output_tokens == 9
    assert r.malformed is not None and r.server_error == "boom"


def test_split_reads_multiline_data_and_comments_as_in_full():
    body = (_compact(comp("a")) + b": ping\n\n" + _compact(comp("b")) + b"data: {\"id\":\"cmpl-1\",\ndata: \"choices\":"
            b"[{\"index\":0,\"text\":\"c\"}]}\n\n" + _compact(comp("d")) + b"data: [DONE]\n\n")
    for step in (1, 7, 50, len(body)):
        reads = [(float(i), body[i:i + step]) for i in range(0, len(body), step)]
        r = _same(reads)
        assert len(r.chunk_times) == 4 and r.done


def test_events_like_the_last_parsed_one_are_not_parsed_again(monkeypatch):
    import cardgen.load.sse as sse

    calls = []
    real = sse.json.loads
    monkeypatch.setattr(sse.json, "loads", lambda s, *a, **k: calls.append(s) or real(s, *a, **k))
    reads = [(float(i), _compact(comp(f"w{i}"))) for i in range(100)]
    r = parse_stream(reads + [(100.0, _compact(comp("end", finish="length")) + b"data: [DONE]\n\n")])
    assert len(r.chunk_times) == 101
    assert len(calls) <= 4  # the first event, its text (to check the template), the last one


def test_the_reply_text_is_kept_when_events_take_the_fast_path():
    # after the first event is parsed, the others match its bytes around the text and are not parsed again:
    # their text must still reach the reply (a chat turn sends it back as history)
    texts = ["Hel", "lo", " wörld", 'a "quote"', "\\n", ""]
    reads = [(1.0 + i / 10, ev(chat(content=t))) for i, t in enumerate(texts)] + [(2.0, b"data: [DONE]\n\n")]
    r = parse_stream(reads)
    assert r.text == "".join(texts)
    reads = [(1.0 + i / 10, ev(comp(t))) for i, t in enumerate(texts)] + [(2.0, b"data: [DONE]\n\n")]
    assert parse_stream(reads).text == "".join(texts)


# --- reasoning models: the reasoning part and the answer part --------------------------------------------------

def think(reasoning=None, content=None, field="reasoning", finish=None):
    """A chat chunk as vLLM writes it with a reasoning parser (``reasoning``, the other field null) or SGLang
    (``reasoning_content``)."""
    delta = {"content": content, field: reasoning}
    return {"id": "chatcmpl-r", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


REASONING_USAGE = {"id": "chatcmpl-r", "choices": [], "usage": {
    "prompt_tokens": 9, "completion_tokens": 6, "completion_tokens_details": {"reasoning_tokens": 4}}}


def test_reasoning_fields_are_timed_as_chunks_and_the_answer_starts_at_the_first_content():
    for field in ("reasoning", "reasoning_content"):
        for dump in (_compact, ev):
            reads = [(1.0, dump(chat(content="", role="assistant"))), (1.1, dump(think("Let", field=field))),
                     (1.2, dump(think(" me", field=field))), (1.3, dump(think(" see", field=field))),
                     (1.4, dump(think(".", field=field))), (1.5, dump(think(content="Yes", field=field))),
                     (1.6, dump(think(content="!", field=field, finish="length"))),
                     (1.7, dump(REASONING_USAGE) + b"data: [DONE]\n\n")]
            r = _same(reads)
            assert r.chunk_times == [1.1, 1.2, 1.3, 1.4, 1.5, 1.6] and r.first_token_at == 1.1
            assert r.first_answer_at == 1.5 and r.reasoning_chunks == 4
            assert r.reasoning_text == "Let me see." and r.text == "Yes!"
            assert (r.output_tokens, r.reasoning_tokens) == (6, 4)


def test_a_chunk_with_both_parts_is_one_chunk_and_the_answers_first():
    reads = [(1.0, _compact(think("a"))), (1.1, _compact(think("b", content="c"))), (1.2, _compact(think(content="d"))),
             (1.3, b"data: [DONE]\n\n")]
    r = _same(reads)
    assert r.chunk_times == [1.0, 1.1, 1.2] and r.first_answer_at == 1.1 and r.reasoning_chunks == 2
    assert (r.reasoning_text, r.text) == ("ab", "cd")


def test_a_stream_that_never_answers_has_no_first_answer():
    reads = [(1.0, _compact(think("a"))), (1.1, _compact(think("b", finish="length"))), (1.2, b"data: [DONE]\n\n")]
    r = _same(reads)
    assert r.chunk_times == [1.0, 1.1] and r.first_answer_at is None and r.text == ""


def test_think_tags_without_a_parser_split_the_text_even_across_chunks():
    texts = ["<th", "ink>I", " think", "</th", "ink>", "\n\nAns", "wer"]
    reads = [(1.0 + i / 10, _compact(comp(t))) for i, t in enumerate(texts)] + [(2.0, b"data: [DONE]\n\n")]
    r = _same(reads)
    assert r.chunk_times == [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
    assert r.reasoning_text == "I think" and r.text == "\n\nAnswer"
    assert r.first_answer_at == 1.5 and r.reasoning_chunks == 5
    # a chat template that opened <think> itself: the text only closes it (DeepSeek-R1)
    texts = ["Hmm", " ok</think>", "Sure"]
    r = _same([(1.0 + i / 10, _compact(chat(content=t))) for i, t in enumerate(texts)] + [(2.0, b"data: [DONE]\n\n")])
    assert (r.reasoning_text, r.text, r.first_answer_at, r.reasoning_chunks) == ("Hmm ok", "Sure", 1.2, 2)
    # the answer's text in the same chunk as the closing tag: that chunk is the answer's first
    r = _same([(1.0, _compact(comp("<think>x"))), (1.1, _compact(comp("</think>y"))), (1.2, b"data: [DONE]\n\n")])
    assert (r.reasoning_text, r.text, r.first_answer_at) == ("x", "y", 1.1)
    # opened and never closed: all reasoning
    r = _same([(1.0, _compact(comp("<think>x"))), (1.1, _compact(comp(" y"))), (1.2, b"data: [DONE]\n\n")])
    assert (r.reasoning_text, r.text, r.first_answer_at, r.reasoning_chunks) == ("x y", "", None, 2)


def test_a_plain_stream_is_all_answer():
    r = _same([(1.0, _compact(comp("a<b"))), (1.1, _compact(comp("c"))), (1.2, b"data: [DONE]\n\n")])
    assert (r.first_answer_at, r.reasoning_chunks, r.reasoning_text, r.reasoning_tokens) == (1.0, 0, "", None)


def test_reasoning_streams_take_the_fast_path_too(monkeypatch):
    # vLLM writes the other field as null in every delta ("content": "x", "reasoning": null): such events still
    # match the template of the last one, reasoning or answer alike
    import cardgen.load.sse as sse

    calls = []
    real = sse.json.loads
    monkeypatch.setattr(sse.json, "loads", lambda s, *a, **k: calls.append(s) or real(s, *a, **k))
    reads = ([(float(i), _compact(think(f"r{i}"))) for i in range(50)]
             + [(50.0 + i, _compact(think(content=f"a{i}"))) for i in range(50)])
    r = parse_stream(reads + [(100.0, _compact(think(content="end", finish="length")) + b"data: [DONE]\n\n")])
    assert len(r.chunk_times) == 101 and r.reasoning_chunks == 50 and r.first_answer_at == 50.0
    assert len(calls) <= 6  # the first reasoning event and its text, the first answer event and its text, the last


def _events(*objs: object) -> list[tuple[float, bytes]]:
    return [(float(i), f"data: {json.dumps(o)}\n\n".encode()) for i, o in enumerate(objs)] + \
        [(float(len(objs)), b"data: [DONE]\n\n")]


def test_a_stream_of_tool_call_fragments_is_an_answer_with_its_calls_joined_by_index():
    head = {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    def frag(calls: list) -> dict:
        return {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": calls}}]}

    r = parse_stream(_events(
        head,
        frag([{"index": 0, "id": "t0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]),
        frag([{"index": 0, "function": {"arguments": '{"city": '}}]),
        frag([{"index": 0, "function": {"arguments": '"Oslo"}'}}]),
        frag([{"index": 1, "id": "t1", "function": {"name": "search", "arguments": '{"q": "x"}'}}]),
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 12}},
    ))
    assert r.tool_calls == [{"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                            {"name": "search", "arguments": '{"q": "x"}'}]
    assert r.chunk_times == [1.0, 2.0, 3.0, 4.0]  # every fragment is a chunk of the answer; the role chunk is not
    assert r.first_token_at == 1.0 and r.first_answer_at == 1.0
    assert r.text == "" and r.complete and r.finish_reason == "tool_calls"


def test_text_and_tool_calls_in_one_stream_keep_their_order_and_the_text():
    r = parse_stream(_events(
        {"choices": [{"index": 0, "delta": {"content": "ok"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}}]},
        {"choices": [{"index": 0, "delta": {"content": "!"}}]},
    ))
    assert r.text == "ok!" and r.tool_calls == [{"name": "f", "arguments": "{}"}]
    assert r.chunk_times == [0.0, 1.0, 2.0] and r.first_answer_at == 0.0


def test_a_plain_stream_has_no_tool_calls():
    r = parse_stream(_events({"choices": [{"index": 0, "text": "a"}]}, {"choices": [{"index": 0, "text": "b"}]}))
    assert r.tool_calls == [] and r.tool_times == [] and r.chunk_times == [0.0, 1.0]
