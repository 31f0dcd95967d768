"""The parameters table (cardgen.card.sections.parameters): the load generator, each load worker."""

from __future__ import annotations

from cardgen.card.sections.parameters import parameters_table, worker_facts
from cardgen.schemas.run import LoadgenReport, LoadWorker, RunInfo, ServerInfo
from cardgen.schemas.summary import Summary


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


def test_a_worker_asked_to_hold_its_cpus_awake_says_what_came_of_it():
    held = LoadWorker(name="w", host="h", requests=3, kept_up=True,
                      cpus_awake="held awake: /dev/cpu_dma_latency at 0 us while the load ran")
    assert worker_facts(held).endswith("; kept up; CPUs held awake: /dev/cpu_dma_latency at 0 us while the load ran "
                                       "(--low-latency)")
    refused = held.model_copy(update={"cpus_awake": "not held awake: /dev/cpu_dma_latency could not be opened "
                                                    "(it needs root)"})
    assert "CPUs not held awake: /dev/cpu_dma_latency could not be opened (it needs root) (--low-latency)" in \
        worker_facts(refused)


def test_the_load_generators_own_cpus_are_a_row_only_when_asked_to_hold_them():
    info = RunInfo(model="m", server=ServerInfo(url="http://127.0.0.1:8000"), cardgen_version="0", command=["build"],
                   suite="t", started_at="2026-12-03T00:00:00Z", started_unix=0.0)
    rows = {row[0]: row[1] for row in parameters_table(Summary(model="m"), info, "2026-12-03").rows}
    assert "Load generator CPUs (--low-latency)" not in rows
    info.loadgen = LoadgenReport(cpus_awake="held awake: /dev/cpu_dma_latency at 0 us while the load ran")
    rows = {row[0]: row[1] for row in parameters_table(Summary(model="m"), info, "2026-12-03").rows}
    assert rows["Load generator CPUs (--low-latency)"] == "held awake: /dev/cpu_dma_latency at 0 us while the load ran"
