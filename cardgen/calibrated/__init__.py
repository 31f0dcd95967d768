"""A calibrated card (``cardgen build MODEL --url URL --calibrate``): measure what identifies the server, fit the
virtual server to it, predict the rest of the suite, and check the prediction where it is least sure.

Measuring every point of the reference grid takes far longer than the few points that pin a server's behaviour
down: a step of vLLM-like engines costs about ``max(FLOPs / compute rate, bytes / bandwidth) + a fixed cost +
a cost per sequence``, and the scheduler around it (KV blocks, sequences and tokens a step, chunked prefill) is
the server's own, which it says. So:

1. identify (:mod:`~cardgen.calibrated.identify`): measure the ingestion sweep and a few decode points chosen for
   the constant each one shows; read the scheduler's settings (:mod:`~cardgen.calibrated.settings`);
2. fit (:mod:`~cardgen.calibrated.fit`): the free constants of the fitted server
   (:mod:`~cardgen.calibrated.perf`) that reproduce those measurements in virtual time
   (:mod:`~cardgen.calibrated.replay`), with their uncertainty;
3. predict (:mod:`~cardgen.calibrated.predict`): every point of the suite on the fitted server, as a modelled
   build runs it, each figure with a 95 % interval from the constants' uncertainty, all before any check;
4. check (:mod:`~cardgen.calibrated.check`): measure the largest load of each prompt / output pair, a long-output
   point, and the least certain prediction; a pair whose check misses by more than the tolerance is measured
   point by point instead;
5. report (:mod:`~cardgen.calibrated.steps`): run.json's ``calibration``, the predicted run beside the measured
   one (``predicted.jsonl``), and a card whose every point says whether it was measured or predicted.

What measures is a :class:`~cardgen.calibrated.measurer.Measurer`: the load engine over HTTP
(:mod:`cardgen.calibrated.loadmeasure`, which imports Locust: it is not imported here) or a virtual server in
virtual time (:class:`~cardgen.calibrated.measurer.VirtualMeasurer`, for tests and benchmarks).
:mod:`~cardgen.calibrated.accuracy` compares a calibrated card with the same suite measured point by point;
:mod:`~cardgen.calibrated.plan` prices a calibrated run before it starts.
"""
