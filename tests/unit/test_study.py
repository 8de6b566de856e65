"""Study files: loading, expansion into points, precise validation errors, and resuming."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdl import records, study
from hpcdl.errors import UserError

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
[study]
name = "demo"
scaling = "strong"
repeats = 2

[workload]
name = "expmlp"
global_batch = 400
steps = 50

[layout]
ranks = [1, 2, 4]

[axes]
backend = ["horovod"]
compression = ["none", "fp16"]

[run]
timeout = 120
threads_per_rank = 1

[slurm]
partition = "debug"
time = "00:10:00"
"""


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_strong_study_expands_to_points_with_fixed_global_batch(tmp_path):
    st = study.load(write(tmp_path, GOOD), results_root=tmp_path / "results")
    assert (st.name, st.scaling, st.workload, st.repeats) == ("demo", "strong", "expmlp", 2)
    assert st.results_dir == tmp_path / "results" / "demo"
    pts = st.points()
    assert len(pts) == 2 * 2 * 3
    assert len({p.id for p in pts}) == len(pts)
    assert pts[0].id == "n1-r1-horovod-none-rep0"
    assert all(p.global_batch == 400 and p.batch_size == 400 // p.ranks for p in pts)
    assert st.env["HPCDL_THREADS"] == "1"
    assert st.slurm["partition"] == "debug" and st.slurm["ntasks_per_node"] == 4


def test_train_args_carry_the_study_point_and_results(tmp_path):
    st = study.load(write(tmp_path, GOOD))
    p = [p for p in st.points() if p.ranks == 4 and p.compression == "fp16"][0]
    args = p.train_args("out/runs.jsonl")
    assert args[args.index("--batch-size") + 1] == "100"
    assert args[args.index("--compression") + 1] == "fp16"
    assert args[args.index("--steps") + 1] == "50"
    assert args[args.index("--study") + 1] == "demo"
    assert args[args.index("--results") + 1] == "out/runs.jsonl"
    point = json.loads(args[args.index("--point") + 1])
    assert point["id"] == p.id and point["ranks"] == 4 and point["global_batch"] == 400
    assert p.command("x")[0] == "train"


def test_weak_study_keeps_the_per_rank_batch(tmp_path):
    text = GOOD.replace('scaling = "strong"', 'scaling = "weak"').replace(
        "global_batch = 400", "batch_size = 32")
    st = study.load(write(tmp_path, text))
    assert {(p.ranks, p.batch_size, p.global_batch) for p in st.points()} == {
        (1, 32, 32), (2, 32, 64), (4, 32, 128)}


def test_cluster_layout_gives_nodes_times_ranks_per_node(tmp_path):
    text = GOOD.replace("ranks = [1, 2, 4]", "nodes = [1, 2, 4]\nranks_per_node = 4").replace(
        "global_batch = 400", "global_batch = 1600")
    st = study.load(write(tmp_path, text))
    assert not st.is_local
    assert sorted({(p.nodes, p.ranks) for p in st.points()}) == [(1, 4), (2, 8), (4, 16)]
    assert st.points()[-1].id.startswith("n4-r4-")


@pytest.mark.parametrize("change, key, allowed", [
    (('scaling = "strong"', 'scaling = "linear"'), "study.scaling", "strong, weak"),
    (("steps = 50", "steps = 50\nbatchsize = 3"), "workload.batchsize", "allowed keys"),
    (("ranks = [1, 2, 4]", "ranks = [1, 3]"), "layout.ranks", "divide 400"),
    (('compression = ["none", "fp16"]', 'compression = ["zip"]'), "axes.compression", "fp16"),
    (('backend = ["horovod"]', 'backend = ["nccl2"]'), "axes.backend", "horovod"),
    (("global_batch = 400", "batch_size = 400"), "workload.batch_size", "global_batch"),
    (("repeats = 2", "repeats = 0"), "study.repeats", ">= 1"),
    (("repeats = 2", 'repeats = "two"'), "study.repeats", "an integer"),
    (('time = "00:10:00"', 'time = "ten minutes"'), "slurm.time", "not a Slurm time (e.g. 30, 02:00:00"),
    (('partition = "debug"', 'partiton = "debug"'), "slurm.partiton", "partition"),
    (("ranks = [1, 2, 4]", "ranks = []"), "layout.ranks", "non-empty"),
    (('name = "expmlp"', 'name = "resnet"'), "workload.name", "expmlp"),
    (("[run]", "[runs]"), "runs", "allowed sections"),
])
def test_validation_error_names_the_file_the_key_and_what_is_allowed(tmp_path, change, key, allowed):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(study.StudyError) as exc:
        study.load(path)
    msg = str(exc.value)
    assert str(path) in msg and key in msg and allowed in msg, msg
    assert isinstance(exc.value, UserError)


def test_missing_and_malformed_files_are_user_errors(tmp_path):
    with pytest.raises(study.StudyError, match="no such study file"):
        study.load(tmp_path / "nope.toml")
    with pytest.raises(study.StudyError, match="not valid TOML"):
        study.load(write(tmp_path, "[study\nname="))
    with pytest.raises(study.StudyError, match=r"\[workload\]: missing section"):
        study.load(write(tmp_path, '[study]\nscaling = "weak"\n'))


def test_resume_skips_points_already_recorded(tmp_path):
    st = study.load(write(tmp_path, GOOD), results_root=tmp_path)
    pts = st.points()
    for p in pts[:5]:
        records.append(st.runs_path, {"study": "demo", "point": p.as_dict(), "status": "ok"})
    # Records of another study, or without a point id, never count as done.
    records.append(st.runs_path, {"study": "other", "point": pts[5].as_dict()})
    records.append(st.runs_path, {"study": "demo", "point": "free text"})
    with open(st.runs_path, "a") as fh:
        fh.write('{"study": "demo", "point": {"id": "' + pts[6].id)   # a torn last line
    with pytest.warns(records.TornRecordWarning):
        pending = st.pending()
    assert [p.id for p in pending] == [p.id for p in pts[5:]]


def test_validate_command_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, GOOD.replace("ranks = [1, 2, 4]", "ranks = [1, 3]"))
    res = subprocess.run([sys.executable, "-m", "hpcdl", "study", "validate", str(path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "layout.ranks" in res.stderr


def test_default_studies_in_jobs_are_valid():
    files = sorted((ROOT / "jobs").glob("*.toml"))
    assert len(files) >= 4
    kinds = set()
    for f in files:
        st = study.load(f)
        kinds.add((st.workload, st.scaling, st.is_local))
        if not st.is_local and st.networks == [""]:       # the box's studies stop at 8 nodes
            assert max(p.nodes for p in st.points()) == 64 and min(p.nodes for p in st.points()) == 1
    assert {("cnn", "weak", True), ("expmlp", "strong", True),
            ("cnn", "weak", False), ("expmlp", "strong", False)} <= kinds


def test_a_time_in_minutes_is_one_rule_for_the_validator_and_the_job_script(tmp_path):
    """'120' is 120 minutes to Slurm: the study accepts it and the script asks for 02:00:00."""
    from hpcdl.launch import jobscript, submit
    path = tmp_path / "s.toml"
    path.write_text('[study]\nscaling = "weak"\n[workload]\nname = "expmlp"\nbatch_size = 10\n'
                    '[layout]\nnodes = [1]\n[slurm]\ntime = "120"\n')
    st = study.load(path, results_root=tmp_path)
    plan = submit.plan_study(st, jobscript.Software(workdir="/w", activate="true"))
    assert "#SBATCH --time=02:00:00" in plan.steps[0].text


def test_only_a_run_that_ended_well_counts_as_recorded(tmp_path):
    from hpcdl.launch import status
    st = study.from_dict({"study": {"name": "s", "scaling": "weak"},
                              "workload": {"name": "expmlp", "batch_size": 10},
                              "layout": {"ranks": [1, 2]}}, tmp_path / "s.toml", results_root=tmp_path)
    ids = [p.id for p in st.points()]
    records.append(st.runs_path, {"study": "s", "point": {"id": ids[0]}, "status": "ok"})
    records.append(st.runs_path, {"study": "s", "point": {"id": ids[1]}, "status": "failed"})
    assert st.done_ids() == {ids[0]}
    rows = status.study_status(st.results_dir, ids, "s")
    assert [r["recorded"] for r in rows] == [True, False]


def _box_study(tmp_path, axes, model=""):
    f = tmp_path / "b.toml"
    f.write_text(f"""
[study]
name = "b"
scaling = "weak"
[workload]
name = "expmlp"
batch_size = 100
[layout]
nodes = [1, 2, 4]
ranks_per_node = 1
[axes]
{axes}
{model}
""")
    return f


def test_an_exchange_axis_runs_the_pairs_it_lists_on_each_network(tmp_path):
    st = study.load(_box_study(tmp_path, 'exchange = ["horovod", "ps", "horovod+fp16"]\n'
                                         'network = ["200mbit", "1gbit"]'))
    pts = st.points()
    assert len(pts) == 3 * 2 * 3
    assert {(p.backend, p.compression) for p in pts} == {("horovod", "none"), ("ps", "none"),
                                                         ("horovod", "fp16")}
    ids = {p.id for p in pts}
    assert "n4-r1-ps-none-1gbit-rep0" in ids and "n1-r1-horovod-fp16-200mbit-rep0" in ids
    assert pts[0].as_dict()["network"] == "200mbit"


def test_bad_box_axes_and_calibration_are_named(tmp_path):
    for axes, model, msg in [
            ('exchange = ["horovod"]\nbackend = ["ps"]', "", "replaces axes.backend"),
            ('exchange = ["horovod+zip"]', "", "not allowed"),
            ('network = ["fast"]', "", "not a link rate"),
            ('backend = ["ps"]', "[model]\ncalibrate = { nodes = 2 }", "model.calibrate"),
    ]:
        with pytest.raises(study.StudyError, match=msg):
            study.load(_box_study(tmp_path, axes, model))
    st = study.load(_box_study(tmp_path, 'backend = ["ps"]', "[model]\ncalibrate = { nodes_max = 2 }"))
    assert st.calibrate_nodes_max == 2 and st.declared["model"] == {"nodes_max": 2}
    # a bench fit beside the subset: the exchange from the fit, the rest from the runs
    fit = tmp_path / "f.json"
    fit.write_text('{"schema": "hpcdl.fit/1", "backends": {}}')
    st = study.load(_box_study(tmp_path, 'backend = ["ps"]', f'[model]\nfit = "{fit}"\n'
                                                            "calibrate = { nodes_max = 2 }"))
    assert st.declared["model"] == {"nodes_max": 2, "fit": str(fit)}
    # the held-out points' exchange from 'hpcdl tune' at each node count: one file per count
    tuned = 'calibrate = { nodes_max = 2, exchange = "results/tuning/box-{nodes}n-{network}.json" }'
    st = study.load(_box_study(tmp_path, 'backend = ["ps"]', f"[model]\n{tuned}"))
    assert st.declared["model"] == {
        "nodes_max": 2, "exchange": "results/tuning/box-{nodes}n-{network}.json"}
    # and their compute after a loop file's shares
    looped = tuned[:-2] + ', loop = "results/tuning/box-loop-cpu.json" }'
    st = study.load(_box_study(tmp_path, 'backend = ["ps"]', f"[model]\n{looped}"))
    assert st.declared["model"] == {
        "nodes_max": 2, "exchange": "results/tuning/box-{nodes}n-{network}.json",
        "loop": "results/tuning/box-loop-cpu.json"}
    # and their slowest rank drawn from a spread file
    spread = looped[:-2] + ', spread = "results/tuning/box-spread.json" }'
    st = study.load(_box_study(tmp_path, 'backend = ["ps"]', f"[model]\n{spread}"))
    assert st.calibrate_spread == "results/tuning/box-spread.json"
    assert st.declared["model"]["loop"] == "results/tuning/box-loop-cpu.json"
    assert st.declared["model"]["spread"] == "results/tuning/box-spread.json"
    for path, msg in [("t-{size}.json", "{size} is not a placeholder"),
                      ("t.json", "needs {nodes} or {ranks}")]:
        with pytest.raises(study.StudyError, match=f"model.calibrate.exchange: {msg}"):
            study.load(_box_study(tmp_path, 'backend = ["ps"]', "[model]\ncalibrate = { "
                                  f'nodes_max = 2, exchange = "{path}" }}'))
    # the fit is checked when the study is loaded, not when the report needs it
    for text, msg in [(None, "no such file"), ("root:x:0:0", "not JSON"),
                      ('{"schema": "other"}', "expected 'hpcdl.fit/1'")]:
        bad = tmp_path / "bad.json"
        bad.unlink(missing_ok=True)
        if text is not None:
            bad.write_text(text)
        with pytest.raises(study.StudyError, match=f"model.fit: .*{msg}"):
            study.load(_box_study(tmp_path, 'backend = ["ps"]', f'[model]\nfit = "{bad}"'))


TARGET = GOOD.replace("steps = 50\n", "seed = 7\n") + """
[target]
metric = "accuracy"
value = 0.91
max_steps = 1000
eval_every = 2000
"""


def test_a_target_trains_each_repeat_with_its_own_seed_up_to_max_steps(tmp_path):
    st = study.load(write(tmp_path, TARGET.replace('"expmlp"', '"mnist"')),
                    results_root=tmp_path / "r")
    assert st.target == "accuracy:0.91" and st.declared["target"] == "accuracy:0.91"
    seeds = {}
    for p in st.points():
        args = p.train_args("runs.jsonl")
        flags = dict(zip(args[::2], args[1::2]))
        assert (flags["--target"], flags["--steps"], flags["--eval-every"]) == \
            ("accuracy:0.91", "1000", "2000")
        seeds.setdefault(p.repeat, set()).add(flags["--seed"])
    assert seeds == {0: {"7"}, 1: {"8"}}      # a seed per repeat, the same for every layout


@pytest.mark.parametrize("change, key", [
    (("metric = \"accuracy\"", "metric = \"f1\""), "target.metric"),
    (("max_steps = 1000\n", ""), "target.max_steps"),
    (("value = 0.91", "value = \"high\""), "target.value"),
    (("seed = 7\n", "seed = 7\nsteps = 10\n"), "workload.steps"),
    (("eval_every = 2000", "every = 2000"), "target"),
])
def test_a_bad_target_section_is_refused_naming_its_key(tmp_path, change, key):
    with pytest.raises(study.StudyError) as err:
        study.load(write(tmp_path, TARGET.replace(*change)), results_root=tmp_path / "r")
    assert key in str(err.value), err.value


def test_the_learning_rate_rule_can_be_an_axis(tmp_path):
    text = TARGET.replace('"strong"', '"weak"').replace("global_batch = 400", "batch_size = 100")
    text = text.replace('compression = ["none", "fp16"]',
                        'compression = ["none"]\nlr_scaling = ["linear", "none"]')
    st = study.load(write(tmp_path, text), results_root=tmp_path / "r")
    pts = [p for p in st.points() if p.repeat == 0]
    assert [p.id for p in pts if p.ranks == 4] == ["n1-r4-horovod-none-lrlinear-rep0",
                                                   "n1-r4-horovod-none-lrnone-rep0"]
    for p in pts:
        args = p.train_args("runs.jsonl")
        assert args[args.index("--lr-scaling") + 1] == p.lr_rule
        assert json.loads(args[args.index("--point") + 1])["lr_scaling"] == p.lr_rule
    with pytest.raises(study.StudyError, match="axes.lr_scaling"):
        study.load(write(tmp_path, text.replace("seed = 7\n", 'seed = 7\nlr_scaling = "none"\n')),
                   results_root=tmp_path / "r")


VARIANTS = GOOD.replace('''[axes]
backend = ["horovod"]
compression = ["none", "fp16"]
''', '''[variants]
ring = "--backend horovod"
ssp2 = "--backend ps-async --staleness 2 --slow-rank 1:3ms"
pipe = "--parallel pipeline --micro-batches 4 --cut layers"
ring-fp16 = "--compression fp16"
''')


def test_variants_are_named_configurations_each_point_trains_with(tmp_path):
    st = study.load(write(tmp_path, VARIANTS))
    pts = st.points()
    assert len(pts) == 4 * 3 * 2 and len({p.id for p in pts}) == len(pts)
    assert st.backends == ["horovod", "ps-async"] and st.compressions == ["none", "fp16"]
    p = next(p for p in pts if p.variant == "ssp2" and p.ranks == 2 and p.repeat == 0)
    assert p.id == "n1-r2-ps-async-none-vssp2-rep0"
    args = p.train_args("out/runs.jsonl")
    assert args[args.index("--backend") + 1] == "ps-async"
    assert args[args.index("--staleness") + 1] == "2"
    assert args[args.index("--slow-rank") + 1] == "1:3ms"
    assert json.loads(args[args.index("--point") + 1])["variant"] == "ssp2"
    f = next(p for p in pts if p.variant == "ring-fp16")
    assert (f.backend, f.compression) == ("horovod", "fp16")
    pipe = next(p for p in pts if p.variant == "pipe").train_args("x")
    assert pipe[pipe.index("--parallel") + 1] == "pipeline" and "--cut" in pipe


@pytest.mark.parametrize("text,msg", [
    ('bad = "--steps 10"', "'--steps' is not an option a variant may set"),
    ('bad = "--backend nccl"', "--backend nccl: choose one of horovod, mpi, ring, ps, ps-async"),
    ('bad = "--micro-batches x"', "--micro-batches needs a positive integer"),
    ('bad = "--staleness"', "--staleness needs a value"),
    ('"a b" = "--backend ps"', "a variant's name must be letters"),
])
def test_a_bad_variant_is_refused_naming_it(tmp_path, text, msg):
    bad = GOOD.replace('''[axes]
backend = ["horovod"]
compression = ["none", "fp16"]
''', f"[variants]\n{text}\n")
    with pytest.raises(study.StudyError, match=msg.replace("(", r"\(")):
        study.load(write(tmp_path, bad))


def test_variants_and_a_backend_axis_do_not_mix(tmp_path):
    both = GOOD + '\n[variants]\nring = "--backend horovod"\n'
    with pytest.raises(study.StudyError, match="axes.backend: and \\[variants\\] both say"):
        study.load(write(tmp_path, both))


def _tuning_study(tmp_path, axes='tuning = ["default", "tuned"]', run='tuning = "t/box-{nodes}n.json"',
                  exchange='["horovod", "horovod+fp16"]'):
    return study.from_dict(__import__("tomllib").loads(f"""
[study]
name = "t"
scaling = "weak"
[workload]
name = "expmlp"
batch_size = 10
[layout]
nodes = [1, 2]
ranks_per_node = 1
[axes]
exchange = {exchange}
{axes}
[run]
{run}
"""), tmp_path / "t.toml", results_root=tmp_path)


def test_a_tuning_axis_runs_each_point_with_defaults_and_with_its_allocations_tuning_file(
        tmp_path, monkeypatch):
    st = _tuning_study(tmp_path)
    pts = st.points()
    assert len(pts) == 2 * 2 * 2
    tuned = [p for p in pts if p.tuning == "tuned"]
    assert {p.id for p in tuned} >= {"n2-r1-horovod-fp16-ttuned-rep0"}
    p2 = next(p for p in tuned if p.nodes == 2)
    args = p2.train_args("r.jsonl")
    assert args[args.index("--tuning") + 1] == "t/box-2n.json"
    assert json.loads(args[args.index("--point") + 1])["tuning"] == "tuned"
    d = next(p for p in pts if p.tuning == "default" and p.nodes == 2)
    assert d.train_args("r.jsonl")[d.train_args("r.jsonl").index("--tuning") + 1] == "default"
    assert d.id == "n2-r1-horovod-none-tdefault-rep0"
    # the files tuned points need are named before anything runs, with how to make them
    monkeypatch.chdir(tmp_path)
    missing = st.missing_tuning(pts)
    # one rank has nothing to exchange: its tuned point runs with the defaults, and needs no file
    assert len(missing) == 1 and missing[0].startswith("t/box-2n.json (missing; make it on 2 node(s)")
    assert "--compression fp16,none" in missing[0]
    p1 = next(p for p in tuned if p.nodes == 1)
    assert p1.train_args("r")[p1.train_args("r").index("--tuning") + 1] == "default"
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "box-2n.json").write_text(json.dumps({"picks": {"none": {}}}))
    assert st.missing_tuning(pts)[0].startswith("t/box-2n.json (no pick for fp16; make it")
    (tmp_path / "t" / "box-2n.json").write_text(json.dumps({"picks": {"none": {}, "fp16": {}}}))
    assert st.missing_tuning(pts) == []


def test_run_tuning_alone_tunes_every_point_and_adds_nothing_to_the_ids(tmp_path):
    st = _tuning_study(tmp_path, axes="")
    pts = st.points()
    assert len(pts) == 4 and all("-t" not in p.id for p in pts)
    assert all(p.train_args("r")[p.train_args("r").index("--tuning") + 1].startswith("t/box-")
               for p in pts if p.ranks > 1)
    plain = _tuning_study(tmp_path, axes="", run="")
    assert all("--tuning" not in p.train_args("r") for p in plain.points())


@pytest.mark.parametrize("axes, run, words", [
    ('tuning = ["tuned"]', "", "'tuned' needs run.tuning"),
    ('tuning = ["fast"]', 'tuning = "x.json"', "axes.tuning"),
    ("", 'tuning = "t/{gpus}.json"', "{gpus} is not a placeholder"),
])
def test_a_bad_tuning_axis_is_refused_with_what_to_fix(tmp_path, axes, run, words):
    with pytest.raises(study.StudyError, match=words):
        _tuning_study(tmp_path, axes=axes, run=run)


def test_an_int8_exchange_is_refused_with_a_tuning_file_since_tune_has_no_pick_for_it(tmp_path):
    with pytest.raises(study.StudyError, match="hpcdl tune tunes the none and fp16 exchanges"):
        _tuning_study(tmp_path, axes="", exchange='["horovod", "horovod+int8"]')
