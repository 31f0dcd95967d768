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
