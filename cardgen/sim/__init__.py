"""The virtual GPU server: one model of an inference server, two clocks.

- :mod:`cardgen.sim.perf` (the :class:`PerfModel` protocol, :class:`FixedPerf`) and :mod:`cardgen.sim.roofline`
  (a model architecture on a GPU under an engine profile): how long one engine step takes.
- :mod:`cardgen.sim.scheduler`: continuous batching over paged KV blocks, pure.
- :mod:`cardgen.sim.metrics`: the vLLM-compatible ``/metrics`` it exposes.
- :mod:`cardgen.sim.server`: in real time, an OpenAI-compatible HTTP server (``cardgen serve-sim``): its HTTP API
  (``api``), engine loop (``engine``), requests (``validate``, ``live``), SSE framing (``sse``), stamp log
  (``stamps``) and process (``lifecycle``).
- :mod:`cardgen.sim.virtual` and :mod:`cardgen.sim.drive`: in virtual time, the same engine driven by the load
  engine's scenario rules, with no sleeping: what a suite would record, in a second.
"""
