"""The report's concurrency part: a snapshot with `concurrency` and `logprob_parity` sections (as
analyze writes them for a llama-server run) shows equivalence per level, the per group x level
table with the crossover, and the parity finding; a snapshot without them shows none of it."""

from __future__ import annotations

from specaudit.analysis.concurrency import concurrency_section
from specaudit.analysis.equivalence import Battery
from specaudit.analysis.logprob_parity import logprob_parity
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.report import render_html
from specaudit.report.exports import summary_markdown
from specaudit.report.view import build_view


def _row(engine, prompt, sample, level, wall, accepted=0, proposed=0, logprobs=None):
    return {
        "key": f"{prompt}|{engine}|{sample}",
        "prompt_id": prompt,
        "attributes": {"style": "plain"},
        "engine": engine,
        "sample": sample,
        "concurrency": level,
        "output_token_ids": [3, 4, 5, 6],
        "wall_s": wall,
        "ttft_s": wall / 8,
        "accepted": accepted,
        "proposed": proposed,
        "server_logprobs": logprobs,
    }


def _sections():
    records = []
    for i in range(8):
        p = f"p{i}"
        records += [_row(CONTROL_ENGINE, p, 0, 1, 1.0 + i / 100, logprobs=[-0.5, -1.0, -0.2, -2.0])]
        records += [_row(SPECULATIVE_ENGINE, p, 0, 1, 0.5, 3, 4, logprobs=[-0.5, 0.0, 0.0, -2.0])]
        records += [_row(CONTROL_ENGINE, p, 1, 4, 1.0 + i / 100, logprobs=[-0.501, -1.0, -0.2, -2.0])]
        records += [_row(SPECULATIVE_ENGINE, p, 1, 4, 2.0, 1, 4, logprobs=[-0.5, -1.0, -0.2, -2.0])]
    section = concurrency_section(records, Battery(None, 0.05, 0.05, ["style"], 0, n_boot=200, equivalence=False))
    return section.model_dump(exclude_unset=True), logprob_parity(records).model_dump(exclude_unset=True)  # as analyze writes them


def test_concurrency_part_in_html_and_summary(snapshot):
    snapshot["concurrency"], snapshot["logprob_parity"] = _sections()
    html = render_html(snapshot)
    assert 'id="concurrency"' in html and "crossover level" in html
    # the crossover plot: speed-up and acceptance per group across levels, the crossover told in text as well as shape
    assert html.count('class="chart levels"') == 4  # two dimensions (all, style) x (speed-up, acceptance)
    assert "Speed-up per style group and concurrency level" in html and "plain (stops paying at 4)" in html
    assert "the server&#39;s logprobs are not the target&#39;s" in html or "the server's logprobs are not the target's" in html
    markdown = summary_markdown(build_view(snapshot))
    assert "## Concurrency" in markdown and "| style | plain | 4 |" in markdown
    assert "| all | all | 4 |" in markdown and markdown.count("| 4 |") >= 1
    row = next(line for line in markdown.splitlines() if line.startswith("| style | plain | 4 |"))
    assert row.rstrip().endswith("| 4 |")  # speculation stops paying at level 4: the crossover
    assert "Logprob parity: **" in markdown


def test_no_concurrency_part_without_levels(snapshot):
    assert 'id="concurrency"' not in render_html(snapshot)
    assert "## Concurrency" not in summary_markdown(build_view(snapshot))
