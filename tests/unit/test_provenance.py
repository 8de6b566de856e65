"""What a report pools: records of one code tree (and software under it), one study file and
one machine, or it
refuses (unless told) and says what differs; runs sharing a machine that overlapped in time are
named. Also checked over every committed study in results/."""

import pytest

from hpcdl import records
from hpcdl.analysis import provenance
from hpcdl_testing import ROOT


def _rec(pid, code="t1", sha="s1", box="b1", cpus=0.2, start="2026-11-24T00:00:00+00:00",
         end="2026-11-24T00:00:30+00:00", rate="200mbit", wall=None, cpu=None, versions=None):
    man = {"code_tree": code, "git_commit": "c" + code, "hosts": ["n1"]}
    if versions:
        man["versions"] = versions
    if cpu:
        man["cpu"] = cpu
    if start:
        man["started"] = start
    r = {"point": {"id": pid}, "manifest": man, "declared": {"study_sha256": sha},
         "time": end, "metrics": {"wall_time_s": wall} if wall else {}}
    if box:
        r["box"] = {"box": box, "nodes_in_box": 8, "cpus_per_node": cpus, "latency": "0",
                    "link_rate": rate, "host": "vm", "cores": 2}
    return r


def _later(minute):
    return dict(start=f"2026-11-24T00:{minute:02d}:00+00:00",
                end=f"2026-11-24T00:{minute:02d}:30+00:00")


def test_records_made_alike_pool_and_say_so():
    recs = [_rec("a", **_later(0)), _rec("b", rate="500mbit", box="b2", **_later(1))]
    prov = provenance.check(recs)
    assert not prov.mixed and not prov.overlaps
    text = "\n".join(prov.lines())
    assert "2 record(s): hpcdl/ tree t1, study file s1, box nodes_in_box=8" in text
    assert "2 machine instance(s)" in text and "no two runs overlapped" in text


def test_local_records_on_one_processor_pool_and_name_it():
    cpu = "Intel(R) Xeon(R) (family 6 model 143; avx2 fma avx512f)"
    recs = [_rec("a", box=None, cpu=cpu, **_later(0)), _rec("b", box=None, cpu=cpu, **_later(1))]
    prov = provenance.check(recs)
    assert not prov.mixed
    assert f"2 record(s): hpcdl/ tree t1, study file s1, cpu {cpu}" in "\n".join(prov.lines())


def test_the_processor_is_named_with_its_family_model_and_vector_units(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                    "model name\t: AMD EPYC 9R14\nflags\t\t: fpu sse avx avx2 fma avx512f "
                    "avx512_bf16 sha_ni\n\nprocessor\t: 1\nmodel name\t: other\n")
    assert records.cpu_identity(str(info)) == \
        "AMD EPYC 9R14 (family 25 model 17; avx2 fma avx512f avx512_bf16)"
    info.write_text("processor\t: 0\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Old\n"
                    "flags\t\t: fpu sse sse4_2 avx\n")
    assert records.cpu_identity(str(info)) == "Old (family 6 model 85; no avx2)"
    assert records.cpu_identity(str(tmp_path / "absent"))       # off Linux: platform's word
    assert records.manifest()["cpu"] == records.cpu_identity()


@pytest.mark.parametrize("change, what", [
    ({"code": "t2"}, "code: hpcdl/ tree t1 (1 record(s)); hpcdl/ tree t2 (1 record(s))"),
    ({"sha": "s2"}, "study file: study file s1"),
    ({"cpus": 0.4}, "machine: box nodes_in_box=8, cpus_per_node=0.2"),
    # the same box settings and host name on another processor: another machine
    ({"cpu": "AMD EPYC (family 25 model 1; avx2 fma)"},
     "machine: box nodes_in_box=8, cpus_per_node=0.2, latency=0, host=vm, cores=2 (1 record(s)); "
     "cpu AMD EPYC (family 25 model 1; avx2 fma); box nodes_in_box=8"),
    ({"cpu": "AMD EPYC (family 25 model 1; avx2 fma)", "box": None},
     "cores=2 (1 record(s)); cpu AMD EPYC (family 25 model 1; avx2 fma) (1 record(s))"),
])
def test_records_of_other_code_study_files_or_machines_are_refused_unless_allowed(change, what):
    recs = [_rec("a", **_later(0)), _rec("b", **change, **_later(1))]
    with pytest.raises(provenance.MixedRecords, match="--allow-mixed") as err:
        provenance.check(recs)
    assert what in str(err.value)
    prov = provenance.check(recs, allow_mixed=True)
    assert prov.mixed and "**mixed records**" in prov.lines()[0] and what in prov.lines()[0]


TF215 = {"tensorflow": "2.15.1", "horovod": "0.28.1", "horovod_patches": None,
         "mpi": "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4"}
TF221 = dict(TF215, tensorflow="2.21.0", horovod_patches=(
    "0001-build-without-xla-ops.patch+0002-keras-backend-of-tf-keras.patch"))


