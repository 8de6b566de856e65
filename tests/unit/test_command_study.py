"""A study of the user's own command: the study file, its points, what its output says, the
record the launcher writes, its job script, and the report (no ranks run here; tests/mpi and
tests/slurm run the example script for real)."""
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from hpcdl import analysis, records, report, study
from hpcdl.launch import command, jobscript, submit

GOLDEN = Path(__file__).parent / "golden"

STUDY = textwrap.dedent("""\
    [study]
    name = "mine"
    scaling = "strong"
    repeats = 2

    [workload]
    command = ["python", "train.py", "--batch-size", "{batch_size}", "--global", "{global_batch}",
               "--out={results}", "--ranks", "{ranks}"]
    global_batch = 128

    [layout]
    ranks = [1, 2, 4]

    [scrape]
    throughput_per_rank = 'img/sec per rank: ([0-9.]+)'
    accuracy = 'accuracy (?P<value>[0-9.]+)'
    """)


def load(tmp_path, text=STUDY, name="mine.toml"):
    path = tmp_path / name
    path.write_text(text)
    return study.load(path, results_root=tmp_path / "results")


def test_a_command_study_expands_to_script_points_with_the_placeholders_filled(tmp_path):
    st = load(tmp_path)
    assert st.workload == "train" and st.command[:2] == ["python", "train.py"]
    pts = st.points()
    assert [p.id for p in pts[:3]] == ["n1-r1-script-none-rep0", "n1-r2-script-none-rep0",
                                       "n1-r4-script-none-rep0"]
    p = pts[2]
    assert p.script_argv("/r/cb.jsonl") == ["python", "train.py", "--batch-size", "32", "--global",
                                            "128", "--out=/r/cb.jsonl", "--ranks", "4"]
    assert st.scrape == {"throughput_per_rank": "img/sec per rank: ([0-9.]+)",
                         "accuracy": "accuracy (?P<value>[0-9.]+)"}


@pytest.mark.parametrize("change,key,why", [
    (("{batch_size}", "{batch}"), "workload.command", "'{batch}' in '{batch}' is not a placeholder"),
    (('global_batch = 128', 'global_batch = 128\nsteps = 10'), "workload.steps",
     "give the script's own options"),
    (('[layout]', '[axes]\nbackend = ["ps"]\n\n[layout]'), "axes.backend", "its exchange"),
    (('[scrape]', '[target]\nmetric = "loss"\nvalue = 0.1\nmax_steps = 10\n\n[scrape]'),
     "[target]", "decides itself when to stop"),
    (("'img/sec per rank: ([0-9.]+)'", "'img/sec per rank'"), "scrape.throughput_per_rank",
     "has no group"),
    (("'img/sec per rank: ([0-9.]+)'", "'img/sec ([0-9.]+'"), "scrape.throughput_per_rank",
     "not a regular expression"),
    (('command = ["python", "train.py", "--batch-size", "{batch_size}", "--global", '
      '"{global_batch}",\n           "--out={results}", "--ranks", "{ranks}"]', 'command = []'),
     "workload.command", "non-empty list"),
])
def test_a_command_study_that_cannot_run_as_written_names_the_key(tmp_path, change, key, why):
    text = STUDY.replace(*change)
    assert text != STUDY
    with pytest.raises(study.StudyError) as exc:
        load(tmp_path, text)
    assert f": {key}: " in str(exc.value) and why in str(exc.value)


def test_scrape_applies_to_commands_only(tmp_path):
    text = textwrap.dedent("""\
        [study]
        name = "own"
        scaling = "weak"
        [workload]
        name = "expmlp"
        batch_size = 10
        [layout]
        ranks = [1]
        [scrape]
        x = 'x ([0-9]+)'
        """)
    with pytest.raises(study.StudyError, match=r"\[scrape\]: reads figures a workload.command"):
        load(tmp_path, text, "own.toml")


def test_scrape_takes_the_last_match_and_says_no_match_instead_of_zero():
    out = "epoch 1\nimg/sec per rank: 10.5\n[1,0]<stdout>: img/sec per rank: 12.0 (final)\n"
    figs = command.scrape(out, {"rate": r"img/sec per rank: ([0-9.]+)", "acc": r"acc ([0-9.]+)",
                                "bad": r"epoch (\w+)x?", "named": r"(epoch) (?P<value>\d)"})
    assert figs["rate"]["value"] == 12.0 and figs["rate"]["matches"] == 2
    assert figs["rate"]["values"] == [10.5, 12.0] and figs["rate"]["line"].endswith("12.0 (final)")
    assert figs["acc"]["value"] is None and figs["acc"]["why"] == "no line of the output matched"
    assert figs["named"]["value"] == 1.0
    assert figs["bad"]["value"] == 1.0        # "1" parses; a group without a number would not
    figs = command.scrape("epoch one\n", {"bad": r"epoch (\w+)"})
    assert figs["bad"]["value"] is None and "without a number" in figs["bad"]["why"]
    assert all(f["scraped"] for f in figs.values())


