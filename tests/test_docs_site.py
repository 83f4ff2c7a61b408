"""The README and the docs site's table of contents (mkdocs.yml). The site itself is built with
`mkdocs build --strict` in .ci/run, which fails on a broken link; these checks need no mkdocs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150


def _nav_pages(entries: list) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_every_docs_page_is_in_the_site_nav_and_every_nav_entry_exists():
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    on_disk = {path.name for path in (ROOT / "docs").glob("*.md")}
    missing_from_nav = sorted(on_disk - set(nav))
    assert not missing_from_nav, f"add these docs pages to `nav` in mkdocs.yml: {missing_from_nav}"
    assert not sorted(set(nav) - on_disk), "mkdocs.yml names pages that docs/ lacks"


def test_readme_is_short_and_its_local_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    targets = re.findall(r"\]\(([^)#\s]+)\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to its docs"
    broken = [t for t in local if not (ROOT / t).exists()]
    assert not broken, f"README links to missing files: {broken}"


def test_docs_use_no_session_relative_words():
    # Figures are stated with their command and machine, never as "this round" or "last round's".
    pattern = re.compile(r"\b(this|last|next) round\b|\bthis session\b", re.IGNORECASE)
    hits = [
        f"{path.name}: {match.group(0)}"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not hits, hits


def test_the_committed_runs_table_is_current():
    # docs/results.md's table is generated from reports/*/snapshot.json (bench/results.py)
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "bench" / "results.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"```bash\n(python3 -m venv \.venv && .*?)\n```", readme)
    assert len(commands) == 2, "README keeps exactly two set-up commands: the main job and the tests"
    assert "pytest" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
