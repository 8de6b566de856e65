"""The compute/rest split of a step claims no more than was measured."""
import pytest

from hpcdl.train.figures import step_split


def test_one_rank_never_shows_an_exchange():
    s = step_split(1, 10e-3, "probe", 9.5e-3)
    assert s["compute_share"] == pytest.approx(0.95) and s["rest_s"] == pytest.approx(0.5e-3)
    assert "exchange_s" not in s and "exchange_share" not in s
    assert s["text"] == "compute 95% / rest 5% (update and overhead; nothing exchanged at 1 rank)"
    timed = step_split(1, 10e-3, "timed", 9e-3, 0.1e-3)       # a local copy is no exchange either
    assert "exchange_share" not in timed and "nothing exchanged" in timed["text"]


def test_more_ranks_name_the_rest_as_exchange_not_hidden():
    s = step_split(2, 10e-3, "probe", 8e-3)
    assert s["text"] == "compute 80% / rest 20% (exchange not hidden, update, overhead)"
    t = step_split(4, 10e-3, "timed", 6e-3, 3e-3)
    assert t["exchange_share"] == pytest.approx(0.3) and t["text"] == "compute 60% / exchange 30%"


def test_a_probe_not_shorter_than_the_step_leaves_the_split_undetermined():
    s = step_split(2, 177e-3, "probe", 188e-3)
    assert s["determined"] is False and "compute_share" not in s
    assert "split not determined" in s["text"]


def test_stop_agreements_come_about_once_a_second_and_grow_at_most_twofold():
    from hpcdl.train.control import next_interval
    assert next_interval(10, 10, 0.005, 10) == 20          # 0.5 ms steps: doubles toward 2000
    assert next_interval(1000, 1000, 0.5, 10) == 2000
    assert next_interval(2000, 2000, 1.0, 10) == 2000      # there: about a second
    assert next_interval(40, 40, 8.0, 10) == 10            # 200 ms steps: never fewer than 10
    assert next_interval(10, 0, 0.0, 10) == 10


def test_iteration_rates_give_the_mean_of_rates_and_the_overall_rate_a_script_would_print():
    from hpcdl.train.figures import iteration_rates
    r = iteration_rates(100, [1.0, 2.0, 0.0])          # a zero-length iteration is left out
    assert r["n"] == 2 and r["mean"] == 75.0 and r["overall"] == pytest.approx(200 / 3)
    assert iteration_rates(100, []) == {"n": 0}
