"""results/minatar-batches/ and results/minatar-anchor/, published run by run while their grids run
(docs/results-minatar-batches.md, docs/minatar.md): every published run is whole (result, events, log; no
checkpoint), trained at the analysis's commit with the grid's flags, and each committed report is what
reproduce/sweep.py makes again of the published runs (their games and seeds); each README's
hand-written lists of the runs say what their files hold."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "results" / "minatar-batches"
RUNS = HERE / "runs" / "minatar-batches"
ANALYSIS_COMMIT = "7c3c949"  # the commit that fixed the analysis: the runs train at it
LABEL_FLAGS = {"ABS": {"adapt": True}, "Small": {"adapt": False, "num_steps": 16},
               "Vanilla": {"adapt": False, "num_steps": 32, "track_divergence": True},
               "Large": {"adapt": False, "num_steps": 64}}


def published(grid="minatar-batches"):
    runs = ROOT / "results" / grid / "runs" / grid
    return sorted((d.parent.name, *d.name.rsplit("__", 1)) for d in runs.glob("*/*__*") if d.is_dir())


def test_every_published_run_is_whole_and_of_the_preregistered_grid():
    runs = published()
    assert runs, "no run published"
    for label, game, seed in runs:
        d = RUNS / label / f"{game}__{seed}"
        res = json.loads((d / "eval_results.json").read_text())
        assert res["complete"] and res["total_timesteps"] == 10_000_000 and res["eval"]["episodes"] == 100
        a = res["args"]
        assert (a["sticky_action_prob"], a["difficulty_ramping"], a["max_episode_steps"]) == (0.1, True, 0)
        assert {k: a[k] for k in LABEL_FLAGS[label]} == LABEL_FLAGS[label] and a["seed"] == int(seed)
        assert list(d.glob("events.out.tfevents.*")) and not list(d.glob("*.pt"))
        log = (d.parent / "logs" / f"{game}__{seed}.log").read_text()
        assert f"[sweep] source: commit {ANALYSIS_COMMIT}" in log


@pytest.mark.parametrize("grid", ["minatar-batches", "minatar-anchor"])
def test_the_report_is_made_again_from_the_published_runs(tmp_path, grid):
    here, runs = ROOT / "results" / grid, published(grid)
    games = sorted({g for _, g, _ in runs})
    seeds = sorted({int(s) for _, _, s in runs})
    p = subprocess.run([sys.executable, "-m", "reproduce.sweep", "report", grid, "--root",
                        str(here / "runs"), "--games", *games, "--seeds", *map(str, seeds), "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for name in ("report.md", "report.json"):  # the report, and its numbers as data
        committed, fresh = (here / name).read_text(), (tmp_path / name).read_text()
        assert fresh == committed, (f"{name}: regenerate with: python -m reproduce.sweep publish {grid} "
                                    f"--root RUNS --out results/{grid}")


def test_the_side_by_side_with_purejaxql_is_made_again_from_the_published_files(tmp_path):
    """docs/minatar.md's comparison, from the published anchor runs and purejaxql's published JSON files."""
    here = ROOT / "results" / "minatar-anchor"
    jsons = sorted((here / "purejaxql").glob("*.json"))
    if not jsons:
        pytest.skip("no purejaxql run published yet")
    ours = here / "runs" / "minatar-anchor" / "PQN"
    p = subprocess.run([sys.executable, "-m", "reproduce.anchor", "--ours", str(ours), "--purejaxql", *map(str, jsons),
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    for name in ("beside_purejaxql.md", "beside_purejaxql_curves.csv", "beside_purejaxql_finals.csv"):
        assert (tmp_path / name).read_text() == (here / name).read_text(), (
            f"{name}: regenerate with docs/minatar.md's command (python -m reproduce.anchor ...)")


def test_the_minatar_page_states_the_side_by_sides_numbers():
    """docs/minatar.md's account of the comparison quotes the committed beside_purejaxql.md: per game, each side's
    mean with its interval and the difference with Welch's, of the final greedy returns and of the late training
    returns; the README's headline, the final returns' means and Welch's interval."""
    table = (ROOT / "results" / "minatar-anchor" / "beside_purejaxql.md").read_text()
    doc = (ROOT / "docs" / "minatar.md").read_text().split("## Beside purejaxql's own runs")[1].split("\n## ")[0]
    doc = " ".join(doc.split())
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines() if line.startswith("| ")
            and "-MinAtar |" in line]
    finals, late = rows[:len(rows) // 2], rows[len(rows) // 2:]
    assert finals and len(finals) == len(late)
    readme = " ".join((ROOT / "README.md").read_text().split())  # its headline restates the final returns
    for game, _, ours, _, theirs, diff, *_ in finals:
        for said in (ours, theirs, diff):
            assert said in doc, (game, said)
        assert f"{ours.split()[0]} vs {theirs.split()[0]}" in readme and diff.split(" ", 1)[1] in readme, game
    for game, _, ours, _, theirs, diff in late:
        for said in (ours, theirs, diff):
            assert said in doc, (game, "late training return", said)


@pytest.mark.parametrize("label", ["Small", "ABS"])
def test_the_checks_share_of_games_at_zero_is_tensorboards(label):
    """The committed report's share of Freeway's training games ending at 0 after step 1.5M (the check added during
    the runs) against the same share from TensorBoard's own reader of seed 1's events (a run resumed once)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(RUNS / label / "Freeway-MinAtar__1"), size_guidance={"scalars": 0})
    ea.Reload()
    later = [e.value for e in ea.Scalars("charts/episodic_return") if e.step > 1_500_000]
    zeros = json.loads((HERE / "report.json").read_text())["batch_claims"]["zeros"]
    assert zeros["check"]["after"] == 1_500_000 and len(later) > 1000
    share = sum(v == 0 for v in later) / len(later)
    assert zeros["shares"][label]["1"] == pytest.approx(share, abs=1e-12) and share > 0.05


def readme_list(readme, heading):
    """The entries of the hand-written list under `heading` in `readme`, each with its whitespace joined."""
    text = readme.read_text().split(f"\n{heading}\n")[1].split("\n## ")[0]
    return [" ".join(e.split()) for e in ("\n" + text).split("\n- ")[1:]]


def sweep_times(log, what):
    """The times of a run log's `[sweep] <time> start` (what="start") or `exit 0` (what="exit 0") lines."""
    from datetime import datetime
    return [datetime.fromisoformat(t) for t in re.findall(rf"^\[sweep\] (\S+) {what}\b", log, re.M)]


WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def run_entries():
    """results/minatar-batches/README.md's "Runs, in the order they finished", written by hand as each run is
    published: one entry per run, (label, game, seed, its text)."""
    entries = readme_list(HERE / "README.md", "## Runs, in the order they finished")
    heads = [re.match(r"(\w+) (\S+-MinAtar) seed (\d+): ", e) for e in entries]
    assert all(heads), [e[:60] for e, h in zip(entries, heads) if not h]
    return [(*h.groups(), e) for h, e in zip(heads, entries)]


def last_exit(label, game, seed):
    return sweep_times((RUNS / label / "logs" / f"{game}__{seed}.log").read_text(), "exit 0")[-1]


def test_the_hand_written_run_list_states_each_published_runs_own_numbers():
    """Every published run has one entry in the README's list, in the order the runs finished (their logs' last
    exit), and what an entry says of its run is what its files hold: the mean evaluation return and its std to two
    decimals, "none at the cap" only when no game was capped, the number of event files, the training seconds."""
    entries = run_entries()
    assert sorted((lb, g, s) for lb, g, s, _ in entries) == published()
    assert len({(lb, g, s) for lb, g, s, _ in entries}) == len(entries)
    finished = [last_exit(lb, g, s) for lb, g, s, _ in entries]
    assert finished == sorted(finished), "the list is not in the order the runs finished"
    for i, (label, game, seed, text) in enumerate(entries):  # "With it every label has Freeway seeds 1-3."
        for who, name, k in re.findall(r"With it (every label has|[\w, ]+ have) (\w+) seeds 1-(\d+)", text):
            labels = list(LABEL_FLAGS) if who == "every label has" else re.split(r", | and ", who[:-len(" have")])
            done = {(lb, g, int(s)) for lb, g, s, _ in entries[:i + 1]}
            assert (game, seed) == (f"{name}-MinAtar", k) and label in labels, text
            assert all((lb, game, n) in done for lb in labels for n in range(1, int(k) + 1)), text
    for label, game, seed, text in entries:
        d = RUNS / label / f"{game}__{seed}"
        res = json.loads((d / "eval_results.json").read_text())
        ev, where = res["eval"], f"{label} {game} seed {seed}"
        assert text.startswith(f"{label} {game} seed {seed}: {ev['mean']:.2f}"), where
        if m := re.search(r"\(\+- ([\d.]+)", text):
            assert m.group(1) == f"{ev['std']:.2f}", where
        if "none at the cap" in text or "none of its 100 games at the cap" in text:
            assert ev["capped"] == 0, where
        files = len(list(d.glob("events.out.tfevents.*")))
        said = [WORDS[w] for w in re.findall(r"\b(one|two|three|four|five) event files?\b", text)]
        assert said in ([files], []) and (said or files == 1 or "resumed" not in text), where
        secs = re.findall(r"([\d,]+) s of training|`train_seconds` \(([\d,]+) s\)", text)
        for s in ("".join(pair) for pair in secs):
            assert int(s.replace(",", "")) == round(res["train_seconds"]), where


ANCHOR = ROOT / "results" / "minatar-anchor"


def test_the_anchor_run_list_states_each_published_runs_own_numbers():
    """results/minatar-anchor/README.md's "Runs, in the order they finished": every published run has one entry, in
    the order of their logs' last exit, and what an entry says of its run is what its files hold: the mean greedy
    return and its std to two decimals over the number of episodes, how many of them were cut at the cap (and the
    cap), the other seeds' numbers it recalls, the training seconds (round(train_seconds)), the wall seconds (its log's
    last start to its exit: from the resume where the run was resumed), "in one go" or resumed once or twice (its
    starts, its event files), and "all in" only at the last run. Not checked, as no file records them: the pause,
    and what ran beside each run."""
    runs = ANCHOR / "runs" / "minatar-anchor" / "PQN"
    entries = readme_list(ANCHOR / "README.md", "## Runs, in the order they finished")
    heads = [re.match(r"(\w+-MinAtar) seed (\d+): ([\d.]+) \+- ([\d.]+) over (\d+) greedy episodes, ", e)
             for e in entries]
    assert all(heads), [e[:60] for e, h in zip(entries, heads) if not h]
    keys = [(g, s) for g, s, *_ in (h.groups() for h in heads)]
    assert sorted(("PQN", *k) for k in keys) == published("minatar-anchor") and len(set(keys)) == len(keys)
    results = {k: json.loads((runs / f"{k[0]}__{k[1]}" / "eval_results.json").read_text()) for k in keys}
    logs = {k: (runs / "logs" / f"{k[0]}__{k[1]}.log").read_text() for k in keys}
    finished = [sweep_times(logs[k], "exit 0")[-1] for k in keys]
    assert finished == sorted(finished), "the list is not in the order the runs finished"
    for (game, seed), head, text in zip(keys, heads, entries):
        res, where = results[game, seed], f"{game} seed {seed}"
        ev, log, files = res["eval"], logs[game, seed], len(list((runs / f"{game}__{seed}").glob("events.out.*")))
        assert head.group(3, 4, 5) == (f"{ev['mean']:.2f}", f"{ev['std']:.2f}", str(ev["episodes"])), where
        cap = re.match(r"(every one|none|\d+)", text[head.end():]).group(1)  # "85 of them cut at", "none at the cap"
        assert ev["capped"] == (ev["episodes"] if cap == "every one" else 0 if cap == "none" else int(cap)), where
        assert all(int(c.replace(",", "")) == res["args"]["max_episode_steps"]
                   for c in re.findall(r"([\d,]+)-step cap", text)), where
        other = {s: results[game, s]["eval"] for g, s in keys if g == game}  # the seeds it recalls: (seed 1: 70.88, ...
        for s, mean in re.findall(r"seed (\d): ([\d.]+)", text[head.end():]):
            assert mean == f"{other[s]['mean']:.2f}", where
        if m := re.search(r"seeds (\d) and (\d): ([\d.]+) and ([\d.]+), (\d+) each", text):
            a, b, mean_a, mean_b, capped = m.groups()
            assert (mean_a, mean_b) == (f"{other[a]['mean']:.2f}", f"{other[b]['mean']:.2f}"), where
            assert other[a]["capped"] == other[b]["capped"] == int(capped), where
        if m := re.search(r"\(seed (\d): [\d.]+, also (\d+)\)", text):
            assert other[m.group(1)]["capped"] == int(m.group(2)) == ev["capped"], where
        if m := re.search(r"\(as seed (\d)'s; seed (\d)'s none\)", text):
            assert other[m.group(1)]["capped"] == ev["capped"] and other[m.group(2)]["capped"] == 0, where
        starts, exits = sweep_times(log, "start"), sweep_times(log, "exit 0")
        for s in re.findall(r"([\d,]+) s of training", text):
            assert int(s.replace(",", "")) == round(res["train_seconds"]), where
        for s, resume in re.findall(r"([\d,]+) s of wall time( from the resume)?", text):
            assert int(s.replace(",", "")) == (exits[-1] - starts[-1]).total_seconds(), where
            assert bool(resume) == (len(starts) > 1), where
        resumed = len(re.findall(r"^resumed .* at global_step", log, re.M))
        assert files == len(starts) == resumed + 1, where  # an event file per start; each after the first, a resume
        said = re.findall(r"in one go|resumed (once|twice) from its checkpoint", text)  # "in one go": ""
        assert all(resumed == {"": 0, "once": 1, "twice": 2}[w] for w in said), where
    assert [i for i, e in enumerate(entries) if "anchor runs are all in" in e] == [len(keys) - 1] and len(keys) == 6


def test_the_purejaxql_run_list_states_each_published_runs_own_numbers():
    """results/minatar-anchor/README.md's "purejaxql's runs, in the order they finished": every seed of purejaxql's
    published JSON files has one entry (an entry may name several), and what it says of its runs is what the files
    hold: the final greedy test return (the last `test/returned_episode_returns`) to two decimals, the steps, the run
    and compile seconds rounded, and the jax version. The order is not checked: the JSON files hold no times."""
    files = {p.stem: json.loads(p.read_text()) for p in sorted((ANCHOR / "purejaxql").glob("*.json"))}
    published_seeds = sorted((game, seed) for game, d in files.items() for seed in d["seeds"])
    intro = (ANCHOR / "README.md").read_text().split("## purejaxql's runs, in the order they finished\n")[1]
    assert all(f"jax {d['jax']} on the CPU" in intro for d in files.values())
    assert all(dev.startswith("TFRT_CPU") for d in files.values() for dev in d["devices"])
    listed = []
    for text in readme_list(ANCHOR / "README.md", "## purejaxql's runs, in the order they finished"):
        head, rest = text.split(": final greedy test", 1)
        runs = [(f"{g}-MinAtar", s) for g, seeds in re.findall(r"(\w+)-MinAtar seeds? (\d+(?: and \d+)*)", head)
                for s in re.findall(r"\d+", seeds)]
        listed += runs

        def numbers(pattern):  # "88.91, 71.10 and 71.85" or "5,786 s, 5,869 s and 5,925 s": one per run
            found = re.findall(r"\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?", re.search(pattern, rest).group(1))
            assert len(found) == len(runs), (head, pattern, found)
            return [x.replace(",", "") for x in found]
        finals = numbers(r"^s? (.+?);")
        steps = re.search(r"; ([\d,]+) steps (each )?in ", rest).group(1).replace(",", "")
        seconds = numbers(r" steps (?:each )?in (.+?) \(compile")
        compile_ = numbers(r"\(compile (.+?) s\)")
        for (game, seed), final, run_s, comp_s in zip(runs, finals, seconds, compile_):
            r = files[game]["seeds"][seed]
            assert final == f"{r['test/returned_episode_returns'][-1]:.2f}", (game, seed)
            assert int(steps) == r["steps"] == r["env_step"][-1], (game, seed)
            assert (int(run_s), int(comp_s)) == (round(r["run_seconds"]), round(r["compile_seconds"])), (game, seed)
    assert sorted(listed) == published_seeds and len(set(listed)) == len(listed)
