"""Grid Engine's answers read in Slurm's terms (hpcdl.launch.gridengine): qstat's rows, the
accounting file's lines (tests/box runs the real thing)."""
from hpcdl.launch import gridengine

# two lines of a 2-node job as sge_qmaster 8.1.9 wrote them: the job script's on n1 and the task
# that mpirun started on n2 through qrsh -inherit (pe_taskid 1.n2); then a job's two attempts
ACCOUNTING = """\
# Version: 8.1.9
box.q:n2:root:root:sge2.sh:1:sge:0:1795690747:1795690747:1795690748:0:0:1:0.09:0.15:27248.0:0:0:0:0:7922:7:0:272.0:16592:0:0:0:1102:157:NONE:defaultdepartment:mpi:2:0:0.25:0.00004:0.00034:-l box=1 -pe mpi 2:0.0:1.n2:8826880.0:0:0
box.q:n1:root:root:sge2.sh:1:sge:0:1795690747:1795690747:1795690748:0:0:1:0.12:0.11:27212.0:0:0:0:0:7876:9:0:40.0:16616:0:0:0:1091:161:NONE:defaultdepartment:mpi:2:0:0.23:0.0:0.00034:-l box=1 -pe mpi 2:0.0:NONE:8826880.0:0:0
box.q:n2:root:root:sge3.sh:3:sge:0:1795690870:1795690874:1795690878:25:99:4:0.0:0.0:0.0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:NONE:defaultdepartment:NONE:1:0:0.0:0.0:0.0:-l box=1:0.0:NONE:0.0:0:0
box.q:n2:root:root:sge3.sh:3:sge:0:1795690870:1795690880:1795690882:0:0:2:0.0:0.0:0.0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:NONE:defaultdepartment:NONE:1:0:0.0:0.0:0.0:-l box=1:0.0:NONE:0.0:0:0
"""

QSTAT = """\
job-ID  prior   name       user         state submit/start at     queue                          slots ja-task-ID
-----------------------------------------------------------------------------------------------------------------
      7 0.50000 train.qsub root         r     11/26/2026 10:42:56 box.q@n1                           2
      8 0.50000 report.qs  root         hqw   11/26/2026 10:42:57                                    1
      9 0.50000 train.qsub root         Rr    11/26/2026 10:43:10 box.q@n3                           2
     11 0.50000 train.qsub root         Rq    11/26/2026 10:43:12                                    2
     10 0.50000 train.qsub root         Eqw   11/26/2026 10:43:11                                    2
"""


def test_the_accounting_file_gives_each_jobs_attempts_without_its_tasks_on_other_nodes():
    ended = gridengine.parse_accounting(ACCOUNTING)
    assert [a["hostname"] for a in ended["1"]] == ["n1"]           # n2's task left out
    one = gridengine._ended("1", ended["1"])
    assert (one.state, one.exit_code, one.attempts, one.nodelist) == ("COMPLETED", "0:0", 1, "n1")
    # exit 99 queued it again (failed 25: rescheduling); the second attempt completed
    three = gridengine._ended("3", ended["3"])
    assert three.history == ["REQUEUED 99:0", "COMPLETED 0:0"] and three.attempts == 2


def test_qstat_rows_read_as_slurms_states():
    rows = gridengine.parse_qstat(QSTAT)
    assert rows == {"7": ("r", "box.q@n1"), "8": ("hqw", None), "9": ("Rr", "box.q@n3"),
                    "10": ("Eqw", None), "11": ("Rq", None)}
    assert [gridengine._qstat_state(rows[j][0]) for j in ("7", "8", "9", "10", "11")] == \
        ["RUNNING", "PENDING", "RUNNING", "PENDING", "REQUEUED"]


def test_a_failed_attempt_is_failed_and_qacct_blocks_are_read_too():
    text = ("==============================================================\n"
            "qname        box.q\nhostname     n1\njobnumber    5\nfailed       100 : assumedly after job\n"
            "exit_status  137\n")
    st = gridengine._ended("5", gridengine.parse_qacct(text)["5"])
    assert (st.state, st.exit_code) == ("FAILED", "137:0")


def test_a_box_study_needs_the_boxs_grid_engine_and_this_shell_pointed_at_its_cell(monkeypatch):
    import pytest
    from hpcdl.errors import UserError
    from hpcdl.launch import batch
    from hpcdl.machine import Target
    box = Target("box", {"sge": {"root": "/var/lib/gridengine", "cell": "hpcdl-box",
                                 "queue": "box.q", "pe": "mpi", "consumable": "box"}})
    monkeypatch.delenv("SGE_CELL", raising=False)
    monkeypatch.setenv("SGE_ROOT", "/var/lib/gridengine")
    with pytest.raises(UserError, match="export its settings first"):
        batch.gridengine_request("s", {}, box)
    monkeypatch.setenv("SGE_CELL", "hpcdl-box")
    assert batch.gridengine_request("s", {}, box) == {"pe": "mpi", "resources": ["box=1"],
                                                      "queue": "box.q", "group": None}
    # the study's own parallel environment and queue win; a box without Grid Engine is refused
    assert batch.gridengine_request("s", {"pe": "mpi-fill", "partition": "q"}, box)["pe"] == "mpi-fill"
    with pytest.raises(UserError, match="without Grid Engine"):
        batch.gridengine_request("s", {}, Target("box", {"sge": None}))
    # a cluster gives no settings of its own: the study's are the request
    assert batch.gridengine_request("s", {"pe": "smp", "partition": "all.q"}, Target()) == {
        "pe": "smp", "resources": [], "queue": "all.q", "group": None}
    assert batch.choose("gridengine") == "gridengine"
    with pytest.raises(UserError, match="choose slurm, gridengine or auto"):
        batch.choose("pbs")
