"""The parameters table's lines for each load worker (cardgen.card.sections.parameters.worker_facts)."""

from __future__ import annotations

from cardgen.card.sections.parameters import worker_facts
from cardgen.schemas.run import LoadWorker


def test_a_worker_is_said_with_its_host_requests_clock_and_whether_it_kept_up():
    w = LoadWorker(name="w2", host="node-2", address="10.41.0.5", requests=70, clock_offset_s=0.249982,
                   clock_uncertainty_s=0.000077, clock_applied_s=0.249982, kept_up=True)
    assert worker_facts(w) == ("host node-2 (10.41.0.5); 70 requests; clock +249.982 ms ± 0.077 ms against the "
                               "master's (stamps corrected); kept up")


def test_a_lost_worker_says_what_became_of_it():
    w = LoadWorker(name="w3", address="10.41.0.6", requests=9, lost_requests=2, clock_offset_s=-2e-5,
                   clock_uncertainty_s=1e-4, kept_up=None, lost="it stopped answering the master's heartbeats, "
                   "during point closed-p6 (attempt 0)")
    said = worker_facts(w)
    assert said.startswith("host (10.41.0.6); 9 requests (2 lost with it); clock -0.020 ms ± 0.100 ms")
    assert "not told apart from 0" in said and "not judged" in said
    assert said.endswith("lost: it stopped answering the master's heartbeats, during point closed-p6 (attempt 0)")
    assert worker_facts(LoadWorker(name="w")) == "host —; 0 requests; clock not measured; not judged"
