"""Fill the tables of docs/results-atari10-early.md from the report of its runs, and list the numbers its text quotes.

    python -m reproduce.early_page            # rewrite the page's four tables from results/atari10-early/report.md
    python -m reproduce.early_page --check    # exit 1, naming the tables that differ, if they are not the report's
    python -m reproduce.early_page --facts    # print the numbers the page's text quotes, each with where it comes from

Each table of the page sits below a line `<!-- table NAME: reproduce/early_page.py -->`, and the script replaces
that table (the run of lines starting with "|" after the marker) and nothing else. Every cell is a cell of the
report (seed 1's value, its "1: " dropped; a difference is ABS - Vanilla), so a reader can find each number there.
The text around the tables is written by hand; `--facts` prints what it quotes (the counts, the coin probability,
the IQMs with their intervals, the divergence trends, the burn-in shares, the machine time), read from the report,
its figure data (divergence_by_game.csv, batch_size_by_game.csv) and the ABS runs' TensorBoard events, and
tests/test_results.py checks that the page says each of them.
"""
from __future__ import annotations

import csv
import math
import re
import sys
from pathlib import Path

import numpy as np

from .cli import Parser
from .events import load_scalars  # (the report's reader of TensorBoard events)

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("ABS", "Vanilla")
EARLY, EARLY_HNS = "### Early return\n", "### Early return, human-normalised\n"
EVAL, EVAL_HNS = "## Per-game evaluation return at", "## Per-game human-normalised score at"
DIVERGENCE, BURN_IN = "## Divergence over training", "### Burn-in in the early window"
# the names of the facts a test reads back
EARLY_COUNT, EARLY_IQM, LARGEST, HIGHEST_L = ("early count (report, Early return)", "early HNS IQM, games resampled",
                                              "largest early difference", "ABS's highest L (batch_size_by_game.csv)")
WINDOW, BURN_IN_ENDS = 2_000_000, 1_024_000  # the grid's --stop-at-step; W x K x L_min x envs (the page derives it)


def section(md: str, heading: str) -> str:
    """The report's text from `heading` to the next heading of any level."""
    return re.split(r"\n#", md.split(heading, 1)[1], maxsplit=1)[0]


def cell(md: str, heading: str, game: str, label: str, col: int) -> str:
    """Column `col` (1: the game) of the row of `game` and `label` in the table under `heading`, with a one-seed
    cell's "1: " dropped."""
    row = next(ln for ln in md.split(heading, 1)[1].splitlines() if ln.startswith(f"| {game} | {label} |"))
    return row.split(" | ")[col - 1].removeprefix("1: ").rstrip(" |")


def difference(md: str, heading: str, game: str) -> str:
    """The ABS - Vanilla difference of means of `game` in the differences table under `heading`."""
    return cell(md.split(heading, 1)[1].split("Differences,", 1)[1], "| game |", game, "ABS − Vanilla", 3)


def games(md: str) -> list[str]:
    """The games of the report, in its order (those of its early-return table)."""
    return [ln.split(" | ")[0].removeprefix("| ") for ln in section(md, EARLY).splitlines()
            if ln.startswith("| ") and ln.split(" | ")[1] == "ABS"]


def tables(md: str) -> dict[str, list[str]]:
    """The page's four tables (header, rule and rows) for the report `md`."""
    def table(header, rows):
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |"
                                                                                 for r in rows]
    gs = games(md)
    early = [[g, *(x for h in (EARLY, EARLY_HNS) for x in (*(cell(md, h, g, lb, 3) for lb in LABELS),
                                                             difference(md, h, g)))] for g in gs]
    evaluation = [[g, *(cell(md, h, g, lb, 3) for h in (EVAL, EVAL_HNS) for lb in LABELS)] for g in gs]
    divergence = [[g, lb, *(cell(md, DIVERGENCE, g, lb, c) for c in (4, 5, 6, 7, 8))] for g in gs for lb in LABELS]
    burn_in = [[g, *(cell(md, BURN_IN, g, "ABS", c) for c in (5, 6, 7, 8))] for g in gs]
    return {
        "early": table(["game", "ABS", "Vanilla", "ABS - Vanilla", "ABS, HNS", "Vanilla, HNS", "ABS - Vanilla, HNS"],
                       early),
        "evaluation": table(["game", "ABS", "Vanilla", "ABS, HNS", "Vanilla, HNS"], evaluation),
        "divergence": table(["game", "label", "measurements", "first", "first tenth", "last tenth", "rho"],
                            divergence),
        "burn-in": table(["game", "burn-in ends at step", "share in burn-in", "L first leaves L_min at step",
                          "share at L_min"], burn_in)}


