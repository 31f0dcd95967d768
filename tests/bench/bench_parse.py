"""What parsing a stream costs the client, per chunk, by the shape of the stream: the SSE parser runs in the
process that stamps the other streams' chunks (``cardgen.load.sse``), so a reasoning model's stream must cost no
more than a plain one. Streams as vLLM writes them (compact JSON): a completion, a chat answer, a chat reasoning
stream with vLLM's parser (``reasoning`` deltas, then ``content`` with ``"reasoning": null`` beside it), a
``<think>`` span in a completion's text, and a speculative stream (3 tokens a chunk). Best of 5 repeats of 1,000
parses; CPU time of this process."""

from __future__ import annotations

import json
import timeit

from cardgen.load.sse import parse_stream

CHUNKS = 128


def _event(obj: dict) -> bytes:
    return ("data: " + json.dumps(obj, separators=(",", ":")) + "\n\n").encode()


def _completion(texts: list[str]) -> list[tuple[float, bytes]]:
    return [(float(i), _event({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
                               "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": None,
                                            "stop_reason": None}]})) for i, t in enumerate(texts)]


def _chat(deltas: list[dict]) -> list[tuple[float, bytes]]:
    return [(float(i), _event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                               "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]}))
            for i, d in enumerate(deltas)]


def _end(usage: dict) -> tuple[float, bytes]:
    return (1e3, _event({"id": "x", "choices": [], "usage": usage}) + b"data: [DONE]\n\n")


def streams() -> dict[str, list[tuple[float, bytes]]]:
    words = [f" w{i % 16}" for i in range(CHUNKS)]
    usage = {"prompt_tokens": 9, "completion_tokens": CHUNKS}
    think = [" <think>", *words[1:32], " </think>", *words[33:]]
    return {
        "completion": [*_completion(words), _end(usage)],
        "chat answer": [*_chat([{"content": w} for w in words]), _end(usage)],
        "chat reasoning (vLLM parser)": [*_chat([{"reasoning": w} for w in words[:32]]
                                                + [{"content": w, "reasoning": None} for w in words[32:]]),
                                         _end({**usage, "completion_tokens_details": {"reasoning_tokens": 32}})],
        "<think> span in a completion": [*_completion(think), _end(usage)],
        "speculative, 3 tokens a chunk": [*_completion(["".join(words[i:i + 3]) for i in range(0, CHUNKS, 3)]),
                                          _end(usage)],
    }


def main() -> None:
    print("| stream | chunks | us per stream | us per chunk |")
    print("|---|---|---|---|")
    for name, reads in streams().items():
        n = 1000
        best = min(timeit.repeat(lambda reads=reads: parse_stream(reads), number=n, repeat=5)) / n
        chunks = len(reads) - 1
        print(f"| {name} | {chunks} | {best * 1e6:.0f} | {best * 1e6 / chunks:.2f} |")


if __name__ == "__main__":
    main()
