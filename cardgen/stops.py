"""Why a point stopped, in ``run.json``'s words (``points[].stop``; summary.json and the card's scenario table say
them too): what a kind's program says when it stops sending (:mod:`cardgen.kinds.program`), and what the controller
and resume say of a point that was skipped or cut off. Plain words, so that the programs below every other layer
and the run's schema above them share one vocabulary."""

STOP_PRECISION = "precision reached"  # every deciding figure's 95 % interval within the point's target_ci
STOP_MINIMUM = "minimum reached"  # no precision target: min_requests and min_duration_s were reached
STOP_MAX_REQUESTS = "max_requests"  # the cap on requests, before the target was reached
STOP_MAX_DURATION = "max_duration"  # the cap on time, before the target was reached
STOP_SATURATED = "saturated"  # it found where the server saturates, or it ran and saturated the server
STOP_COMPLETE = "complete"  # every request the point plans was sent (a rate, a sweep, a batch, a probe)
STOP_SKIPPED = "skipped"  # not run: a smaller parallel count of the same pair saturated the server
STOP_INTERRUPTED = "interrupted"  # cut off (Ctrl-C, a lost worker, a crash): ``cardgen resume`` reruns it
STOP_REASONS = (STOP_PRECISION, STOP_MINIMUM, STOP_MAX_REQUESTS, STOP_MAX_DURATION, STOP_SATURATED, STOP_COMPLETE,
                STOP_SKIPPED, STOP_INTERRUPTED)
