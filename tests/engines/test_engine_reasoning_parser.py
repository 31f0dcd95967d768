"""A reasoning model's stream as vLLM writes it: vLLM's own reasoning parser (``DeepSeekR1ReasoningParser``, the
``<think>...</think>`` family) over the tiny model's tokenizer, fed token by token and a few tokens at a time (as
speculative decoding delivers them), each delta wrapped in vLLM's own ``ChatCompletionStreamResponse`` and
serialized as its server does (``model_dump_json(exclude_unset=True)``), the usage with the parser's own reasoning
count. cardgen's stream parser must find the reasoning and the answer vLLM's non-streaming ``extract_reasoning``
finds, the parser's count, and the answer's first chunk; and, from a server without the parser (the same text as
plain content), the same split from the ``<think>`` span. (Two ways of vLLM's: a ``<think>`` that shares a delta
with the text after it is passed on in ``reasoning``; and a span the chat template opened is counted as 0
reasoning tokens, the tags being the parser's only marks.)

No server is started: the CPU build's random-weight tiny model never writes ``</think>`` by itself, so the model's
output is given, and vLLM's classes do the rest."""

from __future__ import annotations

import pytest

from cardgen.load.reasoning import needs_tokenize
from cardgen.load.sse import _parse_lines, parse_stream

pytestmark = pytest.mark.engine

REASONING = "Let me think: 6 times 7, carry nothing, so forty-two."
ANSWER = "\n\nThe answer is 42."


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    tok.add_tokens(["<think>", "</think>"])  # as DeepSeek-R1's tokenizer has them: added, not special
    return tok


def vllm_stream(tokenizer, text: str, *, parser: bool, step_sizes: tuple[int, ...]) -> tuple[list, list[int]]:
    """The SSE reads vLLM's chat endpoint would write for the model output ``text`` (one read per delta, 10 ms
    apart), with its reasoning parser or without; and the output's token ids."""
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponseStreamChoice,
        ChatCompletionStreamResponse,
    )
    from vllm.entrypoints.serve.engine.protocol import CompletionTokenUsageInfo, UsageInfo
    from vllm.reasoning.deepseek_r1_reasoning_parser import DeepSeekR1ReasoningParser

    ids = tokenizer.encode(text, add_special_tokens=False)
    reasoner = DeepSeekR1ReasoningParser(tokenizer) if parser else None

    def event(delta: DeltaMessage | None, *, finish: str | None = None, usage: UsageInfo | None = None) -> bytes:
        choices = [] if delta is None else [ChatCompletionResponseStreamChoice(index=0, delta=delta, logprobs=None,
                                                                                finish_reason=finish)]
        chunk = ChatCompletionStreamResponse(id="chatcmpl-1", created=1, model="tiny-llama", choices=choices)
        if usage is not None:
            chunk.usage = usage
        return f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n".encode()

    reads = [(0.0, event(DeltaMessage(role="assistant", content="")))]
    previous: list[int] = []
    previous_text = ""
    at, size = 0, 0
    while at < len(ids):
        delta_ids = ids[at:at + step_sizes[size % len(step_sizes)]]
        current = previous + delta_ids
        current_text = tokenizer.decode(current)
        delta_text = current_text[len(previous_text):]
        if reasoner is not None:
            delta = reasoner.extract_reasoning_streaming(previous_text, current_text, delta_text, previous, current,
                                                         delta_ids)
        else:
            delta = DeltaMessage(content=delta_text)
        at += len(delta_ids)
        size += 1
        if delta is not None:
            reads.append((size / 100, event(delta, finish="length" if at >= len(ids) else None)))
        previous, previous_text = current, current_text
    details = CompletionTokenUsageInfo(reasoning_tokens=reasoner.count_reasoning_tokens(ids)) if reasoner else None
    usage = UsageInfo(prompt_tokens=9, completion_tokens=len(ids), total_tokens=9 + len(ids),
                      completion_tokens_details=details)
    reads.append(((size + 1) / 100, event(None, usage=usage) + b"data: [DONE]\n\n"))
    return reads, ids


@pytest.mark.parametrize("opened", [True, False], ids=["model-opens-think", "template-opened-think"])
@pytest.mark.parametrize("step_sizes", [(1,), (2, 1, 4)], ids=["token-by-token", "several-a-step"])
def test_cardgen_reads_vllms_reasoning_parser_as_vllm_itself_splits_the_text(tokenizer, opened, step_sizes):
    from vllm.reasoning.deepseek_r1_reasoning_parser import DeepSeekR1ReasoningParser

    text = ("<think>" if opened else "") + REASONING + "</think>" + ANSWER
    expected_reasoning, expected_answer = DeepSeekR1ReasoningParser(tokenizer).extract_reasoning(text, None)
    reads, ids = vllm_stream(tokenizer, text, parser=True, step_sizes=step_sizes)
    r = parse_stream(reads)
    assert r == _parse_lines(reads)  # the template fast path reads it as a full parse does
    assert (r.reasoning_text, r.text) == (expected_reasoning, expected_answer)
    counted = DeepSeekR1ReasoningParser(tokenizer).count_reasoning_tokens(ids)
    assert r.reasoning_tokens == counted
    # vLLM counts the tokens between the two tags: none when the chat template opened the span, and then cardgen
    # counts the reasoning text with the server's /tokenize
    assert (counted > 0) == opened and needs_tokenize(r) == (not opened)
    assert r.output_tokens == len(ids) and r.done and r.finish_reason == "length"
    first_answer = next(at for at, data in reads if b'"content":"\\n' in data or b'"content":"\\n\\nThe' in data)
    assert r.first_answer_at == first_answer > r.first_token_at
    assert r.reasoning_chunks == sum(1 for _, data in reads if b'"reasoning":"' in data and b'"reasoning":""' not in data)

    # the same model output from a server without the parser: plain content with the tags in it
    plain, _ = vllm_stream(tokenizer, text, parser=False, step_sizes=step_sizes)
    p = parse_stream(plain)
    assert p == _parse_lines(plain)
    assert (p.reasoning_text, p.text) == (expected_reasoning, expected_answer) and p.reasoning_tokens is None
    assert p.first_answer_at is not None and p.first_answer_at >= r.first_answer_at - 0.01
