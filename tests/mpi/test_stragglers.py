"""A straggler on purpose (HPCDL_SLOW) on two real ranks: the record names that rank, its host
and the phase that makes it slow; a run without one names nobody who loses what a straggler does."""
import pytest

from hpcdl.analysis import budget
from hpcdl_testing import check, mpirun, read_records

ARGS = ["--workload", "expmlp", "--steps", "200", "--warmup", "20", "--probes", "8",
        "--num-batches-per-iter", "10"]


def _run(tmp_path, phase, extra=()):
    """A 2-rank run whose rank 1 is 6 ms slower a step in ``phase`` (None: nobody is); its
    record."""
    env = {"HPCDL_THREADS": "1", **({"HPCDL_SLOW": f"rank=1,phase={phase},delay_ms=6"}
                                    if phase else {})}
    check(mpirun(2, ["train", *ARGS, *extra, "--results", str(tmp_path / "runs.jsonl")], env=env))
    (rec,) = read_records(tmp_path / "runs.jsonl")
    return rec


@pytest.fixture(scope="module")
def compute_straggler(tmp_path_factory):
    """The run with a rank slow in compute, which also writes Horovod's timeline: two tests read
    this one launch."""
    tmp = tmp_path_factory.mktemp("compute")
    timeline = tmp / "timelines" / "run.json"
    return _run(tmp, "compute", ["--timeline", str(timeline)]), timeline


@pytest.mark.parametrize("phase", ["compute", "input", None])
def test_the_slow_rank_is_named_with_its_host_and_phase(tmp_path, request, phase):
    rec = (request.getfixturevalue("compute_straggler")[0] if phase == "compute"
           else _run(tmp_path, phase))
    ranks = rec["metrics"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["step"]["n"] == r["input"]["n"] == r["book"]["n"] >= 30 for r in ranks)
    named = budget.stragglers(rec)
    # only a run with Horovod's timeline says what the timeline cost
    assert ("timeline_cost" in rec["metrics"]) == (phase == "compute")
    if phase is None:
        # nobody is named at the scale of a straggler (the 6 ms the other runs inject). On two
        # shared cores beside the test box's daemons a rank is now and then slower in every probe
        # of a sub-millisecond compute (1.40x, 0.22 ms a step once in CI): real, and named, but
        # a thirtieth of a straggler's loss
        assert all(x["lost_s"] < 0.001 for x in named), named
        return
    # the injected rank and phase carry the largest loss; with an input delay of 6 ms against
    # compute of under 1 ms on two shared cores, a rank is now and then also named for a compute
    # that ran slower in every probe (1.85x once), which is a real if small straggler
    assert named, [{k: r.get(k) for k in ("rank", "compute_s", "compute_min_s", "input")}
                   for r in ranks]                      # what each rank measured, if nobody is named
    s = max(named, key=lambda x: x["lost_s"])
    assert (s["rank"], s["host"], s["phase"]) == (1, ranks[1]["host"], phase), named
    assert all(x["lost_s"] < s["lost_s"] / 2 for x in named if x is not s), named
    assert 0.004 <= s["lost_s"] <= 0.010, s                # the 6 ms it was told to lose
    if phase == "compute":
        assert ranks[0]["wait_s"] > 0.004                   # rank 0 waits for it at the probes
        # each rank's probes say the CPU its process spent in them (with Horovod's background
        # loop spinning beside a sleep, as much as the wall time: so no more is asserted)
        assert all(r["compute_cpu_s"] > 0 and r["exchange_cpu_s"] > 0 for r in ranks), ranks


def test_horovods_timeline_of_the_timed_steps_is_summarised_in_the_record(compute_straggler):
    rec, tl = compute_straggler
    t = rec["metrics"]["timeline"]
    assert t["file"] == str(tl) and tl.is_file()
    ms = t["ms_per_step"]
    assert ms["NEGOTIATE_ALLREDUCE"] > 0 and ms["ALLREDUCE"] > 0, ms
    step_ms = rec["metrics"]["step_time"]["median"] * 1e3
    assert ms["ALLREDUCE"] < 3 * step_ms                     # per step, not a run's total
    # it recorded the second half of the 180 timed steps: the first half, timed without it, says
    # what it cost
    assert t["steps"] == 90
    c = rec["metrics"]["timeline_cost"]
    assert (c["steps"], c["without_steps"]) == (90, 90)
    assert c["with_s"] > 0 and c["cost"] == pytest.approx(c["with_s"] / c["without_s"] - 1)


def test_a_slow_input_pipeline_on_every_rank_puts_the_loss_on_input_and_names_nobody(tmp_path):
    from hpcdl import analysis
    runs = tmp_path / "runs.jsonl"
    check(mpirun(1, ["train", *ARGS, "--results", str(runs)], env={"HPCDL_THREADS": "1"}))
    check(mpirun(2, ["train", *ARGS, "--results", str(runs)],
                 env={"HPCDL_THREADS": "1", "HPCDL_SLOW": "rank=*,phase=input,delay_ms=8"}))
    res = analysis.analyse(read_records(runs), "input", scaling="weak")
    (two,) = [b for b in res.budget if b["ranks"] == 2]
    shares = two["budget"]["shares"]
    assert max(budget.PARTS, key=shares.get) == "input", shares
    assert shares["input"] >= 0.3 and two["stragglers"] == []
