"""hpcdl bench allocation's own arithmetic: the CPU windows, the spread's centring and the files'
merging (the ranks' side runs under mpirun in tests/mpi and under srun on the box)."""
import json

import pytest

from hpcdl.bench import allocation
from hpcdl.errors import UserError


def test_the_busy_window_is_the_main_thread_alone():
    """The work the loop's share is measured beside runs on the main thread only: the other
    threads of a process that starts none take nothing of it (a BLAS product took half, on
    threads of its own, and that read as Horovod's loop)."""
    wall, mine, others = allocation.window(0.5, allocation._busy)
    assert wall >= 0.5 and mine > 0.3 * wall
    assert others <= 0.05 * (mine + others)


def test_each_nodes_median_is_taken_over_the_center_of_all_their_passes():
    devs = allocation._deviations([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [1.0, 3.0, 3.0]])
    assert devs == pytest.approx([0.5, 1.0, 1.5])         # center: the median of all nine, 2.0


def test_a_file_gains_a_node_count_and_refuses_another_machine(tmp_path):
    path = tmp_path / "loop.json"
    doc = allocation.merged(path, allocation.LOOP_SCHEMA, "cpu X", 2)
    doc.setdefault("shares", {}).setdefault("1", {})["2"] = {"m": 1}
    allocation._write(path, doc)
    doc = allocation.merged(path, allocation.LOOP_SCHEMA, "cpu X", 8)
    doc["shares"]["1"]["8"] = {"m": 2}
    assert doc["made_for"]["nodes"] == [2, 8] and set(doc["shares"]["1"]) == {"2", "8"}
    with pytest.raises(UserError, match="measured on 'cpu X'"):
        allocation.merged(path, allocation.LOOP_SCHEMA, "cpu Y", 4)
    path.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(UserError, match="not a hpcdl.loop-cpu/1 file"):
        allocation.merged(path, allocation.LOOP_SCHEMA, "cpu X", 4)


def test_the_window_is_the_share_of_the_pass_the_steps_hid_exchange_behind():
    """(pass + exchange alone - step) / pass of the medians over every round, held in [0, 1];
    none on one rank (no steps timed)."""
    growth = {"live_s": 1.0}
    overlap = [{"step": [1.5, 1.6, 1.4], "exchange": [0.9, 1.0, 1.1]},
               {"step": [1.5, 1.5, 1.7], "exchange": [1.0, 1.0, 0.8]}]
    w = allocation._window(overlap, growth)
    assert w["share"] == pytest.approx(0.5) and w["step_s"] == 1.5 and w["exchange_s"] == 1.0
    assert [r["step_s"] for r in w["rounds"]] == [1.5, 1.5]
    slow = [{"step": [2.5], "exchange": [1.0]}]          # the step paid more than both parts
    assert allocation._window(slow, growth)["share"] == 0.0
    assert allocation._window([{"step": [0.2], "exchange": [1.0]}], growth)["share"] == 1.0
    assert allocation._window([], growth) is None