def test_the_software_is_named_alike_from_either_form_of_the_mpi_version():
    assert provenance.software_of(_rec("a", versions=TF215)) == \
        "TensorFlow 2.15.1, Horovod 0.28.1, Open MPI 4.1.4"
    # mpirun --version's line (records made where mpi4py was not loaded) is the same library
    mpirun_line = dict(TF215, mpi="mpirun (Open MPI) 4.1.4")
    assert provenance.software_of(_rec("a", versions=mpirun_line)) == \
        "TensorFlow 2.15.1, Horovod 0.28.1, Open MPI 4.1.4"
    assert provenance.software_of(_rec("a", versions=dict(TF215, mpi="MPICH Version: 4.2.0"))) \
        .endswith("MPICH 4.2.0")
    assert provenance.software_of(_rec("a")) == ""
    recs = [_rec("a", versions=TF215, **_later(0)),
            _rec("b", versions=dict(TF215, mpi="mpirun (Open MPI) 4.1.4"), **_later(1))]
    prov = provenance.check(recs)
    assert not prov.mixed and "TensorFlow" not in "\n".join(prov.lines())   # listed elsewhere


def test_records_of_two_tensorflow_stacks_are_refused_unless_allowed_and_then_named():
    """A study continued after the venv moved from one stack to the other, same hpcdl/ code."""
    recs = [_rec("a", versions=TF215, **_later(0)), _rec("b", versions=TF221, **_later(1))]
    with pytest.raises(provenance.MixedRecords, match="--allow-mixed") as err:
        provenance.check(recs)
    assert ("software: TensorFlow 2.15.1, Horovod 0.28.1, Open MPI 4.1.4 (1 record(s)); "
            "TensorFlow 2.21.0, Horovod 0.28.1 + 0001-build-without-xla-ops.patch+") \
        in str(err.value)
    assert "code:" not in str(err.value)
    prov = provenance.check(recs, allow_mixed=True)
    lines = prov.lines()
    assert prov.mixed and "software: TensorFlow 2.15.1" in lines[0]
    assert any(ln.endswith("TensorFlow 2.21.0, Horovod 0.28.1 + 0001-build-without-xla-ops.patch"
                           "+0002-keras-backend-of-tf-keras.patch, Open MPI 4.1.4") for ln in lines)
    assert [g["software"] for g in prov.as_dict()["groups"]] == [
        "TensorFlow 2.15.1, Horovod 0.28.1, Open MPI 4.1.4",
        "TensorFlow 2.21.0, Horovod 0.28.1 + 0001-build-without-xla-ops.patch+"
        "0002-keras-backend-of-tf-keras.patch, Open MPI 4.1.4"]


def test_runs_that_overlapped_on_the_box_are_named_and_runs_on_other_machines_are_not():
    a = _rec("a", start="2026-11-24T00:00:00+00:00", end="2026-11-24T00:00:30+00:00")
    b = _rec("b", start="2026-11-24T00:00:20+00:00", end="2026-11-24T00:00:50+00:00")
    prov = provenance.check([a, b])
    assert prov.overlaps == [{"a": "a", "b": "b", "seconds": 10.0,
                              "from": "2026-11-24T00:00:20+00:00"}]
    assert "1 pair(s) of runs overlapped" in "\n".join(prov.lines())
    other = _rec("b", box="another-box", start="2026-11-24T00:00:20+00:00",
                 end="2026-11-24T00:00:50+00:00")
    assert provenance.check([a, other]).overlaps == []
    # back to back is no overlap
    c = _rec("c", start="2026-11-24T00:00:30+00:00", end="2026-11-24T00:00:40+00:00")
    assert provenance.check([a, c]).overlaps == []


def test_a_record_without_its_start_is_bounded_by_its_timed_training():
    a = _rec("a", start=None, end="2026-11-24T00:00:30+00:00", wall=20)
    b = _rec("b", start=None, end="2026-11-24T00:00:15+00:00", wall=5)
    prov = provenance.check([a, b])
    assert prov.estimated == 2 and len(prov.overlaps) == 1
    a2 = _rec("a", start=None, end="2026-11-24T00:00:30+00:00", wall=10)
    prov = provenance.check([a2, b])
    assert prov.overlaps == [] and "2 record(s) give only their timed training" in prov.lines()[-1]


def _committed():
    for runs in sorted((ROOT / "results").glob("*/runs.jsonl")):
        if not (runs.parent / "report.md").exists():
            continue                      # records whose report is still to come
        recs = records.read(runs)
        yield runs.parent, [r for r in recs if r.get("kind", "train") == "train"]


@pytest.mark.parametrize("folder, recs", list(_committed()), ids=lambda x: getattr(x, "name", ""))
def test_every_committed_report_pools_alike_records_or_says_what_it_mixed(folder, recs):
    prov = provenance.check(recs, allow_mixed=True)
    report = (folder / "report.md").read_text()
    said_mixed = "--allow-mixed" in report.splitlines()[0] and "**mixed records**" in report
    assert said_mixed == prov.mixed, f"{folder.name}: mixed {prov.mixed}, report says {said_mixed}"
    # overlaps are named in the report wherever the records show them
    assert ("overlapped in time** on a machine they shared, so" in report) == bool(prov.overlaps)


@pytest.mark.parametrize("folder, recs", list(_committed()), ids=lambda x: getattr(x, "name", ""))
def test_committed_records_made_since_jobs_carry_their_start_are_alike_and_never_overlapped(folder,
                                                                                          recs):
    """Records that carry when their job began were made with the box's licence in force: their
    study pools one code tree, study file and box setting, and no two of its jobs overlapped.
    (Older records, without it, are the ones the report flags; they wait for a clean re-run.)"""
    if not recs or not all(_started(r) for r in recs):
        pytest.skip(f"{folder.name}: records made before jobs carried their start")
    prov = provenance.check(recs, allow_mixed=True)
    assert not prov.mixed, prov.differences()
    assert prov.overlaps == []


def _started(rec):
    return (rec.get("manifest") or {}).get("started")
