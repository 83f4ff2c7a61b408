"""Monitoring on live traffic: request logs ingested into a store, per-group acceptance and latency
adjusted for what differs between groups, anytime-valid alerts, and a logging proxy (docs/traffic.md)."""

from specaudit.traffic._check import TrafficResult, evaluate, parse_adjust, prometheus_text, render_text, summaries_json, write_outputs
from specaudit.traffic._fields import parse_column_map
from specaudit.traffic._ingest import IngestResult, ingest
from specaudit.traffic._store import Group, TrafficStore, open_traffic_store

__all__ = [
    "Group",
    "IngestResult",
    "TrafficResult",
    "TrafficStore",
    "evaluate",
    "ingest",
    "open_traffic_store",
    "parse_adjust",
    "parse_column_map",
    "prometheus_text",
    "render_text",
    "summaries_json",
    "write_outputs",
]
