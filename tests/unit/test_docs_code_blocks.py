"""Every fenced python block of README.md and docs/**.md runs, or is marked as not runnable.

A block is marked by the line just before its fence: ``<!-- not-run: <reason> -->``; the
reason is required. The runnable blocks run one after another in one subprocess (each in a
fresh namespace; the SparkSession the first flow starts serves the others), with the
working directory a temporary one that holds a link ``docs`` to the repository's
``docs/``: so ``docs/data/clicks.csv`` reads the shipped data and ``out/`` is thrown away.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!--\s*not-run:(.*?)-->\s*$")
FENCE = "```python"


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    code: str
    not_run: str | None  # the marker's reason, or None: the block must run

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The page's fenced python blocks, with the not-run marker of the line before each."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == FENCE:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"{page}:{i + 1}: the python block is never closed"
            marker = MARKER.match(lines[i - 1].strip()) if i else None
            found.append(Block(page, i + 1, "\n".join(lines[i + 1:end]) + "\n",
                               marker.group(1).strip() if marker else None))
            i = end
        i += 1
    return found


def markers_of(path: Path) -> list[tuple[int, str, bool]]:
    """Each not-run marker: (line, reason, whether a python block opens on the next line)."""
    lines = path.read_text().splitlines()
    return [(i + 1, m.group(1).strip(), i + 1 < len(lines) and lines[i + 1].strip() == FENCE)
            for i, line in enumerate(lines) if (m := MARKER.match(line.strip()))]


BLOCKS = [b for page in PAGES for b in blocks_of(page)]
RUNNABLE = [b for b in BLOCKS if b.not_run is None]

RUNNER = textwrap.dedent("""
    import contextlib, io, json, sys, traceback
    blocks = json.load(open(sys.argv[1]))
    results = {}
    for block in blocks:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(block["code"], block["id"], "exec"), {"__name__": "__main__"})
            results[block["id"]] = None
        except BaseException:
            results[block["id"]] = traceback.format_exc()
    json.dump(results, open(sys.argv[2], "w"))
""")


def run_blocks(blocks: list[Block], workdir: Path) -> dict[str, str | None]:
    """Run ``blocks`` in one new interpreter in ``workdir``; block id -> traceback (None: it ran)."""
    (workdir / "docs").symlink_to(ROOT / "docs")
    todo, done = workdir / "blocks.json", workdir / "results.json"
    todo.write_text(json.dumps([{"id": b.id, "code": b.code} for b in blocks]))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(todo), str(done)], cwd=workdir,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and done.exists(), proc.stderr[-5000:]
    results: dict[str, str | None] = json.loads(done.read_text())
    return results


@pytest.fixture(scope="module")
def results(request, tmp_path_factory) -> dict[str, str | None]:
    """Run the blocks whose tests this session selected (``-k``), all in one subprocess."""
    chosen = {item.callspec.params["block"].id for item in request.session.items
              if hasattr(item, "callspec") and isinstance(item.callspec.params.get("block"), Block)}
    return run_blocks([b for b in RUNNABLE if b.id in chosen], tmp_path_factory.mktemp("docs-blocks"))


@pytest.mark.spark
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_the_block_runs(block, results):
    assert results[block.id] is None, f"{block.id} failed:\n{results[block.id]}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_not_run_marker_names_a_reason_and_marks_a_block(page):
    for line, reason, marks_a_block in markers_of(page):
        assert len(reason.split()) >= 3, f"{page.name}:{line}: a not-run marker needs a reason"
        assert marks_a_block, f"{page.name}:{line}: a not-run marker must be right before a python block"


def test_the_readme_starts_with_a_runnable_example():
    readme = [b for b in BLOCKS if b.page == "README.md"]
    assert readme and readme[0].not_run is None
    assert len(readme[0].code.splitlines()) <= 12


def test_a_broken_block_fails(tmp_path):
    """The runner reports a failing block (and still runs the others)."""
    broken = Block("x.md", 1, "import wire\nwire.Flow('bad id!')\n", None)
    fine = Block("x.md", 5, "print('fine')\n", None)
    results = run_blocks([broken, fine], tmp_path)
    assert "ConfigError: invalid flow_id='bad id!'" in str(results["x.md:1"])
    assert results["x.md:5"] is None


def test_the_block_finder_reads_markers(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n<!-- not-run: needs a Kafka broker -->\n```python\nx = 1\n```\n\n"
                    "```python\ny = 2\n```\n```bash\nmake test\n```\n")
    found = [(b.line, b.code, b.not_run) for b in blocks_of(page)]
    assert found == [(3, "x = 1\n", "needs a Kafka broker"), (7, "y = 2\n", None)]
