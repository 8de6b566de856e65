"""The cluster box seen from Python: the check's verdict, the refusal of an unchecked box, the
record's box section (pure parts; tests/box runs them on a real box)."""
import json

import pytest

from hpcdl import box
from hpcdl.bench import boxcheck
from hpcdl.errors import UserError

BOX = {"box": "b1", "nodes_count": 2, "link_rate": "200mbit", "latency": "0",
       "cpus_per_node": 0.8, "subnet": "10.77.0.0/24", "licence": "box",
       "nodes": {"n1": {"iface": "eth0"}, "n2": {"iface": "eth0"}}}


def _probe(host, s):
    return {"host": host, "seconds": s}


def _link(*shares, seconds=2.0):
    """Every node's transfers, each carrying ``share`` of the link's rate both ways."""
    passes = [{"seconds": seconds, "tx_bytes": s * 200e6 / 8 * seconds,
               "rx_bytes": s * 200e6 / 8 * seconds} for s in shares]
    return {"ranks": 2, "bytes": 1, "reps": len(shares), "nodes": [
        {"host": h, "passes": passes} for h in ("n1", "n2")]}


def _alone(*seconds):
    return [_probe("n1", s) for s in seconds]


def _together(*rounds):
    return [[_probe("n1", a), _probe("n2", b)] for a, b in rounds]


def test_the_check_passes_a_box_whose_nodes_compute_alone_and_fill_their_links():
    v = boxcheck.verdict(BOX, _alone(1.0, 1.0), _together((1.05, 0.97)), _link(0.9))
    assert v["passed"] and v["reasons"] == []
    assert [r["node"] for r in v["rows"]] == ["n1", "n2"]
    assert v["rows"][0]["tx_share"] == pytest.approx(0.9)
    assert "check: passed" in boxcheck.table(v)


def test_the_check_names_a_slow_node_and_a_slow_link():
    v = boxcheck.verdict(BOX, _alone(1.0, 1.0), _together((1.0, 1.25)), _link(0.6))
    assert not v["passed"]
    assert any(r.startswith("n2: compute 1.25x") for r in v["reasons"])
    assert any("link tx at 60%" in r for r in v["reasons"])
    assert "check: FAILED" in boxcheck.table(v)


def test_one_slow_pass_alone_or_one_slow_transfer_does_not_decide_the_verdict():
    """Each round against the median alone pass, medians over rounds and transfers: one alone pass 25% slow (as on an unchanged box that failed once) leaves the
    verdict as the others give it, and the table shows the spread it saw."""
    v = boxcheck.verdict(BOX, _alone(1.0, 1.25, 1.0, 1.0),
                         _together((1.0, 1.01), (1.02, 1.0), (0.99, 1.0)), _link(0.9, 0.5, 0.91))
    assert v["passed"], v["reasons"]
    assert v["rows"][1]["compute_range"] == [pytest.approx(1.0), pytest.approx(1.01)]
    assert v["alone_range"] == [1.0, 1.25] and v["rows"][0]["tx_share"] == pytest.approx(0.9)
    assert "(median of 4 passes, 1.000-1.250), 3 round(s) together" in boxcheck.table(v)
    slow = boxcheck.verdict(BOX, _alone(1.0, 1.0, 1.0), _together((1.0, 1.2), (1.0, 1.3)), _link(0.9))
    assert any(r.startswith("n2: compute 1.25x") for r in slow["reasons"])


