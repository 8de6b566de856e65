"""The test run's closing sacct table says which failed jobs a test failed on purpose."""
from hpcdl_testing import annotate_sacct

SACCT = ("7|hpcdl-fault-kill|2|n[1-2]|FAILED|1:0|t0|t1\n"
         "8|hpcdl-train|2|n[1-2]|COMPLETED|0:0|t0|t1\n"
         "9|hpcdl-study|1|n3|NODE_FAIL|0:0|t0|t1\n"
         "9|hpcdl-study|1|n3|CANCELLED by 0|0:0|t1|t2\n"
         "10|hpcdl-other|1|n4|TIMEOUT|0:0|t0|t1\n")


def test_deliberate_failures_are_marked_and_others_called_out():
    lines = annotate_sacct(SACCT, {"7": "a rank dies on purpose", "9": "its node killed"})
    assert lines[0].endswith("<- deliberate: a rank dies on purpose")
    assert "<-" not in lines[1]                                   # completed, nothing to say
    assert lines[2].endswith("<- deliberate: its node killed")
    assert lines[3].endswith("<- deliberate: its node killed")
    assert lines[4].endswith("<- NOT deliberate")
    assert lines[-1] == ("3 job record(s) failed, were cancelled or requeued on purpose; 1 did "
                         "so NOT on purpose: 10")


def test_a_clean_run_says_none_other_failed():
    assert annotate_sacct("8|x|1|n1|COMPLETED|0:0|a|b\n", {})[-1].endswith("none other did")