def _spec(tmp_path, text=STUDY, ranks=2):
    st = load(tmp_path, text)
    point = next(p for p in st.points() if p.ranks == ranks)
    spec = command.spec_for(st, point)
    command.prepare(spec)
    return st, spec


def test_a_callback_free_point_gets_its_scraped_throughput_and_says_what_it_is(tmp_path):
    st, spec = _spec(tmp_path)
    assert spec.env["HPCDL_RESULTS"] == spec.callback and json.loads(spec.env["HPCDL_POINT"])["ranks"] == 2
    Path(spec.log).write_text("hello\nimg/sec per rank: 250.0\n")
    rec = command.finish(spec, 0, 12.5, hosts=["n1", "n2"])
    assert records.read(st.runs_path) == [json.loads(json.dumps(rec))]
    assert rec["status"] == "ok" and rec["source"] == "command"
    assert st.done_ids() == {"n1-r2-script-none-rep0"}
    m = rec["metrics"]
    assert m["throughput"]["mean"] == 500.0 and m["throughput"]["unit"] == "samples/s"
    assert m["throughput"]["source"] == "scraped: throughput_per_rank x ranks"
    assert "step_time" not in m and m["split"]["method"] == "none" and m["wall_time_s"] == 12.5
    assert rec["command"]["scraped"]["accuracy"]["value"] is None
    assert rec["command"]["exit_status"] == 0 and rec["command"]["recorder"] is False
    assert rec["layout"] == {"size": 2, "nodes": 1, "ranks_per_node": 2, "hosts": ["n1", "n2"]}
    assert rec["params"]["command"][:4] == ["python", "train.py", "--batch-size", "64"]


def test_a_throughput_pattern_that_matches_nothing_leaves_the_point_without_throughput(tmp_path):
    st, spec = _spec(tmp_path)
    Path(spec.log).write_text("the script printed something else\n")
    rec = command.finish(spec, 0, 3.0)
    assert "throughput" not in rec["metrics"]
    assert rec["command"]["scraped"]["throughput_per_rank"]["value"] is None
    assert analysis.group_records([rec]) == []            # not a zero in any table


def test_without_patterns_the_throughput_is_runs_per_hour_of_wall_time(tmp_path):
    text = STUDY.split("[scrape]")[0].replace('scaling = "strong"', 'scaling = "weak"').replace(
        "global_batch = 128", "batch_size = 32")
    _, spec = _spec(tmp_path, text, ranks=4)
    rec = command.finish(spec, 0, 36.0)
    assert rec["metrics"]["throughput"]["mean"] == pytest.approx(4 * 100.0)   # weak: 4 ranks' work
    assert rec["metrics"]["throughput"]["unit"] == command.WALL_UNIT


def test_a_failed_command_is_recorded_as_failed_and_does_not_count_as_done(tmp_path):
    st, spec = _spec(tmp_path)
    Path(spec.log).write_text("Traceback ...\nRuntimeError: boom\n")
    rec = command.finish(spec, 1, 2.0)
    assert rec["status"] == "failed" and rec["command"]["exit_status"] == 1
    rec = command.finish(spec, -9, 30.0, timed_out=True)
    assert rec["status"] == "timeout"
    assert st.done_ids() == set() and len(st.pending()) == len(st.points())


