"""Prometheus textfile output (format, escaping, atomic replace) and the JSON Lines alert log."""

from __future__ import annotations

import json
import random
import re

import pytest
from monitor_factory import base_snapshot, history, noisy_run

from specaudit.monitor import alert_lines, append_alerts, check, metrics_text, open_store, write_atomic

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(\{{{_LABEL}(?:,{_LABEL})*\}})? (\S+)$")


def parse_exposition(text: str) -> dict[str, dict[str, float]]:
    """A strict reader of the Prometheus text format as node_exporter's textfile collector needs it:
    HELP and TYPE once per family before its samples, a family's samples contiguous, no duplicate
    series, every value a float. Returns {family: {labels: value}}."""
    families: dict[str, dict[str, float]] = {}
    typed, current = set(), None
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert re.fullmatch(_NAME, name) and name not in families, line
            families[name], current = {}, name
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == current and kind == "gauge" and name not in typed, line
            typed.add(name)
        else:
            match = _SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, labels, value = match.groups()
            assert name == current and name in typed, f"{name} outside its family block"
            assert (labels or "") not in families[name], f"duplicate series {line}"
            families[name][labels or ""] = float(value)
    return families


def test_gauges_per_group_with_confidence_bounds(store_url):
    with open_store(store_url) as store:
        run = store.add(base_snapshot(), environment="prod").run
        text = metrics_text(store, run)
    assert 'specaudit_acceptance_rate{dimension="dialect",group="aave"} 0.312\n' in text
    families = parse_exposition(text)
    acceptance = families["specaudit_acceptance_rate"]
    assert len(acceptance) == 9  # 8 groups + overall
    assert acceptance['{dimension="dialect",group="_overall"}'] == pytest.approx(0.342)
    low = families["specaudit_acceptance_rate_ci_low"]['{dimension="dialect",group="aave"}']
    high = families["specaudit_acceptance_rate_ci_high"]['{dimension="dialect",group="aave"}']
    assert low < 0.312 < high and high - low == pytest.approx(2 * 1.96 * 0.015, rel=1e-3)
    assert "specaudit_per_position_acceptance" not in families  # null values are left out, not written as NaN
    assert families["specaudit_equivalence_pass"][""] == 1
    assert families["specaudit_equivalence_engine_pass"]['{engine="speculative"}'] == 1
    assert families["specaudit_group_prompts"]['{dimension="dialect",group="aave"}'] == 40
    info = next(iter(families["specaudit_run_info"]))
    assert 'environment="prod"' in info and 'target="default"' in info and 'prompt_set="core@1"' in info
    assert families["specaudit_run_created_timestamp_seconds"][""] == 1767225600  # 2026-01-01T00:00:00Z


def test_label_values_are_escaped(store_url):
    snap = base_snapshot()
    by_group = snap["groups"]["dialect"]["by_group"]
    by_group['we"ird\\ group\nname'] = by_group.pop("aave")
    with open_store(store_url) as store:
        text = metrics_text(store, store.add(snap).run)
    assert 'group="we\\"ird\\\\ group\\nname"' in text
    assert len(parse_exposition(text)["specaudit_acceptance_rate"]) == 9


def test_check_results_become_gauges_and_alert_lines(store_url, tmp_path):
    with open_store(store_url) as store:
        for snap in history(seed=21, n=5):
            store.add(snap, environment="prod")
        dropped = store.add(noisy_run(random.Random(8), 5, shift={("aave", "acceptance_rate"): -0.35}), environment="prod").run
        result = check(store, dropped.id)
        text = metrics_text(store, dropped, result=result)
    families = parse_exposition(text)
    assert families["specaudit_monitor_status"][""] == 2
    assert families["specaudit_monitor_checks"]['{status="FAIL"}'] == sum(c.status == "FAIL" for c in result.checks) >= 1
    key = '{kind="drift",dimension="dialect",group="aave",metric="acceptance_rate"}'
    assert families["specaudit_drift_status"][key] == 2
    relative = families["specaudit_drift_relative_change"]['{dimension="dialect",group="aave",metric="acceptance_rate"}']
    assert -0.5 < relative < -0.2

    log = tmp_path / "alerts" / "specaudit.jsonl"
    assert append_alerts(log, alert_lines(result, environment="prod")) == len(result.alerts)
    append_alerts(log, alert_lines(result, environment="prod"))  # appended, not replaced
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == 2 * len(result.alerts)
    first = entries[0]
    assert (first["status"], first["kind"], first["group"], first["metric"]) == ("FAIL", "drift", "aave", "acceptance_rate")
    assert first["run_id"] == dropped.id and first["environment"] == "prod" and "aave" in first["subject"]
    assert append_alerts(log, []) == 0


def test_metrics_file_is_replaced_atomically(tmp_path):
    target = tmp_path / "textfile" / "specaudit.prom"
    write_atomic(target, "old 1\n")
    write_atomic(target, "specaudit_x 2.0\n")
    assert target.read_text() == "specaudit_x 2.0\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["specaudit.prom"]  # no staging file left behind
