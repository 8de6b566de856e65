"""The tuning file: which one a run takes, what it may hold, how its pick replaces the
environment, and how hpcdl tune picks from what its launches measured (the launches themselves
run on real ranks in tests/mpi/test_tune.py)."""
import json
import types

import pytest

from hpcdl.bench import tune, tune_file, tune_launch
from hpcdl.comm import tuning
from hpcdl.errors import UserError

PICK = {"HOROVOD_CYCLE_TIME": "0.2", "HOROVOD_FUSION_THRESHOLD": "33554432",
        "HOROVOD_HIERARCHICAL_ALLREDUCE": "0", "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",
        "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": "0"}


def _file(tmp_path, picks=None, made_for=None, **extra):
    doc = {"schema": tuning.SCHEMA, "made_for": made_for or {"nodes": 2, "ranks": 2},
           "picks": picks if picks is not None else {"none": {"name": "ring", "env": PICK}},
           **extra}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_flag_wins_over_the_environment_and_default_means_none():
    assert tuning.path_of("a.json", {"HPCDL_TUNING": "b.json"}) == "a.json"
    assert tuning.path_of(None, {"HPCDL_TUNING": "b.json"}) == "b.json"
    assert tuning.path_of("default", {"HPCDL_TUNING": "b.json"}) is None
    assert tuning.path_of(None, {"HPCDL_TUNING": "none"}) is None
    assert tuning.path_of(None, {}) is None


def test_the_pick_replaces_the_environment_and_the_section_says_what_it_replaced(tmp_path):
    path = _file(tmp_path)
    env = {"HOROVOD_FUSION_THRESHOLD": "67108864", "HOROVOD_CYCLE_TIME": "0.2", "OTHER": "x"}
    section = tuning.take(None, "none", dict(env, HPCDL_TUNING=str(path)))
    assert section["source"] == "HPCDL_TUNING" and section["settings"] == PICK
    assert section["replaced"] == {"HOROVOD_FUSION_THRESHOLD": "67108864"}   # same value: not replaced
    assert len(section["sha256"]) == 64 and section["pick"] == "ring"
    env2 = dict(env)
    section = tuning.take(str(path), "none", env2)
    assert section["source"] == "--tuning" and all(env2[k] == v for k, v in PICK.items())
    assert env2["OTHER"] == "x"


def test_without_a_file_the_section_names_what_the_environment_holds():
    env = {"HOROVOD_FUSION_THRESHOLD": "67108864", "PATH": "/bin"}
    assert tuning.take("default", "none", env) == {
        "source": "default", "settings": {"HOROVOD_FUSION_THRESHOLD": "67108864"}}
    assert env == {"HOROVOD_FUSION_THRESHOLD": "67108864", "PATH": "/bin"}


@pytest.mark.parametrize("doc, words", [
    (None, "no such file"),
    ("not json", "not readable JSON"),
    ({"schema": "other"}, "not an hpcdl tuning file"),
    ({"schema": tuning.SCHEMA, "picks": {}}, "holds no picks"),
    ({"schema": tuning.SCHEMA, "picks": {"none": {"env": {"LD_PRELOAD": "x"}}}},
     "LD_PRELOAD is not a setting a tuning file may hold"),
])
def test_a_bad_tuning_file_is_refused_with_what_is_wrong(tmp_path, doc, words):
    path = tmp_path / "t.json"
    if doc is not None:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(UserError, match=words):
        tuning.take(str(path), "none", {})


def test_a_compression_the_file_was_not_tuned_for_is_refused(tmp_path):
    with pytest.raises(UserError, match="tuned for none gradients, not fp16.*--compression fp16"):
        tuning.take(str(_file(tmp_path)), "fp16", {})


def test_a_run_on_another_allocation_than_the_tuned_one_is_named(tmp_path):
    section = tuning.take(str(_file(tmp_path)), "none", {})
    assert tuning.mismatch(section, 2, 2) is None
    assert "tuned on 2 node(s), 2 rank(s); this run has 4 node(s), 4 rank(s)" in \
        tuning.mismatch(section, 4, 4)
    assert tuning.mismatch({"source": "default", "settings": {}}, 4, 4) is None


# --- hpcdl tune's choice from what its launches measured ---------------------------------------

def _search(margin=0.03, comps=("none",)):
    opts = types.SimpleNamespace(margin=margin)
    return tune.Search(opts, list(comps), ["cycle"], [(0, 0), (4, 0)])


