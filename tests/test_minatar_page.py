"""reproduce/minatar_page.py, the verdict of docs/results-minatar-batches.md: the page holds what the tool writes
from the committed report.json, the tool's words on a grid whose answer is known (tests/test_batch_claims.py writes
it), a page that says otherwise fails --check, and bad input is one line and exit 2."""
import subprocess
import sys

from report_helpers import ROOT
from reproduce import minatar_page
from reproduce.report_data import read_data
from reproduce_cli import tool_env


def page_tool(*args):
    return subprocess.run([sys.executable, "-m", "reproduce.minatar_page", *map(str, args)], cwd=ROOT,
                          env=tool_env(), capture_output=True, text=True, timeout=60)


def test_the_page_holds_the_verdict_of_the_committed_report():
    p = page_tool("--check")
    assert p.returncode == 0, p.stderr + "\n" + page_tool().stdout


def test_a_page_that_says_another_number_fails_the_check(tmp_path):
    page = minatar_page.PAGE.read_text()
    said = minatar_page.page_section(page)
    other = said.replace(" h over", "1 h over", 1)  # a training time one digit longer: "1.2 h" -> "1.21 h"
    assert other != said
    (tmp_path / "page.md").write_text(page.replace(said, other))
    p = page_tool("--check", "--page", tmp_path / "page.md")
    assert p.returncode == 1 and "## Verdict" in p.stderr
    (tmp_path / "none.md").write_text(page.replace("\n## Verdict\n", "\n## Something else\n"))
    assert page_tool("--check", "--page", tmp_path / "none.md").returncode == 1


def test_the_words_track_the_counts_of_the_committed_report():
    data = read_data(minatar_page.REPORT)
    text = minatar_page.verdict(data)
    n = sum(len(by_label["values"]) for by_game in data["evaluation"]["seeds"].values()
            for by_label in by_game.values())
    assert f"{n} of 200 runs are in" in text.replace("\n", " ")
    for b in ("Small", "Vanilla", "Large"):
        decision = data["batch_claims"]["claims"][b]["decision"]
        assert minatar_page.CLAIM[decision].format(ref="ABS", b=b) in text


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    p = page_tool("--report", tmp_path / "missing.json")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--report" in p.stderr


def test_write_puts_the_verdict_back_into_a_page_that_says_otherwise(tmp_path):
    page = minatar_page.PAGE.read_text()
    said = minatar_page.page_section(page)
    (tmp_path / "page.md").write_text(page.replace(said, "## Verdict\n\nABS wins everything.\n"))
    assert page_tool("--write", "--page", tmp_path / "page.md").returncode == 0
    assert (tmp_path / "page.md").read_text() == page