def test_a_study_on_the_box_refuses_a_missing_failed_or_stale_check(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCDL_BOX", str(tmp_path / "box.json"))
    assert box.require_checked() is None                       # no box: nothing to refuse
    (tmp_path / "box.json").write_text(json.dumps(BOX))
    with pytest.raises(UserError, match="not checked"):
        box.require_checked()
    failed = boxcheck.verdict(BOX, _alone(1.0, 1.0), _together((1.0, 1.0)), _link(0.5))
    (tmp_path / "check.json").write_text(json.dumps(failed))
    with pytest.raises(UserError, match="failed its isolation check.*link tx at 50%"):
        box.require_checked()
    passed = boxcheck.verdict(BOX, _alone(1.0, 1.0), _together((1.0, 1.0)), _link(0.9))
    (tmp_path / "check.json").write_text(json.dumps(dict(passed, box="an-earlier-box")))
    with pytest.raises(UserError, match="earlier box"):
        box.require_checked()
    (tmp_path / "check.json").write_text(json.dumps(passed))
    assert box.require_checked()["passed"]


def test_the_record_compares_each_nodes_bytes_with_the_algorithm(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCDL_BOX", str(tmp_path / "box.json"))
    (tmp_path / "box.json").write_text(json.dumps(BOX))
    nets = [{"host": "n1", "hostname": "n1", "tx_bytes": 4100, "rx_bytes": 4000, "exchanges": 2},
            {"host": "n2", "hostname": "n2", "tx_bytes": 4000, "rx_bytes": 4100, "exchanges": 2}]
    sec = box.record_section(["n1", "n2"], nets, "ps", "none", 500, 2)
    assert sec["link_rate"] == "200mbit" and sec["nodes"] == ["n1", "n2"]
    assert sec["algorithm"] == "ps" and sec["payload_bytes"] == 2000
    assert sec["net"][0]["expected_tx"] == 2000 and sec["net"][0]["tx_vs_expected"] == 1.025
    assert box.record_section(["elsewhere"], [None], "ps", "none", 500, 1) is None


def test_submit_on_a_checked_box_takes_the_points_of_its_link_rate_and_exports_its_subnet(
        tmp_path, monkeypatch):
    from hpcdl import study
    from hpcdl.launch import submit
    from hpcdl.launch.jobscript import Software
    f = tmp_path / "b.toml"
    f.write_text('[study]\nname = "b"\nscaling = "weak"\n[workload]\nname = "expmlp"\n'
                 'batch_size = 100\n[layout]\nnodes = [1, 2]\nranks_per_node = 1\n[axes]\n'
                 'backend = ["ps"]\nnetwork = ["200mbit", "1gbit"]\n')
    st = study.load(f, results_root=tmp_path / "results")
    with pytest.raises(UserError, match="none is up here"):
        submit.plan_study(st, Software.here())
    monkeypatch.setenv("HPCDL_BOX", str(tmp_path / "box.json"))
    (tmp_path / "box.json").write_text(json.dumps(BOX))
    with pytest.raises(UserError, match="not checked"):
        submit.plan_study(st, Software.here())
    plan = submit.plan_study(st, Software.here(), unchecked=True)
    assert [s.point_id for s in plan.steps] == ["n1-r1-ps-none-200mbit-rep0", "n2-r1-ps-none-200mbit-rep0"]
    assert plan.waiting == ["n1-r1-ps-none-1gbit-rep0", "n2-r1-ps-none-1gbit-rep0"]
    # every point's job and the report's take the box's one licence, so Slurm runs them one at a time
    for step in plan.steps:
        assert "#SBATCH --licenses=box:1" in step.text.splitlines()
    assert "#SBATCH --licenses=box:1" in plan.report.text.splitlines()
    # a box brought up without the licence would run the points side by side: refused
    (tmp_path / "box.json").write_text(json.dumps({k: v for k, v in BOX.items() if k != "licence"}))
    with pytest.raises(UserError, match="one at a time"):
        submit.plan_study(st, Software.here(), unchecked=True)
    sw = submit.study_software(st)
    assert dict(sw.exports)["OMPI_MCA_btl_tcp_if_include"] == "10.77.0.0/24"


def _study_on_the_box(tmp_path, monkeypatch, rest: str):
    """Study "t" (expmlp, weak) with ``rest`` after its [layout] header, loaded, and the box BOX
    up: (the study file, the study)."""
    from hpcdl import study
    f = tmp_path / "t.toml"
    f.write_text('[study]\nname = "t"\nscaling = "weak"\n[workload]\nname = "expmlp"\n'
                 'batch_size = 100\n[layout]\n' + rest)
    monkeypatch.setenv("HPCDL_BOX", str(tmp_path / "box.json"))
    (tmp_path / "box.json").write_text(json.dumps(BOX))
    return f, study.load(f, results_root=tmp_path / "results")


def _dry_run(plan):
    """What ``hpcdl study submit --dry-run`` prints for ``plan``, line by line."""
    import io
    from hpcdl.launch import submit
    out = io.StringIO()
    submit.submit_study(plan, dry_run=True, out=out)
    return out.getvalue().splitlines()


def test_submit_tune_makes_this_boxs_missing_tuning_files_first_and_the_tuned_points_wait_for_them(
        tmp_path, monkeypatch):
    from hpcdl.launch import submit
    from hpcdl.launch.jobscript import Software
    f, st = _study_on_the_box(tmp_path, monkeypatch,
                              'nodes = [1, 2]\nranks_per_node = 1\n[axes]\n'
                              'exchange = ["horovod+fp16", "horovod"]\n'
                              'network = ["200mbit", "1gbit"]\ntuning = ["default", "tuned"]\n'
                              '[run]\ntuning = '
                              f'"{tmp_path}/tuning/box-{{nodes}}n-{{network}}.json"\n')
    want = f"{tmp_path}/tuning/box-2n-200mbit.json"
    # without --tune the missing file is refused, and only this box's: 1gbit's is made on its box
    with pytest.raises(UserError, match="need tuning files") as err:
        submit.plan_study(st, Software.here(), unchecked=True)
    assert want in str(err.value) and "1gbit" not in str(err.value)
    plan = submit.plan_study(st, Software.here(), unchecked=True, tune=["--knobs", "algorithm"])
    assert [t.tuning for t in plan.tunes] == [want]      # one rank exchanges nothing: no 1-node file
    text = plan.tunes[0].text
    assert "#SBATCH --nodes=2" in text.splitlines() and "#SBATCH --licenses=box:1" in text.splitlines()
    # none first: the search follows the first compression; the points' own exports
    assert (f"-m hpcdl tune --study {f} --compression none,fp16 --knobs algorithm --budget 300 "
            f"--out {want}" in text)
    # the tune job's limit: a point's, and the search's budget beyond it
    assert plan.tunes[0].job.seconds == plan.steps[0].job.seconds + 300
    assert "OMPI_MCA_btl_tcp_if_include" in text
    lines = _dry_run(plan)
    first = next(k for k, line in enumerate(lines) if line.startswith("Would submit"))
    assert lines[first].startswith(f"Would submit the tuning job for {want}")
    tuned = [line for line in lines if "-ttuned-" in line and "n2-" in line and "Would" in line]
    # a tuned point starts only after its file was made; if it was not, Slurm cancels it
    assert len(tuned) == 2 and all(f"--dependency=afterok:<the tuning job for {want}> "
                                   "--kill-on-invalid-dep=yes" in line for line in tuned)
    assert not any("afterany" in line for line in lines
                   if "-tdefault-" in line or "Would submit point n1-" in line)
    # a file that exists with a pick for every compression is not made again
    (tmp_path / "tuning").mkdir()
    open(want, "w").write(json.dumps({"picks": {"none": {}, "fp16": {}}}))
    assert submit.plan_study(st, Software.here(), unchecked=True, tune=[]).tunes == []


def test_submit_tune_makes_the_calibrations_tuning_files_for_the_held_out_horovod_points(
        tmp_path, monkeypatch):
    from hpcdl.launch import submit
    from hpcdl.launch.jobscript import Software
    f, st = _study_on_the_box(tmp_path, monkeypatch,
                              'nodes = [1, 2, 4]\nranks_per_node = 1\n[axes]\n'
                              'exchange = ["horovod", "ps", "horovod+fp16"]\n'
                              'network = ["200mbit", "1gbit"]\n[model]\n'
                              'calibrate = { nodes_max = 2, exchange = '
                              f'"{tmp_path}/tuning/c-{{nodes}}n-{{network}}.json" }}\n')
    # the points run without the files: submitting without --tune queues them all, no tuning job
    assert submit.plan_study(st, Software.here(), unchecked=True).tunes == []
    plan = submit.plan_study(st, Software.here(), unchecked=True, tune=["--rounds", "1"])
    # the held-out node count (measured there, beside its prediction) and the small node count
    # above the calibration its prediction is priced from (3), this box's rate, Horovod's
    # compressions (ps has no tune)
    small, want = f"{tmp_path}/tuning/c-3n-200mbit.json", f"{tmp_path}/tuning/c-4n-200mbit.json"
    assert [t.tuning for t in plan.tunes] == [small, want]
    assert (f"-m hpcdl tune --study {f} --compression none,fp16 --rounds 1 --budget 300 --out {want}"
            in plan.tunes[1].text)
    assert "#SBATCH --nodes=4" in plan.tunes[1].text.splitlines()
    assert "#SBATCH --nodes=3" in plan.tunes[0].text.splitlines()
    lines = _dry_run(plan)
    assert lines[next(k for k, x in enumerate(lines) if x.startswith("Would submit"))].startswith(
        f"Would submit the tuning job for {small}")
    # no point waits for it: the points do not run with the file, the report reads it
    assert not any("afterany" in x for x in lines if x.startswith("Would submit point"))
    (tmp_path / "tuning").mkdir()
    open(small, "w").write(json.dumps({"picks": {"none": {}, "fp16": {}}}))
    open(want, "w").write(json.dumps({"picks": {"none": {}}}))
    assert [t.tuning for t in submit.plan_study(st, Software.here(), unchecked=True,
                                                 tune=[]).tunes] == [want]    # no fp16 pick
    open(want, "w").write(json.dumps({"picks": {"none": {}, "fp16": {}}}))
    assert submit.plan_study(st, Software.here(), unchecked=True, tune=[]).tunes == []


@pytest.mark.parametrize("v2", [True, False])
def test_a_nodes_quota_is_set_on_cgroup_v2_and_v1_and_a_quota_under_1_ms_refused(tmp_path, v2):
    if v2:
        (tmp_path / "cpu.max").write_text("max 100000\n")
    else:
        (tmp_path / "cpu.cfs_period_us").write_text("1000\n")
        (tmp_path / "cpu.cfs_quota_us").write_text("1000\n")
    box.set_quota(str(tmp_path), 0.2, 5000)
    if v2:
        assert (tmp_path / "cpu.max").read_text() == "1000 5000"
    else:
        assert [(tmp_path / f).read_text() for f in ("cpu.cfs_period_us", "cpu.cfs_quota_us")] == \
            ["5000", "1000"]
    with pytest.raises(UserError, match="under the kernel's least quota"):
        box.set_quota(str(tmp_path), 0.2, 2000)
