"""reproduce/ as docs/reproducing.md describes it ("The code"): one row of its table per module, every module small
enough to read as one stage (at most 450 lines), and the results pages' tools apart from the statistics."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450


def code_table() -> dict:
    """file -> what the table says it holds."""
    text = (ROOT / "docs" / "reproducing.md").read_text().split("\n## The code\n")[1].split("\n## ")[0]
    rows = [ln for ln in text.splitlines() if ln.startswith("| [`")]
    found = [re.match(r"\| \[`([^`]+)`\]\(\.\./reproduce/([^)]+)\) \| (.+) \|$", ln) for ln in rows]
    assert all(found) and all(m.group(1) == m.group(2) for m in found), rows  # each links its own file
    return {m.group(1): m.group(3) for m in found}


def test_the_code_table_has_a_row_for_every_module_of_reproduce():
    table = code_table()
    modules = sorted(p.name for p in (ROOT / "reproduce").glob("*.py"))
    assert sorted(table) == modules, (f"not in docs/reproducing.md's table: {sorted(set(modules) - set(table))}; "
                                      f"no such module: {sorted(set(table) - set(modules))}")


def test_no_module_of_reproduce_is_over_450_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "reproduce").glob("*.py")}
    assert not {name: n for name, n in sizes.items() if n > MAX_LINES}


# the results pages' tools: they word the numbers of a report's report.json (report_data.py) and compute nothing
PAGE_TOOLS = ("mujoco_page.py", "early_page.py", "minatar_page.py")
# what computing or reading the runs would import: statistics, arrays, the measuring stages, the readers of runs,
# events and figure data
NOT_IN_A_PAGE_TOOL = {"numpy", "scipy", "rliable", "csv", "stats", "measures", "quoted", "events", "runs",
                      "figure_data", "report"}


def test_the_page_tools_compute_nothing_and_read_only_the_reports_data():
    for name in PAGE_TOOLS:
        tree = ast.parse((ROOT / "reproduce" / name).read_text())
        imported = {a.name.split(".")[-1] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[-1] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & NOT_IN_A_PAGE_TOOL, (name, imported & NOT_IN_A_PAGE_TOOL)
        assert "report_data" in imported, name
