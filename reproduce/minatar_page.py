"""Word the verdict of docs/results-minatar-batches.md from the study's report.json, and check that the page holds it.

    python -m reproduce.minatar_page            # print the page's "## Verdict" section
    python -m reproduce.minatar_page --check    # exit 1 when the page's section is not that text, word for word
    python -m reproduce.minatar_page --write    # replace the page's section with it (after publishing runs)

The verdict follows the rule the page fixed before the runs ("The analysis, fixed before the runs"): per fixed label F,
the claim's decision (batch_claims.py) with P(ABS > F) and the games ABS is above or below F on; per game, ABS - F with
Welch's interval and the Holm-adjusted p; the IQM of the normalised score; then the secondary outcomes, described and
not tested, beside the paper's counts; and the check added during the runs ("A check added during the runs"), by its own
rule. While runs are missing it says how many are in and which claims wait. Every number is the report's own, read by
name from its report.json (report_data.py): this file only words them, and counts the games the report's per-game
differences favour ABS on.
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from .cli import Parser
from .report_data import difference, number, read_data
from .tables import fmt, fmt_p, fmt_points, md_table, welch_text

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "results" / "minatar-batches" / "report.json"
PAGE = ROOT / "docs" / "results-minatar-batches.md"
HEADING = "## Verdict"
# The paper's counts over its 10 Atari games, which the secondary outcomes are set beside: "best" of the batch labels
# (Section 5.2), and Table 2's early and late counts (Section 5.1: ABS against vanilla PQN, which is Vanilla here)
PAPER = {"best": 8, "early": 7, "late": 6, "games": 10}
CLAIM = {"beats": "**{ref} beats {b}**", "is worse than": "**{ref} is worse than {b}**",
         "no difference": "**No difference could be seen between {ref} and {b}**",
         "incomplete": "**{ref} against {b}: not decided yet**"}


def short(game: str) -> str:
    return game.replace("-MinAtar", "")


def interval(x: dict) -> str:
    return f"{fmt(number(x['point']))} [{fmt(number(x['lo']))}, {fmt(number(x['hi']))}]"


def p_text(p: float, alpha: float = 0.05) -> str:
    """An adjusted p as the report prints it, and near the rule's alpha with as many decimals as it takes to read
    which side of alpha it is on (0.0496 is not "0.050", and 0.049958 is not "0.0500")."""
    if not 0.04 <= p < 0.06:
        return fmt_p(p)
    digits = 4 if p == alpha else next((d for d in range(4, 10) if round(p, d) != alpha), 10)
    return f"{p:.{digits}f}"


def signed(d) -> str:
    return f"{'+' if d.diff > 0 else ''}{fmt(d.diff)} {welch_text(d)}"


def runs_in(data: dict, plan: dict) -> tuple[int, list[str]]:
    """(the plan's runs in: its labels, games and seeds; the games whose every label has all the plan's seeds)."""
    seeds = data["evaluation"]["seeds"]
    labels = [plan["reference"], *plan["baselines"]]
    n = sum(int(s) in plan["seeds"] for g in plan["tasks"] for lb in labels
            for s in seeds.get(g, {}).get(lb, {}).get("values", {}))
    done = [g for g in plan["tasks"] if all(sorted(map(int, seeds.get(g, {}).get(lb, {}).get("values", {})))
                                            == plan["seeds"] for lb in labels)]
    return n, done


def claim_lines(bc: dict) -> list[str]:
    """A line per fixed label: the decision by the page's rule and the numbers it rests on."""
    plan, ref, out = bc["plan"], bc["plan"]["reference"], []
    for b in plan["baselines"]:
        c, tests = bc["claims"][b], bc["tests"][b]
        done = [g for g in plan["tasks"] if tests[g]["complete"]]
        head = CLAIM[c["decision"]].format(ref=ref, b=b)
        if c["decision"] == "incomplete":
            out.append(f"- {head} ({len(done)} of {len(plan['tasks'])} games complete; the claim waits for all "
                       f"{len(plan['tasks'])}).")
            continue
        above = [f"{short(g)} {signed(difference(tests[g]['difference']))}" for g in c["better"]]
        below = [f"{short(g)} {signed(difference(tests[g]['difference']))}" for g in c["worse"]]
        poi = (f"P({ref} > {b}) = {interval(c['poi'])}" if c["poi"]["point"] is not None else
               f"no P({ref} > {b}): every game left out of the aggregate")
        out.append(f"- {head}: {poi}; {ref} is above {b} on {len(above)} of "
                   f"{len(plan['tasks'])} games by the test" + (f" ({'; '.join(above)})" if above else "")
                   + f", below on {len(below)}" + (f" ({'; '.join(below)})" if below else "") + ".")
    return out


