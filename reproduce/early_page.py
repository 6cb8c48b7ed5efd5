"""Fill the tables of docs/results-atari10-early.md from the report of its runs, and list the numbers its text quotes.

    python -m reproduce.early_page            # rewrite the page's four tables from results/atari10-early/report.json
    python -m reproduce.early_page --check    # exit 1, naming the tables that differ, if they are not the report's
    python -m reproduce.early_page --facts    # print the numbers the page's text quotes, each with where it comes from

Each table of the page sits below a line `<!-- table NAME: reproduce/early_page.py -->`, and the script replaces
that table (the run of lines starting with "|" after the marker) and nothing else. Every cell is a number of the
report, in its format (seed 1's value; a difference is ABS - Vanilla), so a reader can find each number there.
The text around the tables is written by hand; `--facts` prints what it quotes (the counts, the coin probability,
the IQMs with their intervals, the divergence trends, the burn-in shares, the machine time), and
tests/test_results.py checks that the page says each of them. Every number is the report's own, measured with it and
read by name from its report.json (report_data.py; quoted.py measures what the report's tables do not state): this
file only words them.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .cli import Parser
from .report_data import number, read_data
from .tables import fmt

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("ABS", "Vanilla")
# the names of the facts a test reads back
EARLY_COUNT, EARLY_IQM, LARGEST, HIGHEST_L = ("early count (report, Early return)", "early HNS IQM, games resampled",
                                              "largest early difference", "ABS's highest L (the report's figure data)")


def one(data: dict, metric: str, game: str, label: str) -> float:
    """The value of the one run of `label` on `game` (the grid's one seed)."""
    (value,) = data[metric]["seeds"][game][label]["values"].values()
    return number(value)


def only(by_seed: dict) -> dict:
    """The one seed's entry of {seed: ...}."""
    (value,) = by_seed.values()
    return value


def difference(data: dict, metric: str, game: str) -> float:
    """The ABS - Vanilla difference of the means of `metric` on `game`."""
    return number(data[metric]["differences"][game]["ABS"]["Vanilla"]["diff"])


def games(data: dict) -> list[str]:
    """The games of the report, in its order, that ABS has an early return on (ValueError: none)."""
    gs = [g for g in data["games"] if "ABS" in data["early"]["seeds"].get(g, {})]
    if not gs:
        raise ValueError("no game has an early return of ABS")
    return gs


def three(x) -> str:
    """The report's divergence format: three significant digits, – for none."""
    return "–" if x is None else f"{x:#.3g}"


def steps(x) -> str:
    return "never" if x is None else f"{x:,.0f}"


def tables(data: dict) -> dict[str, list[str]]:
    """The page's four tables (header, rule and rows) for the report's data."""
    def table(header, rows):
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |"
                                                                                 for r in rows]
    gs = games(data)
    early = [[g, *(x for m in ("early", "early_hns") for x in (*(fmt(one(data, m, g, lb)) for lb in LABELS),
                                                               fmt(difference(data, m, g))))] for g in gs]
    evaluation = [[g, *(fmt(one(data, m, g, lb)) for m in ("evaluation", "hns") for lb in LABELS)] for g in gs]
    trends = {(g, lb): only(data["trends"][g][lb]) for g in gs for lb in LABELS}
    divergence = [[g, lb, str(t["n"]), three(t["first"]), three(t["early"]), three(t["late"]),
                   "–" if t["rho"] is None else f"{t['rho']:+.2f}"] for (g, lb), t in trends.items()]
    burn = {g: only(data["burn_in"][g]["ABS"]) for g in gs}
    burn_in = [[g, steps(b["end"]), f"{100 * b['share']:.1f}%", steps(b["moved"]), f"{100 * b['at_L_min']:.1f}%"]
               for g, b in burn.items()]
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


def fill(page: str, data: dict) -> tuple[str, list[str]]:
    """The page with each marked table replaced by the report's, and the names of the tables that changed."""
    lines, changed = page.split("\n"), []
    for name, new in tables(data).items():
        at = lines.index(marker(name)) + 1  # a missing marker raises: the page and the script disagree
        end = at
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        if lines[at:end] != new:
            changed.append(name)
            lines[at:end] = new
    return "\n".join(lines), changed


def span(x: dict | None, form: str) -> str:
    """The report's machine-time range: "lo–hi", one number when both read the same, – for none."""
    if x is None:
        return "–"
    lo, hi = form.format(x["lowest"]), form.format(x["highest"])
    return lo if lo == hi else f"{lo}–{hi}"


def iqm(aggregates: dict, label: str) -> str:
    """`label`'s IQM over the games with its games-resampled interval, "x [lo, hi]"."""
    a = aggregates[label]["IQM"]
    return f"{fmt(a['point'])} [{fmt(a['games_lo'])}, {fmt(a['games_hi'])}]"


def trend(c: dict) -> str:
    """A label's divergence trend (measures.TrendCount), as the report words it."""
    return (f"lower in the last tenth than in the first in {c['lower']} of {c['both']} runs; ρ < 0 in "
            f"{c['falling']} of {c['ranked']}" + (f" (median ρ {c['median_rho']:+.2f})." if c["ranked"] else "."))


