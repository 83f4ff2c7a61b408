"""Trend report: self-contained HTML (inline SVG, no script, no network, escaped labels) with CI
bands, change markers and alert marks; the CSV beside it; rendering in headless Chromium."""

from __future__ import annotations

import csv
import random
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from monitor_factory import GROUPS, edited, history, noisy_run

from specaudit.monitor import check, open_store, trend_frame, write_trend_report

HOSTILE = '<script>alert("x")</script>&co'


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture
def trend_store(store_url):
    """Seven runs: a draft update at run 5 (context marker), aave's acceptance down 35 % at run 6
    (a FAIL alert), and a group whose name is an HTML/script injection attempt."""
    with open_store(store_url) as store:
        snaps = history(seed=31, n=6)
        snaps.append(noisy_run(random.Random(5), 6, shift={("aave", "acceptance_rate"): -0.35}))
        for i, snap in enumerate(snaps):
            by_group = snap["groups"]["dialect"]["by_group"]
            by_group[HOSTILE] = by_group.pop("singlish")
            if i >= 5:
                snap = edited(snap, **{"run.models.draft.sha256": {"model.gguf": "e" * 64}})
            store.add(snap, environment="prod")
            check(store, "latest")
        yield store


def test_html_is_self_contained_escaped_and_complete(trend_store, tmp_path):
    report = write_trend_report(trend_store, tmp_path / "trend")
    html = report.html_path.read_text(encoding="utf-8")
    assert (report.n_runs, report.n_charts) == (7, 2)  # dialect × (acceptance_rate, speedup)
    lowered = html.lower()
    assert "<script" not in lowered and "http://" not in lowered and "https://" not in lowered
    assert " src=" not in lowered and "<link" not in lowered and "@import" not in lowered
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;co" in html
    parser = _Collect()
    parser.feed(html)
    panels = [a for t, a in parser.tags if t == "svg" and a.get("class") == "trend"]
    assert len(panels) == 2 * (len(GROUPS) + 1)  # a panel per group and overall, per metric
    assert HOSTILE in "".join(parser.text)  # shown as text, not markup
    bands = [a for t, a in parser.tags if t == "path" and a.get("class") == "band"]
    assert len(bands) == 2 * (len(GROUPS) + 1)
    fails = [(t, a) for t, a in parser.tags if a.get("class") == "pt-fail"]
    # The legend's mark, and aave's acceptance at the last run (one point, whether drift and CUSUM both fired);
    # a FAIL is a square, not only a colour.
    assert len(fails) == 2 and {t for t, _ in fails} == {"rect"}
    aave_panel = html.split("<figcaption>aave</figcaption>", 1)[1].split("</figure>", 1)[0]
    assert 'class="pt-fail"' in aave_panel
    markers = [a for t, a in parser.tags if t == "line" and a.get("class") == "change"]
    assert len(markers) == 2 * (len(GROUPS) + 1)  # one draft change, marked in every panel
    assert "draft changed" in html and "#7 run-6" in html
    latest_alerts = html.split('<ul class="actions">', 1)[1].split("</ul>", 1)[0]
    assert "aave" in latest_alerts and "acceptance_rate" in latest_alerts


def test_csv_has_every_number_shown(trend_store, tmp_path):
    report = write_trend_report(trend_store, tmp_path / "trend", metrics=["acceptance_rate"])
    with open(report.csv_path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 7 * (len(GROUPS) + 1)
    aave = [r for r in rows if r["group"] == "aave"]
    assert [r["run"] for r in aave] == [f"run-{i}" for i in range(7)]
    assert float(aave[-1]["value"]) < 0.75 * float(aave[0]["value"])
    assert aave[-1]["alert"] == "FAIL" and aave[0]["alert"] == ""
    assert {r["group"] for r in rows} == (set(GROUPS) - {"singlish"}) | {HOSTILE, "_overall"}
    assert all(float(r["ci_low"]) <= float(r["value"]) <= float(r["ci_high"]) for r in rows)
    frame = trend_frame(trend_store, metrics=["acceptance_rate"])
    assert frame.shape == (len(rows), 18) and frame["value"].notna().all()


def test_empty_store_still_renders(store_url, tmp_path):
    with open_store(store_url) as store:
        report = write_trend_report(store, tmp_path / "empty")
    html = report.html_path.read_text()
    assert report.n_runs == 0 and "No metric series" in html and "--fail-line" in html  # the audit report's stylesheet


def _png_size_and_colours(path: Path) -> tuple[int, int, int]:
    """Width, height and the number of distinct colours in a few rows of an 8-bit RGB(A) PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    idat = b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        pos += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8 and colour_type in (2, 6)
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels + 1
    colours, previous = set(), bytearray(stride - 1)
    for row in range(height):
        line = raw[row * stride : (row + 1) * stride]
        kind, pixels = line[0], bytearray(line[1:])
        for i in range(len(pixels)):  # undo the PNG row filters
            left = pixels[i - channels] if i >= channels else 0
            up = previous[i]
            up_left = previous[i - channels] if i >= channels else 0
            if kind == 1:
                pixels[i] = (pixels[i] + left) & 255
            elif kind == 2:
                pixels[i] = (pixels[i] + up) & 255
            elif kind == 3:
                pixels[i] = (pixels[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pixels[i] = (pixels[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 255
        previous = pixels
        if row % 40 == 0:
            colours.update(bytes(pixels[i : i + 3]) for i in range(0, len(pixels), channels))
    return width, height, len(colours)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (Debian package `chromium`; .ci/run installs it)")
def test_renders_in_headless_chromium(trend_store, tmp_path):
    report = write_trend_report(trend_store, tmp_path / "trend")
    url = report.html_path.resolve().as_uri()
    flags = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('<svg class="trend"') == 2 * (len(GROUPS) + 1) and "polyline" in dom.stdout
    shot = tmp_path / "trend.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1200,1400", url], capture_output=True, timeout=120)
    width, height, colours = _png_size_and_colours(shot)
    assert (width, height) == (1200, 1400)
    assert colours > 20  # charts, bands and text drawn, not a blank page
