"""hpcdl train over every backend and compression ends with the same model as horovod, and every
run's step calls the very exchange function that the allreduce benchmark times for its backend.

Each training run goes through ``exchange_spy.py``, which wraps every backend's exchange methods
in a recorder (it changes nothing they compute) and then runs hpcdl's own command line, so one
launch per backend checks both the model and the function its step called."""
import numpy as np
import pytest

from hpcdl_testing import read_records, spied

STEPS = 30
ARGS = ["train", "--workload", "expmlp", "--steps", str(STEPS), "--batch-size", "32",
        "--warmup", "5", "--log-every", "10", "--seed", "3"]


@pytest.fixture(scope="module")
def bench_calls(bench_two_ranks):
    """What the benchmark's sweep timed, per backend label, for every backend and codec."""
    return bench_two_ranks[2]


def _train(tmp_path, np_, backend, compression="none"):
    name = f"{backend}-{compression}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    weights, results = tmp_path / f"{name}.npz", tmp_path / "runs.jsonl"
    res, called = spied(np_, tmp_path / f"{name}.calls.json",
                        ARGS + ["--backend", backend, "--compression", compression,
                                "--save-weights", str(weights), "--results", str(results)])
    assert "Replicas identical: yes" in res.stdout
    rec = read_records(results)[-1]
    assert rec["params"]["backend"] == backend and rec["params"]["compression"] == compression
    with np.load(weights) as z:
        return [z[k] for k in sorted(z.files, key=lambda k: int(k[1:]))], rec, called


def _calls_what_the_bench_times(called, bench_calls, backend, compression):
    label = backend if compression == "none" else f"{backend}+{compression}"
    assert called.get(label), called                 # the step ran the backend's exchange
    assert called[label] == bench_calls[label]       # and the bench timed exactly that


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("hvd"), 2, "horovod")


def test_horovods_step_averages_in_its_graph_what_the_bench_times(reference, bench_calls):
    _, rec, called = reference
    _calls_what_the_bench_times(called, bench_calls, "horovod", "none")
    assert called["horovod"] == ["HorovodBackend.average"]    # in the step's graph, as the tape
    assert rec["manifest"]["horovod_started"] is True


@pytest.mark.parametrize("backend", ["mpi", "ring", "ps"])
def test_every_backend_trains_to_the_horovod_model(tmp_path, reference, bench_calls, backend):
    ref = reference[0]
    got, rec, called = _train(tmp_path, 2, backend)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert rec["metrics"]["split"]["method"] == "timed"     # exchange timed around the backend
    # hpcdl's own exchanges train with no Horovod started beside them
    assert rec["manifest"]["horovod_started"] is False
    _calls_what_the_bench_times(called, bench_calls, backend, "none")


@pytest.mark.parametrize("backend,compression", [("ring", "fp16"), ("horovod", "int8"),
                                                 ("ps", "int8"), ("mpi", "int8")])
def test_compressed_exchange_trains_close_to_the_horovod_model(tmp_path, reference, bench_calls,
                                                                backend, compression):
    ref, ref_rec, _ = reference
    got, rec, called = _train(tmp_path, 2, backend, compression)
    scale = max(float(np.abs(w).max()) for w in ref)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(got, ref))
    # Lossy, so not the same weights (with Adam, a gradient element rounded to zero changes its
    # step a lot), but the same training: weights of the same size and a loss as low.
    assert 0 < diff < 0.5 * scale, diff
    assert rec["metrics"]["final_loss"] < 1.5 * ref_rec["metrics"]["final_loss"] + 1e-3, (
        rec["metrics"]["final_loss"], ref_rec["metrics"]["final_loss"])
    _calls_what_the_bench_times(called, bench_calls, backend, compression)


def test_three_ranks_ring_matches_horovod(tmp_path):
    ref, _, _ = _train(tmp_path / "h", 3, "horovod")
    got, _, _ = _train(tmp_path / "r", 3, "ring")
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