def starts_highest(data: dict) -> list[str]:
    """The runs whose first divergence measurement is their highest, with their first and last."""
    return [f"{r['label']}'s {r['game']} starts at its highest ({r['first']:.3f}) and ends far lower "
            f"({r['last']:.3f})" for r in data["quoted"]["first_highest"]]


def facts(data: dict) -> list[tuple[str, str]]:
    """(what, the words the page quotes) for every number its text takes from the report's data."""
    gs, q = games(data), data["quoted"]
    count = q["early_count"]["ABS"]["Vanilla"]
    wins, n = count["wins"], count["games"]
    evaluation = data["evaluation"]["wins"]["ABS"]["Vanilla"]
    out = [(EARLY_COUNT, f"ABS higher early in {wins} of {n} games"),
           ("a coin's chance of as many or more", f"{wins} or more of {n} would come up with probability "
                                                  f"{count['p']:.2f}"),
           ("evaluation count (report, Per-game evaluation return; a tie is no win)",
            f"ABS higher in {evaluation[0]} of {evaluation[1]} games")]
    for key, what in (("early_aggregates", EARLY_IQM), ("aggregates", "evaluation HNS IQM, games resampled")):
        out += [(f"{what}, {lb}", f"{lb} {iqm(data[key], lb)}") for lb in LABELS]
    low, high = (q["early_hns"]["range"][k] for k in ("lowest", "highest"))
    out.append(("early HNS range", f"HNS of {low:.3f} to {high:.3f}"))
    top = q["early_hns"]["largest"]["ABS"]["Vanilla"]
    out.append((LARGEST, f"at most {top['hns']:.3f} HNS, on {top['game']}, where it is {fmt(top['raw'])} points of "
                         "score"))
    for lb in LABELS:
        t = q["divergence_tenths"][lb]
        means, at = t["tenths"], t["highest"]
        out += [(f"{lb} divergence trend (report)", f"{lb}: {trend(data['trend_counts'][lb])}"),
                (f"{lb} divergence over the games (the report's figure data)",
                 f"{lb}'s {means[0]:.2f} in the first tenth, {means[at]:.2f} at most (tenth {at + 1}) and "
                 f"{means[-1]:.2f} in the last")]
    out += [("starts at its highest", s) for s in starts_highest(data)]
    burn = data["burn_in_summary"]["ABS"]
    L = ", ".join(f"{x:g}" for x in burn["L_min"])
    share = burn["at_L_min"]
    out.append((f"ABS's share at L = {L}", f"{100 * share['mean']:.1f}% of the early window at L = {L} (runs: "
                                          f"{100 * share['lowest']:.1f}-{100 * share['highest']:.1f}%)"))
    after = {g: only(q["after_burn_in"][g]["ABS"]) for g in gs}
    moving = [a["moving"] for a in after.values()]
    out.append(("measurements that move L (the W-th on)",
                f"{min(moving)}-{max(moving)} measurements move L in the window"))
    out.append(("delta_bar after the burn-in (ABS events)", "delta_bar stayed high after the burn-in: " + ", ".join(
        f"{a['delta_bar']['lowest']:.2f}-{a['delta_bar']['highest']:.2f} on {g}" for g, a in after.items())))
    out.append((HIGHEST_L, f"its highest value in any bin of `batch_size_by_game.csv` is {q['highest_size']:.0f}"))
    for lb in LABELS:
        t = data["machine_time"][lb]
        out.append((f"{lb} machine time", f"{lb} {t['hours']:.1f} hours for its {t['runs']} runs "
                                          f"({span(t['per_run'], '{:.1f}')} hours per run, "
                                          f"{span(t['sps'], '{:,.0f}')} steps/s)"))
    constant = ", ".join(f"{r['label']} {r['game']} seed {r['seed']}: action {r['action']} on {r['share']:.1%}"
                         for r in data["constant"])
    capped = ", ".join(f"{r['label']} {r['game']} seed {r['seed']}: {r['capped']} of {r['episodes']}"
                       for r in data["capped"]["runs"])
    out += [("Near-constant evaluation policies", constant), ("Evaluation episodes cut at the step cap", capped)]
    return out


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0], name="early_page.py")
    p.add_argument("--results", type=Path, default=ROOT / "results" / "atari10-early",
                   help="the published grid: its report.json (the report's numbers as data)")
    p.add_argument("--report", type=Path, help="the report's data to fill from (default: RESULTS/report.json)")
    p.add_argument("--page", type=Path, default=ROOT / "docs" / "results-atari10-early.md", help="the page to fill")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is not the report's")
    mode.add_argument("--facts", action="store_true", help="print the numbers the page's text quotes")
    a = p.parse_args(argv)
    report = a.report or a.results / "report.json"
    for path in (report, a.page):
        if not path.is_file():
            p.error(f"{path} is not a file")
    try:
        data = read_data(report)
        listed, new = facts(data) if a.facts else None, tables(data)
    except (KeyError, TypeError, ValueError) as e:
        p.error(f"{report} is not the atari10-early report this page reads: {type(e).__name__}: {e}")
    if a.facts:
        for what, said in listed:
            print(f"{what}: {said}")
        return 0
    page = a.page.read_text()
    missing = [name for name in new if marker(name) not in page.split("\n")]
    if missing:
        p.error(f"{a.page} lacks the marker line {marker(missing[0])}")
    filled, changed = fill(page, data)
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
