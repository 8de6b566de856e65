"""The machine behind one interface: a record's machine section, read back in its new form and
in an older record's box section alike; the target a study is submitted to; the box's settings
reached only through it."""
import json

import pytest

from hpcdl import machine
from hpcdl.errors import UserError

BOX = {"box": "b1", "nodes_count": 2, "link_rate": "200mbit", "latency": "0",
       "cpus_per_node": 0.8, "cpu_period_us": 5000, "subnet": "10.77.0.0/24", "licence": "box",
       "host": "vm", "cores": 2, "nodes": {"n1": {"iface": "eth0"}, "n2": {"iface": "eth0"}}}
FACTS = {"box": "b1", "nodes_in_box": 2, "link_rate": "200mbit", "link_bits_per_s": 2e8,
         "latency": "0", "cpus_per_node": 0.8, "cpu_period_us": 5000, "host": "vm", "cores": 2}


@pytest.fixture
def a_box(tmp_path, monkeypatch):
    path = tmp_path / "box.json"
    path.write_text(json.dumps(BOX))
    monkeypatch.setenv("HPCDL_BOX", str(path))
    return path


def test_a_new_record_and_an_older_one_read_back_alike():
    man = {"cpu": "X", "hosts": ["n1", "n2"]}
    new = {"manifest": man, "machine": {"kind": "box", **FACTS}}
    old = {"manifest": man, "box": dict(FACTS)}
    for rec in (new, old):
        assert machine.link_rate(rec) == "200mbit" and machine.link_bits(rec) == 2e8
        assert machine.instance(rec) == "b1"
        assert machine.shared(rec) == ("box", frozenset(["b1"]))
        assert machine.setting(rec) == ("cpu X; box nodes_in_box=2, cpus_per_node=0.8, "
                                        "cpu_period_us=5000, latency=0, host=vm, cores=2")
    # a run on hosts the machine does not set: no link rate, no instance, its hosts shared
    hosts = {"manifest": man, "machine": {"kind": "slurm", "nodes": ["n1", "n2"]}}
    assert machine.link_rate(hosts) == "" and machine.link_bits(hosts) == 0.0
    assert machine.instance(hosts) is None and machine.setting(hosts) == "cpu X"
    assert machine.shared(hosts) == ("hosts", frozenset(["n1", "n2"]))
    assert machine.cpu_of(machine.setting(new)) == "X"


def test_a_run_off_the_box_records_the_scheduler_and_its_nodes(monkeypatch, tmp_path):
    monkeypatch.setenv("HPCDL_BOX", str(tmp_path / "none.json"))
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    sec = machine.record_section(["n10", "n9", "n9"], [None] * 3, "horovod", "none", 100, 3)
    assert sec == {"kind": "slurm", "nodes": ["n9", "n10"]}
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.delenv("JOB_ID", raising=False)
    assert machine.record_section(["h"], [None], "ring", "none", 100, 1)["kind"] == "mpirun"
    assert machine.record_section(["h"]) == {"kind": "mpirun", "nodes": ["h"]}
    assert machine.node("n1") is None and machine.link_bits_at("n1") is None
    assert machine.job_exports() == {}


def test_a_run_on_the_box_records_its_settings_and_the_section_is_accepted(a_box):
    sec = machine.record_section(["n1", "n2"], [None, None], "ring", "none", 500, 2)
    assert sec["kind"] == "box" and sec["link_rate"] == "200mbit" and sec["nodes"] == ["n1", "n2"]
    assert machine.link_bits_at("n1") == 2e8
    # a run that counted no bytes (a Keras script, a user's command): the settings alone
    alone = machine.record_section(["n2", "n1"])
    assert alone["kind"] == "box" and alone["nodes"] == ["n1", "n2"] and "net" not in alone
    assert machine.setting({"machine": alone}) == machine.setting({"machine": sec})
    assert machine.exchange_setting("n1") == {"box": "b1", "link_rate": "200mbit", "latency": "0",
                                              "cpus_per_node": 0.8, "cpu_period_us": 5000}
    assert machine.job_exports()["OMPI_MCA_btl"] == "self,tcp"
    from hpcdl import records
    rec = records.build(source="test", params={}, layout={}, metrics={"throughput": {"mean": 1.0}},
                        manifest={}, machine=sec)
    assert machine.setting(rec).startswith("box nodes_in_box=2")
    with pytest.raises(ValueError, match="unknown record section"):
        records.build(source="test", params={}, layout={}, metrics={"throughput": {"mean": 1.0}},
                      manifest={}, box=sec)


def test_a_tuning_file_made_on_other_settings_is_named_whichever_key_it_uses():
    then = {"link_rate": "200mbit", "latency": "0", "cpus_per_node": 0.2, "cpu_period_us": 10000}
    now = dict(then, cpu_period_us=5000)
    for key in ("machine", "box"):
        assert "cpu_period_us=10000" in machine.exchange_mismatch({key: then}, now)
        assert machine.exchange_mismatch({key: then}, dict(then)) is None
    assert machine.exchange_mismatch({}, now) is None
    assert machine.exchange_mismatch({"machine": then}, None) is None


def test_the_target_runs_only_points_of_its_links(a_box, monkeypatch, tmp_path):
    class Study:
        name, networks = "s", ["200mbit", "500mbit"]
    where = machine.target(Study(), unchecked=True)
    assert where.kind == "box" and where.licence == "box"
    assert where.runs("") and where.runs("200mbit") and not where.runs("500mbit")
    assert "licence 'box'" in where.one_at_a_time(gridengine=False)
    assert where.waiting(["p3"]) == ["Point p3: waits for a box with other links (this one has "
                                     "200mbit); bring that box up and submit again"]
    # a study needing links of some rate, where no machine sets them, is refused
    monkeypatch.setenv("HPCDL_BOX", str(tmp_path / "none.json"))
    with pytest.raises(UserError, match="network axis"):
        machine.target(Study())
    Study.networks = [""]
    cluster = machine.target(Study())
    assert cluster.kind == "cluster" and cluster.runs("") and cluster.licence is None
    assert cluster.one_at_a_time(gridengine=True) == "" and cluster.gridengine(("x", "y")) == {}