def test_the_callbacks_record_becomes_the_points_record_with_the_commands_facts(tmp_path):
    st, spec = _spec(tmp_path)
    cb = {"schema": records.SCHEMA, "kind": "train", "status": "ok", "source": "keras-callback",
          "study": None, "point": None, "params": {"workload": "keras:net", "batch_size": 64,
                                                    "backend": "horovod"},
          "layout": {"size": 2, "nodes": 1}, "metrics": {"throughput": {"mean": 900.0, "n": 3}}}
    records.append(spec.callback, cb)
    Path(spec.log).write_text("img/sec per rank: 450\n")
    rec = command.finish(spec, 0, 9.0)
    assert rec["source"] == "keras-callback" and rec["metrics"]["throughput"]["mean"] == 900.0
    assert rec["params"]["workload"] == "train" and rec["params"]["backend"] == "horovod"
    assert rec["point"]["id"] == "n1-r2-script-none-rep0" and rec["study"] == "mine"
    assert rec["command"]["recorder"] is True
    assert rec["command"]["scraped"]["throughput_per_rank"]["value"] == 450.0
    assert len(records.read(st.runs_path)) == 1          # one record per point, not two
    command.prepare(spec)                                 # a new attempt starts clean
    assert not Path(spec.callback).exists() and not Path(spec.log).exists()


def test_the_report_of_a_callback_free_study_says_what_it_cannot_give(tmp_path):
    st = load(tmp_path)
    for point, rate in zip(st.points()[:3], ("100", "180", None)):
        spec = command.spec_for(st, point)
        command.prepare(spec)
        Path(spec.log).write_text(f"img/sec per rank: {rate}\n" if rate else "crashed\n")
        command.finish(spec, 0 if rate else 1, 5.0)
    out = report.write_report(st.results_dir, plots=False)
    text = out["report"].read_text()
    assert "## Your command" in text and "no step time, no compute/exchange split" in text
    assert "| n1-r4-script-none-rep0 | 4 | failed | 1 |" in text
    assert "NO MATCH" in text                         # accuracy was never printed
    assert "## Communication model" in text and "None: no record times a step" in text
    res = json.loads(out["json"].read_text())
    assert [(r["ranks"], r["throughput"]) for r in res["rows"]] == [(1, 100.0), (2, 360.0)]
    assert res["rows"][1]["speedup"] == pytest.approx(3.6) and "no record times a step" in res["why_no_model"]


def test_the_command_job_script_matches_golden_requeues_and_records_whatever_the_exit(tmp_path):
    st = study.from_dict(study._toml.loads(STUDY.replace("ranks = [1, 2, 4]",
                                                         "nodes = [2]\nranks_per_node = 2")),
                         "/opt/hpcdl/jobs/mine.toml", results_root="/opt/hpcdl/results")
    software = jobscript.Software(workdir="/opt/hpcdl", activate="source /opt/hpcdl/.venv/bin/activate")
    plan = submit.plan_study(st, software)
    step = plan.steps[0]
    assert step.spec.argv[3] == "32" and step.spec.launcher == "srun"
    path = GOLDEN / "study-command-2node.sbatch"
    import os
    if os.environ.get("HPCDL_UPDATE_GOLDEN") == "1":
        path.write_text(step.text)
    assert step.text == path.read_text(), "differs from its golden file (HPCDL_UPDATE_GOLDEN=1)"
    script = tmp_path / "job.sh"
    script.write_text(step.text)
    assert subprocess.run(["bash", "-n", str(script)], timeout=10).returncode == 0
    assert "#SBATCH --requeue" in step.text and "--signal" not in step.text
    # each rank takes its threads by hpcdl train's rule, not a rule of the script's own
    assert "COMMAND=(python -m hpcdl.launch.with_threads python train.py" in step.text
    assert "export HPCDL_RESULTS=/opt/hpcdl/results/mine/points/n2-r2-script-none-rep0.jsonl" in step.text
    assert ('-m hpcdl.launch.command "$SPEC" --exit-status "$rc"' in step.text
            and step.text.rstrip().endswith('exit "$rc"'))


def test_a_study_asks_for_horovods_timeline_per_point_but_not_for_a_command(tmp_path):
    own = textwrap.dedent("""\
        [study]
        name = "tl"
        scaling = "weak"
        [workload]
        name = "expmlp"
        batch_size = 10
        [layout]
        ranks = [2]
        [run]
        timeline = true
        """)
    st = load(tmp_path, own, "tl.toml")
    (p,) = st.points()
    args = p.train_args(str(tmp_path / "results" / "tl" / "runs.jsonl"))
    i = args.index("--timeline")
    assert args[i + 1] == str(tmp_path / "results" / "tl" / "timelines" / f"{p.id}.json")
    with pytest.raises(study.StudyError, match="run.timeline: must be true or false"):
        load(tmp_path, own.replace("timeline = true", 'timeline = "yes"'), "tl.toml")
    with pytest.raises(study.StudyError, match="run.timeline: records hpcdl train's"):
        load(tmp_path, STUDY + "\n[run]\ntimeline = true\n")