def marker(name: str) -> str:
    return f"<!-- table {name}: reproduce/early_page.py -->"


def fill(page: str, md: str) -> tuple[str, list[str]]:
    """The page with each marked table replaced by the report's, and the names of the tables that changed."""
    lines, changed = page.split("\n"), []
    for name, new in tables(md).items():
        at = lines.index(marker(name)) + 1  # a missing marker raises: the page and the script disagree
        end = at
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        if lines[at:end] != new:
            changed.append(name)
            lines[at:end] = new
    return "\n".join(lines), changed


def divergence_by_tenth(results: Path, label: str) -> str:
    """`label`'s divergence over the games: the mean of the points of divergence_by_game.csv's "mean over games"
    curve in each tenth of the window; the first, the highest and the last."""
    tenths = [[] for _ in range(10)]
    with open(results / "divergence_by_game.csv") as f:
        for r in csv.DictReader(f):
            if r["game"] == "mean over games" and r["label"] == label:
                tenths[min(int(float(r["step"]) // (WINDOW // 10)), 9)].append(float(r["mean"]))
    means = [float(np.mean(t)) if t else float("nan") for t in tenths]
    top = int(np.nanargmax(means))
    return (f"{means[0]:.2f} in the first tenth, {means[top]:.2f} at most (tenth {top + 1}) and {means[-1]:.2f} in "
            f"the last")


def run_dir(results: Path, label: str, game: str) -> Path:
    return results / "runs" / "atari10-early" / label / f"{game}-v5__1"


def delta_bar_after_burn_in(results: Path, gs: list[str]) -> str:
    """Per game, the lowest and the highest `adapt/divergence_mean` of its ABS run at or after the step where the
    burn-in ends."""
    said = []
    for g in gs:
        steps, values = load_scalars(run_dir(results, "ABS", g), ("adapt/divergence_mean",))["adapt/divergence_mean"]
        after = [v for s, v in zip(steps, values) if s >= BURN_IN_ENDS]
        said.append(f"{min(after):.2f}-{max(after):.2f} on {g}")
    return ", ".join(said)


def starts_highest(results: Path, gs: list[str]) -> list[str]:
    """The runs whose first divergence measurement is their highest, with their first and last."""
    said = []
    for lb in LABELS:
        for g in gs:
            _, values = load_scalars(run_dir(results, lb, g), ("adapt/divergence",))["adapt/divergence"]
            if values[0] == max(values):
                said.append(f"{lb}'s {g} starts at its highest ({values[0]:.3f}) and ends far lower "
                            f"({values[-1]:.3f})")
    return said


def iqm(md: str, heading: str, label: str) -> str:
    """`label`'s IQM over the games with its games-resampled interval, "x [lo, hi]"."""
    resampled = re.split(r"\n#", md.split(heading, 1)[1])[0].split("games resampled] |")[-1]
    return next(ln for ln in resampled.splitlines() if ln.startswith(f"| {label} |")).split(" | ")[1]


def facts(md: str, results: Path) -> list[tuple[str, str]]:
    """(what, the words the page quotes) for every number its text takes from the runs."""
    gs = games(md)
    # the report's pairwise counts (a tie is no win), not its "best in" counts (where a tie counts for each label)
    count = re.search(r"- ABS vs Vanilla: \*\*ABS higher early in (\d+) of (\d+) games\*\*", md)
    wins, n = int(count.group(1)), int(count.group(2))
    chance = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2 ** n
    out = [(EARLY_COUNT, f"ABS higher early in {wins} of {n} games"),
           ("a coin's chance of as many or more", f"{wins} or more of {n} would come up with probability {chance:.2f}"),
           ("evaluation count (report, Per-game evaluation return; a tie is no win)",
            re.search(r"- ABS vs Vanilla: \*\*(ABS higher in \d+ of \d+ games)\*\*", section(md, EVAL)).group(1))]
    for heading, what in (("#### Early return, human-normalised, across games", EARLY_IQM),
                          ("## Aggregate human-normalised score at", "evaluation HNS IQM, games resampled")):
        out += [(f"{what}, {lb}", f"{lb} {iqm(md, heading, lb)}") for lb in LABELS]
    early_hns = [float(cell(md, EARLY_HNS, g, lb, 3)) for g in gs for lb in LABELS]
    out.append(("early HNS range", f"HNS of {min(early_hns):.3f} to {max(early_hns):.3f}"))
    diffs = {g: float(difference(md, EARLY_HNS, g)) for g in gs}
    top = max(diffs, key=diffs.get)
    out.append((LARGEST, f"at most {diffs[top]:.3f} HNS, on {top}, where it is {difference(md, EARLY, top)} points "
                         f"of score"))
    for lb in LABELS:
        trend = next(ln for ln in section(md, DIVERGENCE).splitlines() if ln.startswith(f"- {lb}: "))
        out += [(f"{lb} divergence trend (report)", trend.removeprefix("- ")),
                (f"{lb} divergence over the games (divergence_by_game.csv)",
                 f"{lb}'s {divergence_by_tenth(results, lb)}")]
    out += [("starts at its highest", s) for s in starts_highest(results, gs)]
    burn = next(ln for ln in section(md, BURN_IN).splitlines() if ln.startswith("- ABS: "))
    share = re.search(r"and (\d+\.\d%) \(runs: ([^)]*)\) ran at L = 16 in all", burn)
    out.append(("ABS's share at L = 16", f"{share.group(1)} of the early window at L = 16 (runs: {share.group(2)})"))
    measured = [int(cell(md, DIVERGENCE, g, "ABS", 4)) for g in gs]
    out.append(("measurements that move L (the W-th on)",
                f"{min(measured) - 9}-{max(measured) - 9} measurements move L in the window"))
    out.append(("delta_bar after the burn-in (ABS events)",
                f"delta_bar stayed high after the burn-in: {delta_bar_after_burn_in(results, gs)}"))
    with open(results / "batch_size_by_game.csv") as f:
        highest = max(float(r["max"]) for r in csv.DictReader(f) if r["tag"] == "adapt/num_steps")
    out.append((HIGHEST_L, f"its highest value in any bin of `batch_size_by_game.csv` is {highest:.0f}"))
    for lb in LABELS:
        time = next(ln for ln in section(md, "## Machine time").splitlines() if ln.startswith(f"| {lb} |"))
        runs, hours, per_run, sps = time.split(" | ")[1:5]
        out.append((f"{lb} machine time", f"{lb} {hours} hours for its {runs} runs ({per_run} hours per run, "
                                          f"{sps} steps/s)"))
    data = section(md, "## Data").splitlines()
    for start in ("- Near-constant evaluation policies", "- Evaluation episodes cut at the step cap"):
        out.append((start.removeprefix("- "), next(ln for ln in data if ln.startswith(start)).split("): ", 1)[1]
                    .split(". ")[0]))
    return out


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0], name="early_page.py")
    p.add_argument("--results", type=Path, default=ROOT / "results" / "atari10-early",
                   help="the published grid: its report.md, figure data and runs/")
    p.add_argument("--report", type=Path, help="the report to fill from (default: RESULTS/report.md)")
    p.add_argument("--page", type=Path, default=ROOT / "docs" / "results-atari10-early.md", help="the page to fill")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is not the report's")
    mode.add_argument("--facts", action="store_true", help="print the numbers the page's text quotes")
    a = p.parse_args(argv)
    report = a.report or a.results / "report.md"
    for path in (report, a.page):
        if not path.is_file():
            p.error(f"{path} is not a file")
    md = report.read_text()
    try:
        listed, new = facts(md, a.results) if a.facts else None, tables(md)
    except (IndexError, KeyError, StopIteration, AttributeError, ValueError, FileNotFoundError) as e:
        p.error(f"{report} is not the atari10-early report this page reads: {type(e).__name__}: {e}")
    if a.facts:
        for what, said in listed:
            print(f"{what}: {said}")
        return 0
    page = a.page.read_text()
    missing = [name for name in new if marker(name) not in page.split("\n")]
    if missing:
        p.error(f"{a.page} lacks the marker line {marker(missing[0])}")
    filled, changed = fill(page, md)
    if a.check:
        if changed:
            print(f"{a.page}: the tables {', '.join(changed)} are not {report}'s; run: python -m reproduce.early_page")
        return 1 if changed else 0
    if changed:
        a.page.write_text(filled)
        print(f"{a.page}: filled {', '.join(changed)}")
    else:
        print(f"{a.page}: every table is the report's already")
    return 0


if __name__ == "__main__":
    sys.exit(main())
