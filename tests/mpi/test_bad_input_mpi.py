"""A user error in a multi-rank job is reported once, by rank 0, and ends the job with status 2."""
import re

from hpcdl_testing import mpirun

def _our_lines(stderr):
    return re.findall(r"\[\d+@\S+\] hpcdl train: error: [^\n]*", stderr)

def test_a_batch_the_dataset_cannot_fill_on_2_ranks_is_one_line_and_exit_2():
    # Every rank finds the problem after Horovod and MPI are up; rank 0 reports it and aborts.
    res = mpirun(2, ["train", "--workload", "mnist", "--data", "sklearn-digits", "--batch-size", "1000",
                     "--results", "-"], timeout=180)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    lines = _our_lines(res.stderr)
    assert len(lines) == 1, res.stderr[-3000:]
    assert lines[0].startswith("[0@") and ("1437 samples cannot fill one global batch of 2000 "
                                           "(2 rank(s) x 1000); use fewer ranks") in lines[0]

def test_a_bad_flag_on_2_ranks_is_one_line_and_exit_2():
    # Before MPI starts: each rank would say it; ranks other than 0 hold back while rank 0 ends the job.
    res = mpirun(2, ["train", "--backend", "pigeon"], timeout=120)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    lines = _our_lines(res.stderr)
    assert len(lines) == 1 and lines[0].startswith("[0@") and "unknown --backend 'pigeon'" in lines[0], \
        res.stderr[-3000:]
