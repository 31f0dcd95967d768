"""What load-generating processes say to each other: one pydantic model per message.

Locust carries custom messages as untyped dicts and swallows exceptions raised by their handlers, so
every message crosses the wire through :func:`send` and arrives through :func:`listen`, which validates it
into its model and hands any failure (a malformed message, a handler that raised) to ``on_error`` instead
of letting Locust log it and go on. The local runner passes the same objects without the wire.

    master -> worker  ClockPing    the master's clock, to measure the worker's against (cardgen.load.clocks)
    worker -> master  ClockPong    the ping answered with the worker's clock as it came in and as it went out
                      Reached      after Setup, before the load: whether the worker reaches the server
    master -> agent   Setup        once per agent: model, headers, prompt templates, the agent's share
                      Assignment   a point to run, with this agent's index, the number of parts and the attempt
                      StopPoint    the point's figures are precise: send no more of its requests
    worker -> master  Listening    the worker hears cardgen's messages: Setup may be sent to it (Locust drops a
                                   message that comes before its handler is registered, and a worker registers
                                   them only once it has connected)
    agent -> master   Ready        the agent's user is running and waits for points
                      Record       one finished request (workers only; locally the sink writes it)
                      LoadgenTick  the load generator measuring itself, once a second
                      Done         the agent finished its share of a point, and why it stopped sending
                      Fatal        a record could not be delivered: the run must stop and say so
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from cardgen.errors import one_line
from cardgen.points import Point
from cardgen.schemas.records import LoadgenSample, RequestRecord


class Message(BaseModel):
    """Base of every message; ``topic`` is its Locust message type."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: ClassVar[str]


class Setup(Message):
    topic: ClassVar[str] = "cardgen_setup"

    model: str  # the served model id requests are sent with
    engine: str | None = None  # the engine's adapter name (reads the saturation watcher's metrics)
    headers: dict[str, str] = Field(default_factory=dict)
    templates: dict[str, dict[int, str]]  # endpoint -> prompt length in tokens -> template text
    # a dataset sample's key (Point.dataset_key) -> each request's prompt template (cardgen.datasets.resolve)
    dataset_texts: dict[str, list[str]] = Field(default_factory=dict)
    nonce: int  # makes request ids unique across runs (defeats prefix caching)
    low_latency: bool = False  # hold the agent's CPUs out of idle while it sends (cardgen.load.wake)
    # the fields agreed with the server (cardgen.load.dialect): those forcing the output length, and those an
    # ingestion sweep's requests add
    length_fields: list[str] = Field(default_factory=lambda: ["min_tokens", "ignore_eos"])
    cold_fields: dict[str, Any] = Field(default_factory=dict)
    id_style: str = "plain"  # how request ids are written in prompts (cardgen.prompts.ID_STYLES)
    index: int = 0  # this agent's share of split points
    parts: int = 1
    name: str | None = None  # the worker's name in records; None keeps the name it was started with


class Assignment(Message):
    topic: ClassVar[str] = "cardgen_point"

    point: Point
    index: int
    parts: int
    attempt: int = 0  # stamped into every record of the point (RequestRecord.attempt): ``cardgen resume``


class StopPoint(Message):
    """The master saw, in the records of every agent, that the point's figures are as precise as its
    ``target_ci``: agents send no more of its requests (those in flight finish and are recorded)."""

    topic: ClassVar[str] = "cardgen_stop_point"

    point: str


class Listening(Message):
    topic: ClassVar[str] = "cardgen_listening"

    worker: str
    host: str | None = None  # the worker's host name
    address: str | None = None  # the address it reaches the master from


class ClockPing(Message):
    topic: ClassVar[str] = "cardgen_clock_ping"

    seq: int
    master_unix: float  # t0: the master's clock as it sent the ping


class ClockPong(Message):
    topic: ClassVar[str] = "cardgen_clock_pong"

    worker: str
    seq: int
    master_unix: float  # t0, echoed
    received_unix: float  # t1: the worker's clock as the ping came in
    sent_unix: float  # t2: the worker's clock as the pong went out


class Reached(Message):
    """The worker tried the server's address before any load: ``error`` says why it could not (None: it could)."""

    topic: ClassVar[str] = "cardgen_reached"

    worker: str
    error: str | None = None
    cpus_awake: str | None = None  # what ``Setup.low_latency`` came to on its host (cardgen.load.wake; None: not asked)


class Ready(Message):
    topic: ClassVar[str] = "cardgen_ready"

    worker: str


class Record(Message):
    topic: ClassVar[str] = "cardgen_record"

    record: RequestRecord


class LoadgenTick(Message):
    topic: ClassVar[str] = "cardgen_loadgen"

    sample: LoadgenSample


class Done(Message):
    topic: ClassVar[str] = "cardgen_done"

    point: str
    worker: str
    sent: int
    started_unix: float
    ended_unix: float
    stop: str | None = None  # why this agent stopped sending: one of cardgen.stops.STOP_REASONS
    detail: str | None = None  # the words behind ``stop`` (a bracket, an interval)


class Fatal(Message):
    topic: ClassVar[str] = "cardgen_fatal"

    worker: str
    error: str  # one line: what failed
    delivered: int  # records this agent delivered before the failure


#: what an agent sends (locally to the runner, on a worker to the master)
AgentMessage = Ready | Record | LoadgenTick | Done | Fatal

M = TypeVar("M", bound=Message)


def send(runner: Any, message: Message, *, client_id: str | None = None) -> None:
    """Send ``message`` over a Locust runner's channel (to one worker when ``client_id`` is given)."""
    runner.send_message(message.topic, message.model_dump(mode="json"), client_id=client_id)


def listen(runner: Any, kind: type[M], handler: Callable[[M, str], None], *,
           on_error: Callable[[str], None]) -> None:
    """Call ``handler(message, sender_node_id)`` for each ``kind`` message that reaches ``runner``.

    A message that does not validate, or a handler that raises, goes to ``on_error`` as one line."""

    def listener(environment: Any, msg: Any) -> None:  # Locust's signature for message handlers
        try:
            handler(kind.model_validate(msg.data), str(msg.node_id))
        except Exception as exc:  # Locust would only log it: see the module docstring
            on_error(f"{kind.__name__} message from {msg.node_id}: {type(exc).__name__}: {one_line(exc)}")

    runner.register_message(kind.topic, listener)
