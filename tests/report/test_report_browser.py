"""The report in a real browser: headless Chromium opens report.html from disk, the DOM holds
the charts, a screenshot is not blank, printing gives a multi-page PDF within the page budget,
the accessibility checker axe-core finds no serious or critical violation, every chart has a
text alternative and enough contrast, and no request leaves the page.

axe-core comes from the npm registry: the test uses $SPECAUDIT_AXE (a path to axe.min.js), the
copy .ci/run installs into ~/.cache/specaudit/axe, or installs it there with npm itself; without
npm or network it skips and says why.

How "no request leaves the page" is checked (three layers, the last one observed, not assumed):
1. the HTML has no tag or CSS that can fetch (test_report_html.py checks that statically);
2. the report carries a Content-Security-Policy `default-src 'none'`, and Chromium runs with
   `--host-resolver-rules="MAP * ~NOTFOUND"`, so any attempt would fail;
3. Chromium's NetLog (`--log-net-log`) records every URL request the network stack starts. We
   load a copy of the report with the CSP removed (so the policy cannot hide a reference) and
   assert that no request was initiated by the page. Browser-internal requests (update and
   account checks, initiator "not an origin") are not the page's and are ignored. A control
   page with one external image and stylesheet must show up in the same log, which proves
   the check can see requests at all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from specaudit.gate import evaluate_gate
from specaudit.report import render_report

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium") if p and os.path.exists(p)), None
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian package `chromium`): browser checks not run")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
]


def _chromium(tmp_path: Path, *args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"  # fresh profile per run
    result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=timeout)
    shutil.rmtree(profile, ignore_errors=True)
    return result


@pytest.fixture(scope="module")
def report_file(tmp_path_factory, _snapshot_text) -> Path:
    snapshot = json.loads(_snapshot_text)
    snapshot["gate"] = evaluate_gate(snapshot).to_dict()
    return render_report(snapshot, tmp_path_factory.mktemp("browser"))["html"]


# ---------------------------------------------------------------------------- PNG reading (stdlib only)
def _png_rows(path: Path, max_rows: int):
    """Yield decoded RGB(A) rows of an 8-bit PNG, top to bottom (enough to judge the first screen)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour = header
    assert depth == 8 and colour in (2, 6), f"unexpected PNG format {depth}/{colour}"
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    for y in range(min(height, max_rows)):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for x in range(stride):  # PNG row filters: none, sub, up, average, Paeth
            a = line[x - bpp] if x >= bpp else 0
            b = previous[x]
            c = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        previous = line
        yield width, bpp, bytes(line)


# ---------------------------------------------------------------------------- axe-core and the example audit
AXE_CACHE = Path.home() / ".cache" / "specaudit" / "axe"
EXAMPLE = Path(__file__).resolve().parents[2] / "reports" / "example" / "snapshot.json"
PAGE_BUDGET = 12  # the default audit's report, printed on A4
# chart fills that are areas behind the data (the band, zebra rows, the PIT 95% range), never data marks
BACKGROUND_FILLS = {"#ffffff", "#dbe9f6", "#f3f3f3", "#f5f5f5", "#e6e6e6", "none"}
DECORATIVE_STROKES = {"#d9d9d9"}  # grid lines


def _axe_script() -> Path:
    explicit = os.environ.get("SPECAUDIT_AXE")
    if explicit and Path(explicit).is_file():
        return Path(explicit)
    cached = AXE_CACHE / "node_modules" / "axe-core" / "axe.min.js"
    if cached.is_file():
        return cached
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("axe-core not found and no npm to install it (set SPECAUDIT_AXE or run .ci/run): accessibility check not run")
    AXE_CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(AXE_CACHE), "axe-core@4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if not cached.is_file():
        pytest.skip(f"could not install axe-core from the npm registry ({done.stderr.strip()[-300:]}): accessibility check not run")
    return cached


