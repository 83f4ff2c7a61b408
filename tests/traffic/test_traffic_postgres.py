"""The traffic store on a real PostgreSQL server (tests/postgres_cluster.py): ingest, dedupe, the
roll-up, label groups and the check behave as on SQLite."""

from __future__ import annotations

import pytest
from postgres_cluster import pytestmark  # noqa: F401 (the module's skip without a server)
from test_traffic_proxy import CHECK, DATA

from specaudit.cli import main
from specaudit.traffic import evaluate, ingest, open_traffic_store
from specaudit.traffic._rollup import STRATA
from specaudit.traffic._store import Group
from specaudit.traffic.simulate import TrafficModel, simulate, write_log


@pytest.mark.parametrize("after, expected", [("after_same.jsonl", 0), ("after_swapped.jsonl", 1)])
def test_shipped_logs_check_on_postgres_as_on_sqlite(pg_url, tmp_path, capsys, after, expected):
    logs = [str(DATA / "base.jsonl"), str(DATA / after)]
    sqlite = str(tmp_path / "t.db")
    outputs = {}
    for store in (pg_url, sqlite):
        assert main(["traffic", "ingest", *logs, "--store", store]) == 0
        assert main(["traffic", "ingest", *logs, "--store", store]) == 0  # nothing twice
        assert main(["traffic", "check", "--store", store, *CHECK, "--format", "json"]) == expected
        outputs[store] = capsys.readouterr().out.split("\n", 2)[-1]  # after the two ingest lines
    assert outputs[pg_url] == outputs[sqlite]


def test_rollup_and_label_groups_on_postgres_equal_sqlite(pg_url, tmp_path):
    model = TrafficModel(rate_per_s=0.2, change_at=0.6, change_effect=0.7, change_groups=("fr",))
    lines = list(simulate(model, 3000, seed=5))
    for i, line in enumerate(lines):
        line["labels"]["tenant"] = "o'neil" if i % 3 else "b"  # a quote in a label value
    log = write_log(tmp_path / "sim.jsonl", iter(lines))
    stores = [pg_url, f"sqlite:///{tmp_path / 's.db'}"]
    results = {}
    for url in stores:
        with open_traffic_store(url) as store:
            assert ingest(store, [str(log)], chunk_lines=1000).added == 3000
            assert ingest(store, [str(log)]).added == 0
            assert store.count() == 3000
            until = store.time_at(1201)
            sums = {
                group_by: store.aggregates(Group.parse(group_by), baseline_until=until).sort_values(["grp", "period", *STRATA])
                for group_by in ("language", "label:tenant")
            }
            if store.kind == "postgresql":
                store.rebuild_rollup()
            results[url] = (until, sums, evaluate(store, baseline_requests=1200).to_dict())
    (pg_until, pg_sums, pg_eval), (sq_until, sq_sums, sq_eval) = results[stores[0]], results[stores[1]]
    assert pg_until == sq_until
    for group_by in pg_sums:
        assert sorted(pg_sums[group_by]["grp"].unique()) == sorted(sq_sums[group_by]["grp"].unique())
        assert pg_sums[group_by].drop(columns="grp").to_numpy() == pytest.approx(sq_sums[group_by].drop(columns="grp").to_numpy(), rel=1e-9)
    assert {g["group"] for g in pg_eval["groups"]} == {"en", "fr", "zh"}
    assert [c["p_value"] for c in pg_eval["checks"]] == pytest.approx([c["p_value"] for c in sq_eval["checks"]], rel=1e-6)
    assert [(c["kind"], c["group"], c["metric"], c["alert"]) for c in pg_eval["checks"]] == [
        (c["kind"], c["group"], c["metric"], c["alert"]) for c in sq_eval["checks"]
    ]
    assert any(c["alert"] and c["group"] == "fr" and c["kind"] == "drift" for c in pg_eval["checks"])
