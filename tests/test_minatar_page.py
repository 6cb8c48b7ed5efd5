"""reproduce/minatar_page.py, the verdict of docs/results-minatar-batches.md: the page holds what the tool writes
from the committed report.json, the tool's words on a grid whose answer is known (tests/test_batch_claims.py writes
it), a page that says otherwise fails --check, and bad input is one line and exit 2."""
import json
import re
import subprocess
import sys

import test_batch_claims as tbc  # its made-up grids (a module: its tests are not collected again here)
from report_helpers import ROOT
from reproduce import minatar_page, report_data
from reproduce.report_data import read_data
from reproduce.stats import compare
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


# ----------------------------------------------------------------------------- the words on grids of known answer
def page_data(values) -> dict:
    """The report.json parts the verdict reads, from test_batch_claims' made-up grid; its values stand for the early
    return and the late variance too (the other secondary outcomes empty)."""
    evaluation = compare(values, list(tbc.PLAN.tasks), list(tbc.LABELS), [("ABS", b) for b in tbc.PLAN.baselines])
    analysis = tbc.bc.batch_analysis(tbc.PLAN, evaluation, tbc.RANDOM, reps=200)
    data = {"batch_claims": report_data.batch_claims(analysis), "evaluation": report_data.compared(evaluation),
            "early": report_data.compared(evaluation), "late": report_data.compared(evaluation), "trend_counts": {},
            "quoted": {"schedule": {}}, "machine_time": {}}
    return json.loads(json.dumps(data, allow_nan=False))  # as report.json holds it


def words(values) -> str:
    return " ".join(minatar_page.verdict(page_data(values)).split())


def test_a_worse_abs_and_no_difference_are_worded_by_the_rule():
    worse = words(tbc.grid({"ABS": -10, "Small": 0, "Vanilla": 0, "Large": 0}))
    assert ("**ABS is worse than Small**: P(ABS > Small) = 0.000 [0.000, 0.000]; ABS is above Small on 0 of 5 games "
            "by the test, below on 5 (Asterix -10.0 [") in worse
    assert "Holm" not in worse.split("**The claims**")[0]  # every run in: no Bonferroni sentence
    # the secondary counts over the 5 complete games: ABS below each label everywhere, so never higher, always lower
    assert ("on 0 of 5 (the paper's Section 5.2: 8 of 10 Atari games). - A higher early return (first 10% of steps) "
            "for ABS than each fixed label (a tie is no win), in games: Small 0 of 5, Vanilla 0 of 5, Large 0 of 5"
            ) in worse
    assert ("A lower late variance (last 10%) for ABS than each fixed label (a tie is no win), in games: Small 5 of "
            "5") in worse
    same = words(tbc.grid({lb: 0 for lb in tbc.LABELS}, spread=5.0))
    assert "**No difference could be seen between ABS and Vanilla**: P(ABS > Vanilla) = " in same
    assert "| Asterix | " in same and "(beats)" not in same and "(is worse than)" not in same


def test_a_grid_with_runs_missing_waits_and_counts_only_the_plans_seeds():
    values = tbc.grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0}, drop={("Seaquest-MinAtar", "Small", 7)})
    values[("Asterix-MinAtar", "Large")][11] = 20.0  # a seed outside the plan: not counted
    text = words(values)
    # a cell with a seed outside the plan is not the plan's cell (batch_claims.py): Asterix waits too
    assert "199 of 200 runs are in; games with every run in: Breakout, Freeway, SpaceInvaders." in text
    assert "the Bonferroni bound until all are in (then Holm's)" in text
    assert "**ABS against Small: not decided yet** (3 of 5 games complete" in text  # Asterix and Seaquest wait
    assert "| Seaquest | waiting |" in text and "IQM" not in text


def test_a_complete_game_shows_its_decision_or_that_it_waits_for_holms():
    others = {(g, lb, 10) for g in tbc.PLAN.tasks if g not in ("Freeway-MinAtar", "Breakout-MinAtar")
              for lb in tbc.LABELS}
    text = words(tbc.close_freeway(tbc.grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0}, drop=others)))
    assert "games with every run in: Breakout, Freeway." in text
    assert ("decided once its runs are in if the bound is below 0.05 or its permutation p is 0.05 or above (no "
            "difference; Holm's p lies between the two), and otherwise waits for Holm's") in text
    assert "| Breakout | +10.000 [9.368, 10.6], p = 1.6e-04 (beats) | +10.0 [" in text  # 15 x 2 / C(20, 10)
    # Small's p (0.008) may yet fall below 0.05 by Holm's; Vanilla's (1.0) cannot: no difference at once
    assert ("| Freeway | +0.490 [0.158, 0.822], p = 0.12 (waits for Holm's) | +0.000 [-0.344, 0.344], p = 1.00 (no "
            "difference) |") in text


def test_an_adjusted_p_near_alpha_shows_its_side_of_alpha():
    assert minatar_page.p_text(9230 / 184756) == "0.04996"  # 0.049958, a p this design can give: not "0.0500"
    assert [minatar_page.p_text(p) for p in (0.0496, 0.0504, 0.05, 0.03, 0.2)] == [
        "0.0496", "0.0504", "0.0500", "0.030", "0.20"]