def test_the_search_result_is_taken_when_faster_and_written_as_full_settings(monkeypatch):
    for k in tune.HOROVOD_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    se = _search()
    confirm = {"default": {"none": [0.010, 0.011, 0.012]}, "pick": {"none": [0.005, 0.006, 0.007]}}
    pick = tune_file.picks(se, {"HOROVOD_CYCLE_TIME": "0.2"}, (4, 0), confirm)["none"]
    assert pick["name"] == "ring, cycle 0.2 ms, fusion 128 MiB"
    assert pick["exchange_s"] == 0.006 and pick["default_s"] == 0.011
    assert pick["gain"] == pytest.approx(0.011 / 0.006)
    assert pick["env"] == {"HOROVOD_CYCLE_TIME": "0.2", "HOROVOD_FUSION_THRESHOLD": str(128 << 20),
                           "HOROVOD_HIERARCHICAL_ALLREDUCE": "0",
                           "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                           "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",
                           "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": "0"}
    assert set(pick["env"]) == set(tuning.SETTINGS)


def test_a_gain_within_the_margin_keeps_the_default_and_the_job_environment(monkeypatch):
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", str(64 << 20))     # what a job script exports
    monkeypatch.delenv("HOROVOD_CYCLE_TIME", raising=False)
    se = _search()
    confirm = {"default": {"none": [0.0100] * 3}, "pick": {"none": [0.0099] * 3}}
    pick = tune_file.picks(se, {"HOROVOD_CYCLE_TIME": "5"}, (4, 0), confirm)["none"]
    assert pick["name"] == "library's choice, cycle 1 ms, fusion 64 MiB" and pick["gain"] == 1.0
    assert pick["searched"] == "ring, cycle 5 ms, fusion 64 MiB"
    assert pick["env"]["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "0"
    assert pick["env"]["OMPI_MCA_coll_tuned_allreduce_algorithm"] == "0"
    assert pick["env"]["HOROVOD_FUSION_THRESHOLD"] == str(64 << 20)
    se.opts.margin = 0.0
    assert tune_file.picks(se, {"HOROVOD_CYCLE_TIME": "5"}, (4, 0), confirm)["none"]["name"] \
        .startswith("ring")


def test_tune_refuses_what_it_cannot_do_before_launching_anything():
    import argparse
    p = argparse.ArgumentParser()
    tune.add_arguments(p)
    for argv, words in ((["--compression", "int8"], "tune none, fp16 or both"),
                        (["--knobs", "speed"], "unknown speed"),
                        (["--rounds", "0"], "at least 1")):
        with pytest.raises(UserError, match=words):
            tune.main(p.parse_args(argv))


def test_an_algorithm_only_search_is_decided_by_the_launches_that_ran_it_beside_the_default(
        monkeypatch):
    for k in tune.HOROVOD_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    se = tune.Search(types.SimpleNamespace(margin=0.03), ["none"], [], [(0, 0), (4, 0)])
    se.runs[tune._key(se.effective({}))] = [
        {"times": {"0/0": {"none": [0.7, 0.71]}, "4/0": {"none": [0.41, 0.43]}}},
        {"times": {"0/0": {"none": [0.72]}, "4/0": {"none": [0.42]}}}]
    monkeypatch.setattr(tune, "_launch", lambda *a: pytest.fail("no launch is needed"))
    confirm = tune._confirm(se, {}, (4, 0))
    assert confirm == {"default": {"none": [0.7, 0.71, 0.72]}, "pick": {"none": [0.41, 0.43, 0.42]}}
    pick = tune_file.picks(se, {}, (4, 0), confirm)["none"]
    assert pick["name"].startswith("ring") and pick["gain"] == pytest.approx(0.71 / 0.42)


def test_an_algorithm_only_search_lets_each_compression_take_its_own_fastest_algorithm(monkeypatch):
    for k in tune.HOROVOD_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    # measured on the 4-node box: fp32 fastest on the segmented ring, fp16 on the plain ring
    se = tune.Search(types.SimpleNamespace(margin=0.03), ["none", "fp16"], [],
                     [(0, 0), (4, 0), (5, 1 << 20)])
    se.runs[tune._key(se.effective({}))] = [{
        "times": {"0/0": {"none": [0.62, 0.63], "fp16": [0.34, 0.35]},
                  "4/0": {"none": [0.381, 0.382], "fp16": [0.220, 0.221]},
                  "5/1048576": {"none": [0.379, 0.380], "fp16": [0.238, 0.239]}},
        "native": [0.59], "bytes": 4 << 20, "ranks": 4, "nodes": 4, "tensors": 10,
        "link_limit_s": 0.277}]
    confirm = tune._confirm(se, {}, (5, 1 << 20))
    picks = tune_file.picks(se, {}, (5, 1 << 20), confirm)
    assert picks["none"]["name"].startswith("segmented ring")
    assert picks["fp16"]["name"].startswith("ring,")
    assert picks["fp16"]["env"]["OMPI_MCA_coll_tuned_allreduce_algorithm"] == "4"
    assert picks["fp16"]["exchange_s"] == pytest.approx(0.2205)
    table = tune_file.table(se, picks, se.runs[tune._key(se.effective({}))][0])
    # the link carries fp16's half as many bytes: its limit is half fp32's
    fp16_ring = next(line for line in table if line.startswith(" fp16 *ring"))
    assert fp16_ring.split()[-1] == f"{0.277 / 2 / 0.2205:.2f}"
    none_seg = next(line for line in table if line.startswith(" none *segmented"))
    assert none_seg.split()[-1] == f"{0.277 / 0.3795:.2f}"
    # each pick against the link's bound for a ring, as a study's report holds its steps
    said = next(line for line in table if line.startswith("# fp16: the search found"))
    assert said.endswith(f"it takes {0.2205 / (0.277 / 2):.2f}x the link's bound for a ring "
                         "(138.5 ms, its bytes at the line rate)")


def test_where_ranks_share_memory_the_table_measures_against_a_memcpy_of_the_bytes(monkeypatch):
    for k in tune.HOROVOD_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    se = tune.Search(types.SimpleNamespace(margin=0.03), ["none"], [], [(0, 0), (4, 0)])
    first = {"times": {"0/0": {"none": [0.010]}, "4/0": {"none": [0.008]}}, "native": [0.006],
             "bytes": 64 << 20, "ranks": 2, "nodes": 1, "tensors": 1, "link_limit_s": None,
             "memcpy_s": 0.004}
    se.runs[tune._key(se.effective({}))] = [first]
    picks = tune_file.picks(se, {}, (4, 0), tune._confirm(se, {}, (4, 0)))
    table = tune_file.table(se, picks, first)
    assert table[0].endswith(" vs memcpy")
    assert next(ln for ln in table if ln.startswith(" none *ring")).split()[-1] == "0.50"
    assert "a memcpy of those bytes on every rank at once 4.00 ms" in "\n".join(table)


def test_a_horovod_knob_goes_by_the_step_the_compute_beside_its_thread_included(monkeypatch):
    # measured on a 0.2-core box node: Horovod's 1 ms cycle slowed the forward and backward pass
    # 15% against a 5 ms cycle, which the exchange alone does not show
    for k in tune.HOROVOD_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    se = _search()
    five = {"HOROVOD_CYCLE_TIME": "5"}
    facts = {"native": [0.3], "bytes": 4 << 20, "ranks": 2, "nodes": 2, "tensors": 10}
    se.runs[tune._key(se.effective({}))] = [
        {"times": {"4/0": {"none": [0.400, 0.402]}}, "compute": {"4/0": [1.45, 1.47]}, **facts}]
    se.runs[tune._key(se.effective(five))] = [
        {"times": {"4/0": {"none": [0.410, 0.412]}}, "compute": {"4/0": [1.25, 1.27]}, **facts}]
    assert se.step(five, (4, 0), "none") < se.step({}, (4, 0), "none")
    assert se.median(five, (4, 0), "none") > se.median({}, (4, 0), "none")
    assert se.compute(five, "0/0") is None              # launches of other algorithms: none
    confirm = {"default": {"none": [0.40] * 3}, "pick": {"none": [0.41] * 3},
               "compute": {"default": 1.46, "pick": 1.26}}
    pick = tune_file.picks(se, five, (4, 0), confirm)["none"]
    assert pick["chosen"] and pick["name"] == "ring, cycle 5 ms, fusion 128 MiB"
    assert pick["gain"] < 1 and pick["step_gain"] == pytest.approx(1.86 / 1.67)
    assert pick["compute_s"] == 1.26 and pick["default_compute_s"] == 1.46
    table = tune_file.table(se, {"none": pick}, facts)
    row = next(ln for ln in table if ln.startswith(" none *"))
    assert row.split()[-5:-3] == ["411.00", "1260.0"]          # exchange, compute beside it
    line = table[-1]
    assert "1260.0 ms against 1460.0 ms computing beside it, so the file takes it (1.11x)" in line
    # without the compute beside both, the exchange alone decides
    del confirm["compute"]
    assert not tune_file.picks(se, five, (4, 0), confirm)["none"]["chosen"]


def test_an_algorithm_far_slower_for_every_compression_after_the_first_round_is_dropped():
    # the 8-node box at 200 Mbit/s: recursive doubling 3x the ring for both; Rabenseifner 1.7x
    # the ring in fp32 but 1.4x in fp16; the library's own choice is always timed again
    times = {"0/0": {"none": [0.71], "fp16": [0.37]}, "4/0": {"none": [0.41], "fp16": [0.32]},
             "6/0": {"none": [0.71], "fp16": [0.36]}, "3/0": {"none": [1.24], "fp16": [0.69]}}
    keep, dropped = tune_launch.prune([(0, 0), (4, 0), (6, 0), (3, 0)], times, ["none", "fp16"])
    assert keep == [(0, 0), (4, 0), (6, 0)] and dropped == ["3/0"]
    keep, dropped = tune_launch.prune([(0, 0), (4, 0), (6, 0), (3, 0)], times, ["none"])
    assert keep == [(0, 0), (4, 0)] and dropped == ["6/0", "3/0"]


def test_a_run_on_a_box_with_other_settings_than_the_tuned_one_is_named(tmp_path):
    section = tuning.take(str(_file(tmp_path)), "none", {})
    then = {"box": "b1", "link_rate": "200mbit", "latency": "0", "cpus_per_node": 0.2,
            "cpu_period_us": 10000}
    section["made_for"]["box"] = then
    # the same settings on another instance of the box: nothing to say
    assert tuning.mismatch(section, 2, 2, {**then, "box": "b2", "node": "n1"}) is None
    note = tuning.mismatch(section, 2, 2, {**then, "cpu_period_us": 5000})
    assert note.endswith("was tuned on a cluster box with cpu_period_us=10000; this run's box "
                         "has cpu_period_us=5000")
    # both: another allocation and another box
    assert tuning.mismatch(section, 4, 4, {**then, "link_rate": "500mbit"}).count("tuned on") == 2
    # off the box, or a file that does not say: only the allocation is compared
    assert tuning.mismatch(section, 2, 2, None) is None
    del section["made_for"]["box"]
    assert tuning.mismatch(section, 2, 2, {**then, "cpu_period_us": 5000}) is None


# --- a backend as the pick (hpcdl tune --knobs backend) ----------------------------------------

def test_a_pick_may_name_a_backend_and_a_run_without_backend_takes_it(tmp_path):
    path = _file(tmp_path, picks={"none": {"name": "hpcdl ring", "env": PICK, "backend": "ring"},
                                  "fp16": {"name": "h", "env": PICK}})
    assert tuning.backend_of(str(path), "none", {}) == "ring"
    assert tuning.backend_of(str(path), "fp16", {}) == "horovod"     # a pick without: Horovod's
    assert tuning.backend_of(None, "none", {}) is None
    assert tuning.backend_of(None, "none", {"HPCDL_TUNING": str(path)}) == "ring"
    assert tuning.take(str(path), "none", {})["backend"] == "ring"
    with pytest.raises(UserError, match="tuned for fp16, none gradients, not int8"):
        tuning.backend_of(str(path), "int8", {})


def test_a_pick_naming_a_backend_no_tune_picks_is_refused(tmp_path):
    path = _file(tmp_path, picks={"none": {"name": "x", "env": PICK, "backend": "ps"}})
    with pytest.raises(UserError, match="backend 'ps' is not one a tuning file may pick"):
        tuning.take(str(path), "none", {})


def _train_opts(argv, monkeypatch, size):
    import argparse
    from hpcdl.train import options
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", str(size))
    p = argparse.ArgumentParser()
    options.add_arguments(p)
    opts = p.parse_args(argv)
    options.resolve_backend(opts)
    return opts


def test_training_runs_the_picks_backend_unless_one_is_given_or_one_rank_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("HPCDL_TUNING", raising=False)
    path = str(_file(tmp_path, picks={"none": {"name": "r", "env": PICK, "backend": "ring"}}))
    opts = _train_opts(["--tuning", path], monkeypatch, 2)
    assert (opts.backend, opts.backend_from) == ("ring", "the tuning file")
    opts = _train_opts(["--tuning", path, "--backend", "horovod"], monkeypatch, 2)
    assert (opts.backend, opts.backend_from) == ("horovod", "--backend")
    # one rank exchanges nothing and takes no tuning file (hpcdl.train.runtime)
    opts = _train_opts(["--tuning", path], monkeypatch, 1)
    assert (opts.backend, opts.backend_from) == ("horovod", "default")
    opts = _train_opts([], monkeypatch, 2)
    assert (opts.backend, opts.backend_from) == ("horovod", "default")
    # a pipeline moves activations itself: the pick's exchange is not its backend
    opts = _train_opts(["--tuning", path, "--parallel", "pipeline"], monkeypatch, 2)
    assert (opts.backend, opts.backend_from) == ("horovod", "default")


def _flat_confirm(ring, mpi, compute=None, flat_compute=None):
    confirm = {"default": {"none": [0.010] * 3}, "pick": {"none": [0.008] * 3},
               "flat": {"default": {"ring": {"none": ring}, "mpi": {"none": mpi}},
                        "pick": {"ring": {"none": ring}, "mpi": {"none": mpi}}}}
    if compute:
        confirm["compute"] = compute
    if flat_compute:
        confirm["flat_compute"] = flat_compute
    return confirm


def test_a_flat_backend_faster_than_horovods_pick_by_the_margin_becomes_the_pick(monkeypatch):
    for k in tune.HOROVOD_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    se = _search()
    five = {"HOROVOD_CYCLE_TIME": "5"}
    pick = tune_file.picks(se, five, (4, 0), _flat_confirm([0.004] * 3, [0.009] * 3))["none"]
    assert pick["backend"] == "ring" and pick["exchange_s"] == 0.004
    assert pick["horovod_pick"] == "ring, cycle 5 ms, fusion 128 MiB"
    assert pick["flat_gain"] == pytest.approx(0.008 / 0.004)
    # the flat backend runs the library's own allreduce, as it was timed
    assert pick["env"]["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "0"
    assert pick["env"]["OMPI_MCA_coll_tuned_allreduce_algorithm"] == "0"
    assert set(pick["env"]) == set(tuning.SETTINGS)
    assert len(pick["flat_candidates"]) == 4
    # within the margin of Horovod's pick: Horovod stays
    pick = tune_file.picks(se, five, (4, 0), _flat_confirm([0.0079] * 3, [0.009] * 3))["none"]
    assert "backend" not in pick and pick["name"] == "ring, cycle 5 ms, fusion 128 MiB"


def test_a_flat_backend_goes_by_the_step_with_its_compute_measured_without_horovod(monkeypatch):
    for k in tune.HOROVOD_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    se = _search()
    five = {"HOROVOD_CYCLE_TIME": "5"}
    # the ring's exchange is slower than Horovod's pick's, but its compute, timed with no
    # Horovod thread beside it (as training runs it), makes its step the faster one
    confirm = _flat_confirm([0.010] * 3, [0.020] * 3, {"default": 0.100, "pick": 0.080},
                            {"default": 0.070, "pick": 0.069})
    pick = tune_file.picks(se, five, (4, 0), confirm)["none"]
    assert pick["backend"] == "ring" and pick["compute_s"] == 0.069
    assert pick["flat_gain"] == pytest.approx((0.008 + 0.080) / (0.010 + 0.069))
    assert pick["name"] == "hpcdl ring, no Horovod (in the pick's launches)"
    # without the compute's gain, the slower exchange keeps Horovod's pick
    same = _flat_confirm([0.010] * 3, [0.020] * 3, {"default": 0.100, "pick": 0.080},
                         {"default": 0.080, "pick": 0.080})
    assert "backend" not in tune_file.picks(se, five, (4, 0), same)["none"]
    facts = {"native": [0.003], "bytes": 4 << 20, "ranks": 2, "nodes": 1, "tensors": 10,
             "memcpy_s": 0.001}
    se.runs[tune._key(se.effective(five))] = [
        {"times": {"4/0": {"none": [0.008]}}, "compute": {"4/0": [0.080]}, **facts}]
    table = tune_file.table(se, {"none": pick}, facts)
    rows = [ln for ln in table if ln.startswith(" none") and "hpcdl " in ln]
    assert len(rows) == 4 and sum(r.startswith(" none *hpcdl ring") for r in rows) == 1
    assert "so the file takes it; hpcdl train runs it where no --backend is given" in table[-1]
