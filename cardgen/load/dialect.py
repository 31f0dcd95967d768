"""Agree with the server on the fields cardgen's requests carry beyond the OpenAI API, before any load.

cardgen forces every output to its target length with the engine's own fields (vLLM's ``min_tokens`` and
``ignore_eos``; llama.cpp honours ``ignore_eos`` and ignores ``min_tokens``), and asks an ingestion sweep's
requests not to reuse the prompt cache where the engine has such a switch (llama.cpp's ``cache_prompt``). A server
that does not know a field may reject the request for it (``transformers serve`` answers 422), so each field is
tried once on a 1-token request: the ones the server refuses are left out of every request, and run.json and the
card say which, and what follows (outputs may end before their target; the card counts how many did).
"""

from __future__ import annotations

from typing import Any

import requests

from cardgen.engines.base import EngineAdapter
from cardgen.errors import ServerError
from cardgen.load.ask import Answer, Probes
from cardgen.load.ask import ask as ask_once
from cardgen.load.client import length_values
from cardgen.load.sizing import PROBE_TEXT, describe
from cardgen.schemas.run import RequestDialect

REFUSED = (400, 404, 422)  # the answers that mean "not this request" rather than "not now"


def agree(session: requests.Session, base: str, *, model: str, endpoint: str, adapter: EngineAdapter,
          probes: Probes | None = None) -> RequestDialect:
    """The fields the server takes of those ``adapter`` proposes; each refused one with the server's answer (the
    requests it took counted in ``probes``)."""
    tally = probes or Probes()

    def ask(**kwargs: Any) -> Answer:
        return tally.add("agreeing request fields", ask_once(session, base, endpoint=endpoint, model=model,
                                                             text=PROBE_TEXT, **kwargs))

    proposed = {**length_values(adapter.length_fields, output_tokens=1), **dict(adapter.cold_fields)}
    if not proposed:
        return RequestDialect(length_fields=[], cold_fields={})
    first = ask(fields=proposed)
    if first.ok:
        return RequestDialect(length_fields=list(adapter.length_fields), cold_fields=dict(adapter.cold_fields))
    if first.status not in REFUSED:
        raise ServerError(f"a 1-token request to {base} got {describe(first)}")
    plain = ask()
    if not plain.ok:
        raise ServerError(f"a plain 1-token request to {base} got {describe(plain)}")
    accepted: dict[str, Any] = {}
    rejected: dict[str, str] = {}
    for name, value in proposed.items():
        alone = ask(fields={name: value})
        if alone.ok:
            accepted[name] = value
        else:
            rejected[name] = describe(alone)
    return RequestDialect(length_fields=[n for n in adapter.length_fields if n in accepted],
                          cold_fields={k: v for k, v in adapter.cold_fields.items() if k in accepted},
                          rejected=rejected)