CHECKER = """
<pre id="a11y-result">pending</pre>
<script>
(async () => {
  const hex = (c) => { const m = c.match(/\\d+(\\.\\d+)?/g); if (!m || (m.length > 3 && +m[3] === 0)) return "none";
    return "#" + m.slice(0, 3).map(v => (+v).toString(16).padStart(2, "0")).join(""); };
  document.querySelectorAll("details").forEach(d => { d.open = true; });  // check folded drill-downs too
  const charts = [...document.querySelectorAll("main svg")].map(svg => {
    const title = svg.querySelector("title"), desc = svg.querySelector("desc");
    const texts = [...svg.querySelectorAll("text")].map(t => hex(getComputedStyle(t).fill));
    const fills = [...svg.querySelectorAll("rect,circle,path")].map(e => hex(getComputedStyle(e).fill));
    const strokes = [...svg.querySelectorAll("line,circle,path")].map(e => hex(getComputedStyle(e).stroke));
    return {role: svg.getAttribute("role"), label: svg.getAttribute("aria-label") || "",
            title: title ? title.textContent : "", desc: desc ? desc.textContent : "", texts, fills, strokes};
  });
  let violations = [];
  try {
    const result = await axe.run(document, {resultTypes: ["violations"]});
    violations = result.violations.map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.length,
                                               example: v.nodes.length ? v.nodes[0].html.slice(0, 200) : ""}));
  } catch (err) { violations = [{id: "axe-error", impact: "critical", nodes: 0, example: String(err)}]; }
  document.getElementById("a11y-result").textContent = JSON.stringify({violations, charts});
})();
</script>
"""


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast_on_white(colour: str) -> float:
    return 1.05 / (_luminance(colour) + 0.05)


def _pdf_pages(pdf: Path) -> int:
    return len(re.findall(rb"/Type\s*/Page(?!s)", pdf.read_bytes()))


@pytest.fixture(scope="module")
def example_report(tmp_path_factory) -> Path:
    if not EXAMPLE.is_file():
        pytest.skip("reports/example/snapshot.json is not in this checkout")
    from specaudit.contracts.snapshot import load_snapshot

    return render_report(load_snapshot(EXAMPLE), tmp_path_factory.mktemp("example"))["html"]


# ---------------------------------------------------------------------------- tests
def test_dom_has_the_charts_and_no_request_leaves_the_page(tmp_path, report_file):
    # the report with its CSP removed: whatever it references would now really be fetched
    exposed = tmp_path / "report-no-csp.html"
    html = report_file.read_text(encoding="utf-8")
    exposed.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html), encoding="utf-8")
    assert "Content-Security-Policy" not in exposed.read_text(encoding="utf-8")
    control = tmp_path / "control.html"
    control.write_text(
        '<!DOCTYPE html><html><head><link rel="stylesheet" href="https://fonts.example.invalid/a.css"></head>'
        '<body><img src="http://images.example.invalid/b.png"><p>control</p></body></html>'
    )

    def page_requests(page: Path):
        log = tmp_path / f"{page.stem}.netlog.json"
        result = _chromium(tmp_path, f"--log-net-log={log}", "--dump-dom", page.as_uri())
        events = json.loads(log.read_text(encoding="utf-8"))
        names = {v: k for k, v in events["constants"]["logEventTypes"].items()}
        started = [
            e["params"] for e in events["events"] if names.get(e["type"]) == "URL_REQUEST_START_JOB" and "url" in e.get("params", {})
        ]
        return result.stdout, [p["url"] for p in started if p.get("initiator") != "not an origin"]

    dom, requests = page_requests(exposed)
    assert requests == [], f"the report made requests: {requests}"
    assert dom.count("<svg") >= 5 and dom.count("</svg>") == dom.count("<svg")
    assert dom.count('role="img"') == dom.count("<svg") and "<script" not in dom
    assert "Speculative decoding audit" in dom and "Deployment gate" in dom
    _, control_requests = page_requests(control)
    assert {"https://fonts.example.invalid/a.css", "http://images.example.invalid/b.png"} <= set(control_requests)