def pair_table(bc: dict) -> list[str]:
    """Per game and fixed label: ABS - F [Welch 95%], the adjusted p, and the per-game decision."""
    plan = bc["plan"]
    rows = []
    for g in plan["tasks"]:
        cells = []
        for b in plan["baselines"]:
            t = bc["tests"][b][g]
            cells.append("waiting" if not t["complete"] else
                         f"{signed(difference(t['difference']))}, p = {p_text(number(t['adjusted']), plan['alpha'])}"
                         f" ({t['decision']})")
        rows.append([short(g), *cells])
    return [md_table(["game", *[f"{plan['reference']} − {b}" for b in plan["baselines"]]], rows)]


def secondary_lines(data: dict, bc: dict) -> list[str]:
    """The secondary outcomes, described: the counts over games over the games whose runs are all in (each label's
    mean over the same 10 seeds), the per-run ones over every run in."""
    plan = bc["plan"]
    ref = plan["reference"]
    labels = [ref, *plan["baselines"]]
    _, done = runs_in(data, plan)
    out = []
    if done:
        best = sum(ref in data["evaluation"]["best"][g] for g in done)
        out.append(f"- Over the {len(done)} game{'s' * (len(done) != 1)} with every run in "
                   f"({', '.join(map(short, done))}): {ref} has the highest mean primary outcome of the {len(labels)} "
                   f"labels (a tie counting for each tied label) on {best} of {len(done)} (the paper's Section 5.2: "
                   f"{PAPER['best']} of {PAPER['games']} Atari games).")
        for key, what, paper, better in (("early", "a higher early return (first 10% of steps)", PAPER["early"],
                                          lambda d: d > 0),
                                         ("late", "a lower late variance (last 10%)", PAPER["late"], lambda d: d < 0)):
            got = data[key]["differences"]  # a game without the metric (no training returns logged) is not counted
            diffs = {b: [number(got[g][ref][b]["diff"]) for g in done if b in got.get(g, {}).get(ref, {})]
                     for b in plan["baselines"]}
            counts = ", ".join(f"{b} {sum(better(d) for d in ds)} of {len(ds)}" for b, ds in diffs.items())
            out.append(f"- {what.capitalize()} for {ref} than each fixed label (a tie is no win), in games: {counts} "
                       f"(the paper's Table 2, {ref} against PQN, which is Vanilla here: {paper} of "
                       f"{PAPER['games']}).")
    else:
        out.append(f"- The counts over games ({ref} best of the {len(labels)} labels, early return, late variance) "
                   "wait for a game's runs of every label (results/minatar-batches/report.md gives them over the "
                   "runs in so far, each label's mean over its own seeds).")
    for lb, t in data["trend_counts"].items():
        out.append(f"- Divergence ({lb}'s measured delta): its mean over the last tenth of a run's measurements is "
                   f"below the first tenth's in {t['lower']} of {t['both']} runs (the paper's Figure 1: it falls).")
    schedule = [(g, s[ref]) for g, s in data["quoted"]["schedule"].items() if ref in s]
    if schedule:
        def left(g):  # the step L first left L_min, mean over the seeds where it did, and the seeds where it never did
            moved = [b["moved"] for b in data["burn_in"].get(g, {}).get(ref, {}).values()]
            steps = [number(m) for m in moved if m is not None]
            never = len(moved) - len(steps)
            return ((f"at step {sum(steps) / len(steps):,.0f}" if steps else "never")
                    + (f", never in {never} run{'s' * (never != 1)}" if steps and never else ""))
        ends = "; ".join(f"{short(g)} {left(g)}, ending at {fmt(number(s['last']['mean']))}" for g, s in schedule)
        out.append(f"- {ref}'s L (in [16, 64]), mean over its seeds: where it first leaves L_min and where it ends: "
                   f"{ends}.")
    hours = ", ".join(f"{lb} {t['hours']:.1f} h over {t['timed']} run{'s' * (t['timed'] != 1)} ({t['restarted']} "
                      "restarted)" for lb, t in data["machine_time"].items())
    if hours:
        out.append("- Training time (`train_seconds`: the training loop's wall clock summed over a run's sessions, on "
                   "the project's 2-core machine beside other work and pauses that results/minatar-batches/README.md "
                   f"lists, so a rough cost and no ratio of the labels' costs): {hours}; per game, the mean hours of "
                   "a run (its runs):")
        times = data["machine_time"]
        rows = [[short(g), *(f"{t['by_game'][g][1]:.2f} ({t['by_game'][g][0]})" if g in t["by_game"] else "–"
                             for t in (times[lb] for lb in labels if lb in times))]
                for g in plan["tasks"] if any(g in times[lb]["by_game"] for lb in labels if lb in times)]
        out += ["", md_table(["game", *(lb for lb in labels if lb in times)], rows)]
    return out


