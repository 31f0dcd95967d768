from cardgen.analysis.options import AnalysisOptions
from cardgen.saturation import (
    MAX_KV_USAGE,
    MIN_SPEED_TOK_S,
    LoadSeen,
    Reading,
    closed_load_seen,
    point_saturation,
    watched_saturated,
)


def test_defaults_are_the_analysis_defaults():
    options = AnalysisOptions()
    assert (MAX_KV_USAGE, MIN_SPEED_TOK_S) == (options.max_kv_usage, options.min_speed_tok_s)


def test_a_point_saturates_on_any_signal_and_says_which():
    assert point_saturation(LoadSeen()) is None
    assert point_saturation(LoadSeen(kv_usage_max=0.5, preemptions=0, waiting_max=0, median_speed_tok_s=40)) is None
    assert point_saturation(LoadSeen(kv_usage_max=0.97)) == "KV cache 97% full"
    assert "2 preemptions" in point_saturation(LoadSeen(preemptions=2))
    assert "3 requests waiting" in point_saturation(LoadSeen(waiting_max=3))
    assert point_saturation(LoadSeen(waiting_max=7, waiting_fraction=0.1)) is None  # a start-up burst
    assert "in 80% of readings" in point_saturation(LoadSeen(waiting_max=7, waiting_fraction=0.8, waiting_readings=8))
    # a short point's one reading after its first round caught a request between two steps: not saturation
    assert point_saturation(LoadSeen(waiting_max=1, waiting_fraction=1.0, waiting_readings=1)) is None
    assert "in 100% of readings" in point_saturation(LoadSeen(waiting_max=1, waiting_fraction=1.0, waiting_readings=2))
    assert "below 20" in point_saturation(LoadSeen(median_speed_tok_s=12.5))
    assert point_saturation(LoadSeen(median_speed_tok_s=12.5), min_speed_tok_s=10) is None


def test_a_wave_saturates_on_preemption_or_waiting_with_a_full_cache():
    assert watched_saturated(preempted=True, waiting=0, kv_usage=0.1)
    assert watched_saturated(preempted=False, waiting=2, kv_usage=0.93)
    assert not watched_saturated(preempted=False, waiting=2, kv_usage=0.5)  # max_num_seqs, not the cache
    assert not watched_saturated(preempted=False, waiting=0, kv_usage=0.99)
    assert watched_saturated(preempted=False, waiting=None, kv_usage=None, queued_for_kv=True)


def test_requests_that_wait_only_briefly_are_not_saturation():
    def seen(waiting):
        readings = [Reading(t=float(t), usage=0.5, waiting=w, preemptions=3.0) for t, w in enumerate(waiting)]
        return closed_load_seen(readings, started=0.0, ended=len(waiting), first_round_end=2.0,
                                median_speed_tok_s=50.0)

    # all users' prefills queue at the start (before the first round ended), and now and then after it
    assert point_saturation(seen([8, 6, 0, 0, 3, 0, 0, 0, 2, 0])) is None
    # waiting in half the readings after the first round: persistent
    assert seen([8, 6, 0, 4, 3, 0, 0, 5, 2, 0]).waiting_max == 5
    assert "5 requests waiting in 50% of readings" in point_saturation(seen([8, 6, 0, 4, 3, 0, 0, 5, 2, 0]))
    assert seen([0] * 10).preemptions == 0 and seen([0] * 10).kv_usage_max == 0.5


def test_a_queue_its_kind_makes_on_purpose_is_no_sign_of_saturation():
    waiting = LoadSeen(waiting_max=9, waiting_fraction=1.0, waiting_readings=9, kv_usage_max=0.97)
    assert point_saturation(waiting, by_design=frozenset({"queue"})) == "KV cache 97% full"  # the cache still is
    assert "9 requests waiting" in point_saturation(waiting)
