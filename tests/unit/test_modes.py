"""The ways of training behind one interface: which the options choose, what each refuses."""
from types import SimpleNamespace

import pytest

from hpcdl.errors import UserError
from hpcdl.train import modes
from hpcdl.train.interface import Found


def _opts(**kw):
    base = dict(backend="horovod", compression="none", parallel="data", staleness=None,
                ps_dedicated=False, stages=None, timeline=None, slow_rank=None,
                batch_size=None, micro_batches=None, cut=None)
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("kw, name", [
    ({}, "sync"), ({"backend": "ring", "compression": "fp16"}, "sync"),
    ({"backend": "ps-async", "staleness": 2}, "ps-async"), ({"parallel": "pipeline"}, "pipeline"),
])
def test_the_options_choose_one_mode(kw, name):
    assert modes.select(_opts(**kw)).name == name


@pytest.mark.parametrize("kw, words", [
    ({"backend": "nccl2"}, "unknown --backend 'nccl2'"),
    ({"staleness": 2}, "--staleness and --ps-dedicated are options of --backend ps-async"),
    ({"stages": 2}, "--stages is an option of --parallel pipeline"),
    ({"micro_batches": 3, "cut": "layers"},
     "--micro-batches and --cut are options of --parallel pipeline"),
    ({"backend": "ps-async", "compression": "fp16"}, "pushes and pulls float32"),
    ({"backend": "ps-async", "ps_dedicated": True}, "--ps-dedicated needs at least 2 ranks"),
    ({"parallel": "pipeline", "batch_size": 64, "micro_batches": 5},
     "--micro-batches 5 does not divide the batch of 64"),
    ({"parallel": "pipeline", "stages": 2, "batch_size": 64, "micro_batches": 4},
     "--stages 2 needs 2 ranks, one per stage; this job has 1"),
    ({"parallel": "pipeline", "backend": "ring"}, "do not apply"),
    ({"compression": "int4"}, "unknown --compression 'int4'"),
])
def test_options_that_do_not_fit_the_mode_are_refused_in_one_line(kw, words):
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace("'", "'")):
        modes.select(_opts(**kw))


def test_the_registry_gives_the_lists_help_and_studies_use():
    assert modes.TRAIN_BACKENDS[-1] == "ps-async" and "horovod" in modes.TRAIN_BACKENDS
    assert modes.PARALLEL == ("data", "pipeline")


@pytest.mark.parametrize("meta, refusing", [
    ({"mode": "ps-async"}, ("sync", "pipeline")),
    ({"backend": "ps-async"}, ("sync", "pipeline")),           # written before "mode" was
    ({"parallel": "pipeline", "stages": 2}, ("sync", "ps-async")),
    ({"workload": "expmlp"}, ("ps-async", "pipeline")),         # an older sync checkpoint
])
def test_every_mode_refuses_a_checkpoint_another_mode_wrote(meta, refusing):
    found = Found("ckpt-000000010.hpcdl", 10, {"meta": meta}, {})
    opts = _opts(stages=2)
    for mode in modes.MODES:
        said = mode.refuse(found, opts, 2)
        assert (said is not None) == (mode.name in refusing), (mode.name, said)
        if said:
            assert "ckpt-000000010.hpcdl" in said


def test_no_two_modes_claim_the_same_options():
    for backend in modes.TRAIN_BACKENDS:
        for parallel in modes.PARALLEL:
            claim = [m.name for m in modes.MODES if m.chosen(_opts(backend=backend,
                                                                   parallel=parallel))]
            assert len(claim) == 1, (backend, parallel, claim)