def verdict(data: dict) -> str:
    """The page's verdict section from report.json's data."""
    bc = data["batch_claims"]
    if bc is None:
        raise ValueError("report.json has no batch analysis: not the MinAtar study's report")
    plan = bc["plan"]
    labels = 1 + len(plan["baselines"])
    total = labels * len(plan["tasks"]) * len(plan["seeds"])
    n, done = runs_in(data, plan)
    md = [HEADING, "", f"Written by `python -m reproduce.minatar_page` from `results/minatar-batches/report.json`, "
          f"by the rule fixed before the runs (below). {n} of {total} runs are in; games with every run in: "
          f"{', '.join(map(short, done)) or 'none yet'}."
          + ("" if bc["holm"] else f" Each test's adjusted p is the Bonferroni bound until all are in (then "
             f"Holm's): a game's test is decided once its runs are in if the bound is below {plan['alpha']:g} or "
             f"its permutation p is {plan['alpha']:g} or above (no difference; Holm's p lies between the two), and "
             "otherwise waits for Holm's; the claims wait for all the tests."),
          "", "**The claims** (primary outcome):", "", *claim_lines(bc), ""]
    if bc["iqm"]:
        iqm = ", ".join(f"{lb} {interval(x)}" for lb, x in bc["iqm"].items())
        left = (f" ({', '.join(map(short, bc['left_out']))} left out: {plan['normaliser']} within "
                f"{plan['min_gap']:g} of random)") if bc["left_out"] else ""
        md += [f"IQM of the normalised score (0 = random, 1 = {plan['normaliser']}'s mean){left}, with 95% "
               f"stratified bootstrap intervals, which decide nothing: {iqm}.", ""]
    md += ["**Per game**, ABS − F in return points, Welch's 95% interval, the adjusted p:", "", *pair_table(bc), "",
           "**Secondary outcomes** (described, not tested):", "", *secondary_lines(data, bc), ""]
    if bc.get("zeros"):
        md += [*zero_lines(bc["zeros"]), ""]
    return "\n".join(wrapped(line) for line in md)


