"""benchmarks/noise_floor.py pools every box study's repeats by the box's cores per node, leaving
out points whose compute is shorter than the box's CPU period."""
from benchmarks import noise_floor


def _runs(*computes):
    return [{"started": str(i), "step": 2 * c, "compute": c, "exchange": c / 2}
            for i, c in enumerate(computes)]


def test_pool_takes_each_repeat_against_the_others_and_skips_sub_period_computes():
    groups = {("a", 2): _runs(1.0, 1.2), ("a", 4): _runs(1.0, 1.0, 1.5),
              ("a", 8): _runs(0.004, 0.009)}
    into = {"step": [], "compute": [], "exchange": []}
    names = set()
    noise_floor._pool(groups, {"cores": 0.15, "period_s": 0.01}, into, names, "s")
    assert names == {"s"}
    got = sorted(round(d, 3) for d in into["compute"])
    # 1.0/1.2, 1.2/1.0; 1.0 against median(1.0, 1.5) twice; 1.5 against median(1.0, 1.0)
    assert got == [0.167, 0.2, 0.2, 0.2, 0.5]


def test_pooled_lines_name_the_setting_and_the_share_within_15(capsys):
    pooled = {0.15: {"step": [0.0, 0.2], "compute": [0.05, 0.12, 0.3, 0.01],
                     "exchange": []}}
    noise_floor._print_pooled(pooled, {0.15: {"x", "y"}})
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "compute" in ln)
    assert "0.15 cores/node, 2 studies" in line
    assert "4 repeats" in line and "50% within 10%, 75% within 15%" in line
    assert "exchange" not in out