def test_the_counts_over_games_are_over_the_games_with_every_run_in():
    """Each label's mean over the same seeds: a game where one label has a seed more (as while a game's runs come in)
    is not counted, even where that seed would change the count."""
    values = tbc.grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0})
    for lb in ("Small", "Vanilla", "Large"):  # Asterix: ABS's runs only
        del values[("Asterix-MinAtar", lb)]
    for lb in ("Small", "Vanilla", "Large"):  # Breakout: ABS has a seed fewer, the others are far above it
        values[("Breakout-MinAtar", lb)] = {s: v + 20 for s, v in values[("Breakout-MinAtar", lb)].items()}
    del values[("Breakout-MinAtar", "ABS")][10]
    text = words(values)
    assert ("Over the 3 games with every run in (Freeway, Seaquest, SpaceInvaders): ABS has the highest mean primary "
            "outcome of the 4 labels (a tie counting for each tied label) on 3 of 3 (") in text
    assert "in games: Small 3 of 3, Vanilla 3 of 3, Large 3 of 3 (the paper's Table 2" in text
    none = tbc.grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0}, drop={(g, "ABS", 10) for g in tbc.PLAN.tasks})
    assert "The counts over games (ABS best of the 4 labels, early return, late variance) wait for" in words(none)


def test_games_left_out_of_the_aggregate_are_named_and_all_left_out_decides_by_the_games():
    values = tbc.grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0})
    for s in range(1, 11):
        values[("Freeway-MinAtar", "Vanilla")][s] = tbc.RANDOM["Freeway-MinAtar"] + 0.01 * s
    assert "(Freeway left out: Vanilla within 1 of random), with 95% stratified bootstrap intervals" in words(values)
    for g in tbc.PLAN.tasks:  # Vanilla at random's level everywhere: no aggregate, the per-game part alone
        for lb in tbc.LABELS:
            for s in range(1, 11):
                values[(g, lb)][s] = tbc.RANDOM[g] + 0.01 * s + (0.5 if lb == "Small" else 0.0)
    text = words(values)
    assert ("**ABS is worse than Small**: no P(ABS > Small): every game left out of the aggregate; ABS is above "
            "Small on 0 of 5 games by the test, below on 5") in text
    assert "**No difference could be seen between ABS and Vanilla**: no P(ABS > Vanilla)" in text


def test_the_check_added_during_the_runs_is_worded_by_its_rule():
    """Each decision of the check (batch_claims.zero_analysis) in the page's words, on report.json's data."""
    data = read_data(minatar_page.REPORT)
    z = data["batch_claims"]["zeros"]

    def line(label, decision, no_share=(), diff=-0.2, p=0.008, adjusted=0.016):
        z["tests"][label] |= {"decision": decision, "no_share": list(no_share), "diff": diff, "p": p,
                              "adjusted": adjusted}
        text = " ".join(minatar_page.verdict(data).split())
        return text.split(f"- **{label}'s training" if decision in ("more often", "less often") else
                          f"- {label} against")[1]
    assert line("Small", "less often").startswith(
        " games end at 0 less often than Vanilla's on Freeway**: on seeds 6-10, mean shares Small ")
    assert "(-20.0 points; permutation p = 0.008, Holm's p = 0.016); seeds 1-5, which suggested" in line(
        "Small", "less often")
    # near alpha both p's carry the digits that tell the side of 0.05 (0.0476 is not printed "0.048" beside "0.0476")
    assert "(+7.6 points; permutation p = 0.0476, Holm's p = 0.0476)" in line(
        "ABS", "more often", diff=0.076, p=0.047619, adjusted=0.047619)
    assert line("ABS", "cannot be decided", ["ABS seed 7"]).startswith(
        " Vanilla: cannot be decided: no share for ABS seed 7 (seeds 1-5, which suggested the check and are "
        "not tested: mean shares ABS ")


def test_the_readme_headline_restates_the_complete_games():
    """The README's headline entry for the study names the games whose runs are all in, restates each one's
    differences with Welch's intervals as the page's verdict has them, and says "no difference could be seen" only
    where each of that game's tests decided so."""
    data = read_data(minatar_page.REPORT)
    bc = data["batch_claims"]
    plan = bc["plan"]
    _, done = minatar_page.runs_in(data, plan)
    readme = " ".join((ROOT / "README.md").read_text().split())
    entry = readme.split("- **ABS vs fixed batches on MinAtar**")[1].split(" - **")[0]
    names = ", ".join(map(minatar_page.short, done))
    assert f"{len(done)} of {len(plan['tasks'])} games complete ({names})" in entry, entry
    for g in done:
        tests = [bc["tests"][b][g] for b in plan["baselines"]]
        for b, t in zip(plan["baselines"], tests):
            assert minatar_page.signed(report_data.difference(t["difference"])) in entry, (g, b)
        nothing = all(t["decision"] == "no difference" for t in tests)
        assert (f"On {minatar_page.short(g)} no difference could be seen" in entry) == nothing, g
    # the check added during the runs: the labels whose games end at 0 more often than the reference's, by its test
    z = bc["zeros"]
    more = sorted(lb for lb, t in z["tests"].items() if t["decision"] == "more often")
    said = entry.split(f" training games end at 0 more often than {z['check']['reference']}'s")
    assert (len(said) > 1) == bool(more), entry
    if more:
        assert sorted(re.findall(r"(\w+)'s", said[0].rsplit(";", 1)[-1])) == more, said[0]