def zero_lines(z: dict) -> list[str]:
    """The check added during the runs (its section below the analysis): each tested label against the reference,
    decided by its rule on the held-out seeds, with the seeds that suggested it beside, described."""
    c = z["check"]
    seeds, seen = f"{c['seeds'][0]}-{c['seeds'][-1]}", f"{c['seen'][0]}-{c['seen'][-1]}"
    ref, game = c["reference"], short(c["game"])

    def mean(label, part):  # the mean share of the seeds of `part` ("seen", "held") in %
        x = z["spread"].get(label, {}).get(part)
        return f"{100 * number(x['mean']):.1f}%" if x else "–"

    def shares(label, part):
        return f"mean shares {label} {mean(label, part)}, {ref} {mean(ref, part)}"
    out = [f"**A check added during the runs** (its section below): on {game}, the share of a run's training games "
           f"that end after step {c['after']:,} with a return of 0, tested on seeds {seeds} alone:", ""]
    for label, t in z["tests"].items():
        seen_text = f"seeds {seen}, which suggested the check and are not tested: {shares(label, 'seen')}"
        if t["decision"] in ("incomplete", "cannot be decided"):
            why = (f"waits for seeds {seeds}" if t["decision"] == "incomplete"
                   else f"cannot be decided: no share for {', '.join(t['no_share'])}")
            out.append(f"- {label} against {ref}: {why} ({seen_text}).")
            continue
        said = {"more often": f"**{label}'s training games end at 0 more often than {ref}'s on {game}**",
                "less often": f"**{label}'s training games end at 0 less often than {ref}'s on {game}**",
                "no difference": f"**no difference could be seen between {label} and {ref}**"}[t["decision"]]
        out.append(f"- {said}: on seeds {seeds}, {shares(label, 'held')} ({fmt_points(100 * number(t['diff']))} "
                   f"points; permutation p = {p_text(number(t['p']), c['alpha'])}, Holm's p = "
                   f"{p_text(number(t['adjusted']), c['alpha'])}); {seen_text}.")
    return out


def wrapped(line: str) -> str:
    """A paragraph or bullet filled to the docs' 120 columns (a bullet's lines indented under its text); headings and
    table rows as they are."""
    if not line or line.startswith(("#", "|")):
        return line
    return textwrap.fill(line, width=120, subsequent_indent="  " if line.startswith("- ") else "",
                         break_long_words=False, break_on_hyphens=False)


def page_section(page: str) -> str | None:
    """The page's text from HEADING up to the next section of the same level (or the end)."""
    if f"\n{HEADING}\n" not in page:
        return None
    rest = page.split(f"\n{HEADING}\n", 1)[1]
    return HEADING + "\n" + rest.split("\n## ", 1)[0].rstrip("\n") + "\n"


def main(argv=None):
    p = Parser(description=__doc__.split("\n\n")[0], name="minatar_page.py")
    p.add_argument("--report", default=str(REPORT), help="the study's report.json")
    p.add_argument("--page", default=str(PAGE), help="the results page --check reads")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true", help="exit 1 when the page's verdict section differs")
    what.add_argument("--write", action="store_true", help="replace the page's verdict section with the tool's")
    a = p.parse_args(argv)
    if not Path(a.report).is_file():
        p.error(f"--report {a.report}: no such file")
    if (a.check or a.write) and not Path(a.page).is_file():
        p.error(f"--page {a.page}: no such file")
    text = verdict(read_data(Path(a.report)))
    if not (a.check or a.write):
        print(text, end="")
        return 0
    page = Path(a.page).read_text()
    said = page_section(page)
    if a.write:
        if said is None:
            p.error(f"--page {a.page}: no {HEADING} section to replace")
        Path(a.page).write_text(page.replace(said, text.rstrip("\n") + "\n", 1))
        print(f"wrote the {HEADING} section of {a.page}")
        return 0
    if said != text.rstrip("\n") + "\n":
        print(f"{a.page}: its {HEADING} section is not what `python -m reproduce.minatar_page` writes; replace it "
              "with that text", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
