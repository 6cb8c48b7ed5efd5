"""reproduce/early_page.py: it fills docs/results-atari10-early.md's tables from the report's data (report.json), in
the report's own cells, finds a table that is not the report's, and refuses a page without its markers
(tests/test_results.py checks the committed page with it)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import early_page  # noqa: E402
from reproduce.report_data import read_data  # noqa: E402

REPORT = ROOT / "results" / "atari10-early" / "report.md"
DATA = ROOT / "results" / "atari10-early" / "report.json"  # the report's numbers as data, which the page reads
PAGE = ROOT / "docs" / "results-atari10-early.md"


def tool(*args):
    return subprocess.run([sys.executable, "-m", "reproduce.early_page", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_a_table_is_the_reports_cells():
    md = REPORT.read_text()
    t = early_page.tables(read_data(DATA))
    assert list(t) == ["early", "evaluation", "divergence", "burn-in"]
    games = early_page.games(read_data(DATA))
    assert len(t["early"]) == 2 + len(games) and len(t["divergence"]) == 2 + 2 * len(games)
    # Qbert's early row, cell by cell from the report's own rows ("1: " dropped)
    row = next(r for r in t["early"] if r.startswith("| Qbert |")).split(" | ")
    early = md.split("### Early return\n")[1].splitlines()
    for col, label in ((1, "ABS"), (2, "Vanilla")):
        report_row = next(ln for ln in early if ln.startswith(f"| Qbert | {label} |"))
        assert row[col] == report_row.split(" | ")[2].removeprefix("1: ")
    assert float(row[3]) == round(float(row[1]) - float(row[2]), 1)  # the difference of one run each


def test_check_fill_and_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE.read_text())
    assert tool("--page", page, "--check").returncode == 0
    lines = page.read_text().split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("| Qbert | ABS |"))  # a divergence row
    lines[at] = lines[at].replace("| Qbert | ABS | ", "| Qbert | ABS | 99")
    page.write_text("\n".join(lines))
    res = tool("--page", page, "--check")
    assert res.returncode == 1 and "the tables divergence are not" in res.stdout, res.stdout + res.stderr
    res = tool("--page", page)
    assert res.returncode == 0 and "filled divergence" in res.stdout
    assert page.read_text() == PAGE.read_text()  # filled back to the committed page, text untouched

    page.write_text(PAGE.read_text().replace(early_page.marker("burn-in") + "\n", ""))
    res = tool("--page", page, "--check")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"lacks the marker line {early_page.marker('burn-in')}" in res.stderr
    res = tool("--page", tmp_path / "missing.md")
    assert res.returncode == 2 and "missing.md is not a file" in res.stderr
    res = tool("--results", ROOT / "results" / "mujoco-5m", "--facts")  # another grid's report
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "is not the atari10-early report" in res.stderr


def test_facts_name_where_each_number_comes_from():
    res = tool("--facts")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"{early_page.EARLY_COUNT}: ABS higher early in ")
    assert any(ln.startswith("ABS machine time: ABS ") for ln in lines)
