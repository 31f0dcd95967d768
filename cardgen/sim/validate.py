"""A generation request as the virtual server validates it, as vLLM would (the subset it models), and the
errors it answers with: ``{"error": {...}}`` and an HTTP status."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cardgen.sim import tokenizer
from cardgen.sim.images import ImageError, image_sizes
from cardgen.sim.vision import VisionEncoder

if TYPE_CHECKING:
    from aiohttp import web


def error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


class ApiError(Exception):
    """A request the server refuses, answered as vLLM does: ``{"error": {...}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def response(self) -> web.Response:
        from aiohttp import web  # noqa: PLC0415  only the server answers over HTTP; the virtual clock's drive does not

        return web.json_response(error_body(self.status, self.message, self.kind), status=self.status)


@dataclass(frozen=True, slots=True)
class GenParams:
    """A validated generation request."""

    chat: bool
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    # the images it carries (chat): the vision encoder's work on them (FLOPs) and a hash of each with its prompt
    # tokens (the prefix cache's keys; counted in ``prompt_tokens``)
    encode_flops: float = 0.0
    images: tuple[tuple[int, int], ...] = ()

    @property
    def image_tokens(self) -> int:
        """The prompt tokens its images became."""
        return sum(tokens for _, tokens in self.images)


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request's body as a JSON object, or an :class:`ApiError`."""
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def check_model(body: dict[str, Any], names: tuple[str, ...]) -> None:
    """A request for another model than one of ``names`` (the served name, the model) is a 404, as vLLM's."""
    model = body.get("model")
    if model is not None and model not in names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")


def _images(messages: Any, vision: VisionEncoder | None) -> tuple[tuple[tuple[int, int], ...], float]:
    """A chat's images as the model's vision encoder makes them: each one's (hash, tokens), and its FLOPs on them.
    A model with no vision encoder refuses them."""
    try:
        found = image_sizes(messages)
    except ImageError as exc:
        raise ApiError(400, str(exc)) from None
    if not found:
        return (), 0.0
    if vision is None:
        raise ApiError(400, "this model takes no images (its performance model has no vision encoder)")
    counts, flops = vision.cost((w, h) for w, h, _ in found)
    return tuple((key, n) for (_, _, key), n in zip(found, counts, strict=True)), flops


def parse_generation(body: dict[str, Any], *, chat: bool, names: tuple[str, ...], max_model_len: int,
                     vision: VisionEncoder | None = None) -> GenParams:
    """Validate a generation request as vLLM would (the subset the simulator models). ``vision``: the served
    model's vision encoder (:class:`cardgen.sim.vision.VisionEncoder`), which makes a chat's images tokens and
    work; None: a model that takes none."""
    check_model(body, names)
    images: tuple[tuple[int, int], ...] = ()
    encode_flops = 0.0
    try:
        if chat:
            if "messages" not in body:
                raise ApiError(400, "'messages' is required")
            images, encode_flops = _images(body["messages"], vision)
            prompt_tokens = tokenizer.count_chat(body["messages"]) + sum(tokens for _, tokens in images)
        else:
            if "prompt" not in body:
                raise ApiError(400, "'prompt' is required")
            prompt_tokens = tokenizer.count_prompt(body["prompt"])
    except tokenizer.PromptError as exc:
        raise ApiError(400, str(exc)) from None
    if prompt_tokens < 1:
        raise ApiError(400, "The prompt cannot be empty.")
    if body.get("n") not in (None, 1):
        raise ApiError(400, "this server generates one choice per request (n=1)")

    def integer(name: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ApiError(400, f"'{name}' must be an integer >= {minimum}")
        return int(value)

    raw_max = body.get("max_completion_tokens") if chat else None
    if raw_max is None:
        raw_max = body.get("max_tokens")
    if raw_max is None:
        max_tokens = max_model_len - prompt_tokens
    else:
        max_tokens = integer("max_tokens", raw_max, 1)
    if prompt_tokens + max_tokens > max_model_len or max_tokens < 1:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max(max_tokens, 1)} tokens ({prompt_tokens} in the messages, "
            f"{max(max_tokens, 1)} in the completion). Please reduce the length of the messages or completion.",
        )
    min_tokens = integer("min_tokens", body.get("min_tokens") or 0, 0)
    if min_tokens > max_tokens:
        raise ApiError(
            400, f"min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens})"
        )
    stream = bool(body.get("stream", False))
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    return GenParams(
        chat=chat,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        stream=stream,
        include_usage=include_usage,
        encode_flops=encode_flops,
        images=images,
    )
