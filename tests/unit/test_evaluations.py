"""When training evaluates its held-out metric, and how a target is read and judged."""
from types import SimpleNamespace

import pytest

from hpcdl import cli
from hpcdl.train import control


def _parse(*args):
    return cli.build_parser().parse_args(["train", *args])


def test_targets_parse_as_metric_and_value_and_bad_ones_are_refused(capsys):
    assert _parse("--target", "accuracy:0.91").target == ("accuracy", 0.91)
    assert _parse("--target", "loss:1e-3").target == ("loss", 0.001)
    for bad in ("accuracy", "f1:0.9", "loss:", "loss:abc", "accuracy:nan"):
        with pytest.raises(SystemExit):
            _parse("--target", bad)
        assert "--target" in capsys.readouterr().err


def test_evaluations_fall_every_n_samples_and_at_the_last_step():
    ev = control.Evaluations(SimpleNamespace(eval_every=250, target=None, log_every=100),
                               global_batch=100, steps=12)
    assert [s for s in range(1, 13) if ev.due(s)] == [3, 5, 8, 10, 12]   # 300, 500, 800, 1000 samples
    off = control.Evaluations(SimpleNamespace(eval_every=0, target=None, log_every=100), 100, 12)
    assert not any(off.due(s) for s in range(1, 13))
    # a target without an interval evaluates at the progress lines
    tgt = control.Evaluations(SimpleNamespace(eval_every=0, target=("loss", 0.1), log_every=4),
                                100, 12)
    assert [s for s in range(1, 13) if tgt.due(s)] == [4, 8, 12]


def test_accuracy_is_reached_at_or_above_and_loss_at_or_below():
    assert control.reached(("accuracy", 0.9), {"test_accuracy": 0.9})
    assert not control.reached(("accuracy", 0.9), {"test_accuracy": 0.899})
    assert control.reached(("loss", 0.1), {"test_loss": 0.1})
    assert not control.reached(("loss", 0.1), {"test_loss": 0.1001})
    assert not control.reached(("accuracy", 0.1), {"test_loss": 0.0})    # no such metric