def test_screenshot_is_not_blank(tmp_path, report_file):
    shot = tmp_path / "report.png"
    result = _chromium(tmp_path, "--window-size=1280,900", f"--screenshot={shot}", report_file.as_uri())
    assert shot.is_file() and shot.stat().st_size > 10_000, result.stderr[-2000:]
    colours: set[bytes] = set()
    rows = 0
    for width, bpp, line in _png_rows(shot, max_rows=420):  # header, navigation and the three verdict cards
        assert width == 1280
        rows += 1
        colours.update(line[i : i + 3] for i in range(0, len(line), bpp * 7))
    assert rows == 420
    assert len(colours) > 20, f"screenshot looks blank: {len(colours)} colours"
    assert b"\xff\xff\xff" in colours  # the page background
    assert any(r < 60 and g < 70 and 40 < b < 90 for r, g, b in colours)  # the dark header band


def test_print_to_pdf_gives_a_multipage_document(tmp_path, report_file):
    pdf = tmp_path / "report.pdf"
    result = _chromium(tmp_path, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", report_file.as_uri())
    assert pdf.is_file(), result.stderr[-2000:]
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-") and len(data) > 50_000
    pages = _pdf_pages(pdf)
    assert pages > 1, f"{pages} page(s)"


def _accessibility(tmp_path: Path, report: Path) -> dict:
    """axe-core's violations and every chart's text alternative and colours, from a real browser."""
    axe = _axe_script()
    checked = tmp_path / "checked.html"
    html = report.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)  # the checker is a script
    script = axe.read_text(encoding="utf-8")
    checked.write_text(
        html.replace("</main>", f"<script>{script}</script>{CHECKER}</main>"), encoding="utf-8"
    )  # inside main: not a stray region
    dom = _chromium(tmp_path, "--virtual-time-budget=60000", "--dump-dom", checked.as_uri(), timeout=180).stdout
    found = re.search(r'<pre id="a11y-result">(.*?)</pre>', dom, re.S)
    assert found and found.group(1) != "pending", "the accessibility checker did not finish"
    import html as html_lib

    return json.loads(html_lib.unescape(found.group(1)))


def test_default_audit_is_accessible_and_every_chart_readable(tmp_path, example_report):
    result = _accessibility(tmp_path, example_report)
    serious = [v for v in result["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == [], serious
    charts = result["charts"]
    assert len(charts) >= 4 + 4  # a forest per dimension of the default audit, drill-down panels, PIT histograms
    for chart in charts:
        # a text alternative: role img, a label, a title and a description that says what the chart shows
        assert chart["role"] == "img" and chart["label"] and chart["title"] and len(chart["desc"]) > 40, chart["label"]
        assert all(_contrast_on_white(c) >= 4.5 for c in chart["texts"] if c != "none"), chart["label"]
        marks = [c for c in chart["fills"] if c not in BACKGROUND_FILLS] + [
            c for c in chart["strokes"] if c not in DECORATIVE_STROKES and c != "none"
        ]
        low = sorted({c for c in marks if _contrast_on_white(c) < 3.0})
        assert low == [], f"{chart['label']}: marks under 3:1 on white: {low}"


def test_default_audit_prints_within_the_page_budget(tmp_path, example_report):
    pdf = tmp_path / "example.pdf"
    result = _chromium(tmp_path, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", example_report.as_uri(), timeout=180)
    assert pdf.is_file(), result.stderr[-2000:]
    pages = _pdf_pages(pdf)
    assert 2 <= pages <= PAGE_BUDGET, f"{pages} pages"


def test_mitigation_report_is_accessible(tmp_path, audit_run, tiny_pair_dir):
    """`specaudit mitigate`'s report.html, with its before/after section, passes the same checker."""
    import warnings

    from specaudit.mitigate import mitigate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small groups
        result = mitigate(
            audit_run,
            tmp_path / "mitigated",
            draft=str(tiny_pair_dir[1]),
            train_layers=1,
            steps=5,
            samples=1,
            max_new_tokens=8,
            equivalence_prompts=2,
            timing_prompts=0,
            device="cpu",
            progress=False,
        )
    report = result.files["report"]
    assert 'id="mitigation"' in report.read_text(encoding="utf-8")
    result = _accessibility(tmp_path, report)
    serious = [v for v in result["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == [], serious
