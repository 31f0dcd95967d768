"""One cell of the image grid at one parallel count: a text-only request first, alone (phase ``text``: the text's
own token count and TTFT on this server, read against the image requests'), then one image request alone, kept
as a warm-up (a server's first images pay for its encoder's first use), then ``requests`` image requests (phase
``images``) from ``parallel`` users, each sending its next as its last ends.

A point on the completions endpoint sends nothing ("not run": an image is a part of a chat message). A point whose
first round of image requests all failed (the server refuses images, or images this large or this many) sends no
more, and neither does one whose warm-up image request failed: its analysis says why, from the records.
"""

from __future__ import annotations

from cardgen.kinds.images.schema import ImagesParams
from cardgen.kinds.program import Command, Program, Send
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome
from cardgen.stops import STOP_COMPLETE

TEXT, IMAGES = "text", "images"
NOT_CHAT = "not run: images need the chat endpoint"


class ImagesProgram(Program):
    kind = "images"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(ImagesParams)
        self.users = min(point.parallel or 1, self.params.requests)
        self.sent = 0  # image requests sent
        self.ended_images = 0
        self.failed_images = 0

    def start(self) -> list[Command]:
        if self.point.endpoint != "chat":
            return self.finish(STOP_COMPLETE, NOT_CHAT)  # nothing planned, nothing sent
        return [self.send(slot=0, parallel=1, phase=TEXT, extra={"images": 0, "side": 0})]

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        if send.phase == TEXT:
            return [self.send(slot=0, parallel=1, phase=IMAGES, warmup=True,
                              extra={"images": self.params.images, "side": self.params.side})]
        if send.warmup:
            if not outcome.ok:
                return self.finish(STOP_COMPLETE, "stopped: the warm-up image request failed")
            return [cmd for slot in range(self.users) for cmd in self._next(slot)]
        self.ended_images += 1
        self.failed_images += 0 if outcome.ok else 1
        if self.ended_images == self.users and self.failed_images == self.users and self.sent < self.params.requests:
            return self.finish(STOP_COMPLETE, f"stopped: the first {self.users} image request(s) all failed")
        return self._next(send.slot or 0)

    def _next(self, slot: int) -> list[Command]:
        if self.stop is not None:
            return []
        if self.sent >= self.params.requests:
            return self.finish()
        self.sent += 1
        return [self.send(slot=slot, parallel=self.point.parallel, phase=IMAGES, repeat=self.sent - 1,
                          extra={"images": self.params.images, "side": self.params.side})]
