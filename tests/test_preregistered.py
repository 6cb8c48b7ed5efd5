"""Tests of the report's "Pre-registered analysis" (measures.preregistered, preregistered_section.py) and its two
figures: on 60 synthetic MuJoCo runs of 5M steps (3 tasks x 2 labels x seeds 1-10), every number of the section is
computed again here by hand from the runs' own values, as docs/results-mujoco-5m.md fixes the analysis: the exact
permutation p over all C(20, 10) splits, Welch's interval, Holm's adjustment once all three tasks are complete and
the Bonferroni bound min(1, 3p) until then, the share of PPO's mean, Hedges' g and the decision sentence."""
import csv
import itertools
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import measures  # noqa: E402
from reproduce import report  # noqa: E402
from reproduce import runs  # noqa: E402
from report_helpers import section, subsection  # noqa: E402

STEPS, EVERY = 5_000_000, 25_000  # the protocol's length; a training game logged every 25,000 steps (201 games)
SEEDS = range(1, 11)
# Each run's evaluation return, PPO+ABS then PPO, seeds 1-10. Walker2d: every PPO+ABS run above every PPO run
# (p = 2 / 184,756); Hopper: PPO+ABS lower, p = 0.0229, so that Holm's adjusted p (2p = 0.046, the second smallest of
# three) is below 0.05 and the Bonferroni bound (3p = 0.069) is not; HalfCheetah: no clear difference.
SCORES = {"Walker2d": ([4210, 3980, 4475, 4105, 3890, 4330, 4020, 4150, 4390, 3950],
                       [2950, 3310, 2720, 3105, 3460, 2880, 3015, 3240, 2790, 3390]),
          "Hopper": ([2094, 2302, 1476, 1448, 1628, 1809, 1542, 1899, 1921, 2330],
                     [2267, 2242, 2076, 2080, 2331, 1926, 2445, 2378, 1874, 1911]),
          "HalfCheetah": ([3842, 3943, 2596, 2665, 3237, 2796, 3462, 2405, 2337, 2101],
                          [3491, 2501, 3572, 3612, 3359, 3352, 2620, 3434, 2269, 3259])}
LABELS = ("PPO+ABS", "PPO")


def curve(task: str, label: str, seed: int) -> np.ndarray:
    """A run's training returns, one game every EVERY steps: integers (exact in TensorBoard's float32) rising to the
    run's evaluation return, with noise of its own."""
    rng = np.random.default_rng([list(SCORES).index(task), LABELS.index(label), seed])
    k = np.arange(STEPS // EVERY + 1)
    end = SCORES[task][LABELS.index(label)][seed - 1]
    return np.round(end * np.minimum(1, k / 80) + rng.integers(-300, 300, len(k))).astype(float)


def write_mujoco_run(run_dir: Path, task: str, label: str, seed: int):
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    w = SummaryWriter(log_dir=str(run_dir))
    for k, value in enumerate(curve(task, label, seed)):
        w.add_scalar("charts/episodic_return", value, k * EVERY)
    w.close()
    score = float(SCORES[task][LABELS.index(label)][seed - 1])
    (run_dir / "eval_results.json").write_text(json.dumps({
        "algo": "abs_ppo_mujoco", "env_id": f"{task}-v4", "seed": seed, "run_name": run_dir.name,
        "global_step": STEPS, "total_timesteps": STEPS, "train_seconds": 1.0,
        "eval": {"episodes": 2, "returns": [score, score], "mean": score},
        "args": {"env_id": f"{task}-v4", "seed": seed, "adapt": label == "PPO+ABS"}}))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("mujoco-5m")
    for task in SCORES:
        for label in LABELS:
            for seed in SEEDS:
                write_mujoco_run(root / label / f"{task}-v4__{seed}", task, label, seed)
    return root


def make_report(root: Path, out: Path, *flags) -> str:
    assert report.main(["--runs", *(f"{lb}={root / lb}" for lb in LABELS), "--out", str(out), "--reps", "20",
                        *flags]) == 0
    return (out / "report.md").read_text()


# ----------------------------------------------------------------------------- the numbers, by hand
def one(x: float) -> str:  # the report's number format: one decimal from 10 in size, three below
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"


def p_text(p: float) -> str:
    return f"{p:.2f}" if p >= 0.095 else (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")


def by_hand(a, b) -> dict:
    """A - B of the means, Welch's 95% interval and the two-sided exact permutation p over every split."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    diff = a.mean() - b.mean()
    half = scipy.stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    pooled = np.concatenate([a, b])
    first = np.array(list(itertools.combinations(range(len(pooled)), len(a))))
    sums = pooled[first].sum(axis=1)
    splits = sums / len(a) - (pooled.sum() - sums) / len(b)
    p = np.mean(np.abs(splits) >= abs(diff) - 1e-9 * max(1, abs(diff)))
    assert len(splits) == 184_756 if len(a) == len(b) == 10 else True
    return {"diff": diff, "lo": diff - half, "hi": diff + half, "p": p}


def hedges(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    s = np.sqrt(((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2))
    return (a.mean() - b.mean()) / s * (1 - 3 / (4 * (len(a) + len(b)) - 9))


def holm_by_hand(ps: dict) -> dict:
    """Holm's step-down: sorted ascending, the i-th smallest's adjusted p is the largest (m - j + 1) p_(j), j <= i."""
    out, running = {}, 0.0
    for j, (task, p) in enumerate(sorted(ps.items(), key=lambda kv: kv[1])):
        running = max(running, (len(ps) - j) * p)
        out[task] = min(1.0, running)
    return out


def outcomes(task: str, label: str, seeds) -> dict:
    """The secondary outcomes of each run, from its training returns (the page's definitions)."""
    out = {name: [] for name in ("training return", "whole-run return", "early return", "late variance")}
    steps = np.arange(STEPS // EVERY + 1) * EVERY
    for seed in seeds:
        r = curve(task, label, seed)
        out["training return"].append(r[-100:].mean())  # the last 100 training games
        tenth = np.minimum(steps // (STEPS // 10), 9)  # (the last step belongs to the last tenth)
        out["whole-run return"].append(np.mean([r[tenth == i].mean() for i in range(10)]))
        out["early return"].append(r[steps <= STEPS / 10].mean())
        out["late variance"].append(r[steps >= 0.9 * STEPS].var())  # population variance
    return out


def expected_rows(tasks: dict, holm: bool) -> tuple[dict, dict, dict]:
    """The main table's row and the decision sentence per task (tasks: task -> (PPO+ABS values, PPO values), the
    complete ones), and the adjusted p."""
    stats = {t: by_hand(a, b) for t, (a, b) in tasks.items()}
    adjusted = holm_by_hand({t: s["p"] for t, s in stats.items()}) if holm else \
        {t: min(1.0, 3 * s["p"]) for t, s in stats.items()}
    rows, sentences = {}, {}
    for t, (a, b) in tasks.items():
        s = stats[t]
        ci = f"[{one(s['lo'])}, {one(s['hi'])}]"
        if adjusted[t] < 0.05:
            verb = "raises" if s["diff"] > 0 else "lowers"
            sentences[t] = f"- {t}: PPO+ABS {verb} {t}'s 5M evaluation return by {one(s['diff'])} {ci}."
        else:
            verb = "unresolved"
            sentences[t] = f"- {t}: no difference was resolved; a difference outside {ci} is unlikely."
        rows[t] = (f"| {t} | 10 vs 10 | {one(s['diff'])} | {ci} | {p_text(s['p'])} | {p_text(adjusted[t])} | "
                   f"{100 * s['diff'] / abs(np.mean(b)):.1f}% | {hedges(a, b):.2f} | {verb} |")
    return rows, sentences, adjusted


def secondary_rows(tasks) -> list[str]:
    rows = []
    for t in tasks:
        a, b = outcomes(t, "PPO+ABS", SEEDS), outcomes(t, "PPO", SEEDS)
        for name in a:
            s = by_hand(a[name], b[name])
            rows.append(f"| {t} | {name} | 10 vs 10 | {one(s['diff'])} | [{one(s['lo'])}, {one(s['hi'])}] | "
                        f"{p_text(s['p'])} |")
    return rows


# ----------------------------------------------------------------------------- the tests
def test_all_three_tasks_complete_holm_adjusts_and_decides(grid, tmp_path):
    md = make_report(grid, tmp_path / "o", "--benchmark", "mujoco")
    text = section(md, "Pre-registered analysis")
    rows, sentences, adjusted = expected_rows({t: SCORES[t] for t in ("Walker2d", "Hopper", "HalfCheetah")}, True)
    table = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| task")]
    assert table[:3] == [rows[t] for t in ("Walker2d", "Hopper", "HalfCheetah")]  # the page's order of the tasks
    # Holm: Walker2d 3p, Hopper 2p (< 0.05: decided), HalfCheetah p; the Bonferroni bound would not decide Hopper
    assert adjusted["Hopper"] < 0.05 <= 3 * by_hand(*SCORES["Hopper"])["p"]
    assert "| lowers |" in rows["Hopper"] and "| raises |" in rows["Walker2d"] and "unresolved" in rows["HalfCheetah"]
    assert "Adjusted p: Holm's, over the 3 tasks (all complete)." in text
    decisions = text.split("Decision, per task:\n")[1].split("\n\n")[0].splitlines()
    assert decisions == [sentences[t] for t in ("Walker2d", "Hopper", "HalfCheetah")]
    secondary = subsection(md, "Secondary outcomes (no correction)")
    assert [ln for ln in secondary.splitlines() if ln.startswith("| ") and not ln.startswith("| task")] == \
        secondary_rows(("Walker2d", "Hopper", "HalfCheetah"))
    # the secondary outcomes are the report's own: its tables' differences, the same numbers
    final = section(md, "Final training return").split("Differences,")[1]
    walker = next(ln for ln in secondary.splitlines() if ln.startswith("| Walker2d | training return |"))
    assert f"| Walker2d | PPO+ABS − PPO | {walker.split(' | ')[3]} | {walker.split(' | ')[4]} |" in final
    # its figures: each seed's evaluation return with its label's mean and Student-t interval, and the learning
    # curves with a Student-t band over the seeds per step bin
    with open(tmp_path / "o" / "evaluation_by_seed.csv") as f:
        dots = list(csv.DictReader(f))
    assert len(dots) == 60
    for task, (a, b) in SCORES.items():
        for label, x in zip(LABELS, (a, b)):
            mine = [r for r in dots if (r["game"], r["label"]) == (task, label)]
            assert [(int(r["seed"]), float(r["evaluation_return"])) for r in mine] == list(zip(SEEDS, map(float, x)))
            half = scipy.stats.t.ppf(0.975, 9) * np.std(x, ddof=1) / np.sqrt(10)
            for r in mine:
                assert [float(r[c]) for c in ("mean", "ci_low", "ci_high")] == pytest.approx(
                    [np.mean(x), np.mean(x) - half, np.mean(x) + half])
    with open(tmp_path / "o" / "learning_curves_ci.csv") as f:
        bands = [r for r in csv.DictReader(f) if (r["game"], r["label"]) == ("Hopper", "PPO")]
    assert len(bands) == 50  # bins of 100,000 steps: games k = 4i .. 4i + 3 (and the last step in the last bin)
    k = np.arange(STEPS // EVERY + 1)
    for i, r in enumerate(bands):
        per_run = [curve("Hopper", "PPO", s)[np.minimum(k // 4, 49) == i].mean() for s in SEEDS]
        half = scipy.stats.t.ppf(0.975, 9) * np.std(per_run, ddof=1) / np.sqrt(10)
        assert float(r["step"]) == pytest.approx(50_000 + 100_000 * i) and r["n_runs"] == "10"
        assert [float(r[c]) for c in ("mean", "ci_low", "ci_high")] == pytest.approx(
            [np.mean(per_run), np.mean(per_run) - half, np.mean(per_run) + half])
    assert ("- `evaluation_by_seed.png` (data: `evaluation_by_seed.csv`): each seed's evaluation return per task and "
            "label") in section(md, "Figures")


def test_until_all_three_are_complete_the_bonferroni_bound_and_an_incomplete_task_is_not_tested(grid, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(grid, root)
    shutil.rmtree(root / "PPO" / "HalfCheetah-v4__10")  # HalfCheetah: 10 vs 9 runs
    md = make_report(root, tmp_path / "o", "--benchmark", "mujoco")
    text = section(md, "Pre-registered analysis")
    rows, sentences, adjusted = expected_rows({t: SCORES[t] for t in ("Walker2d", "Hopper")}, False)
    table = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| task")]
    assert table[:3] == [rows["Walker2d"], rows["Hopper"],
                         "| HalfCheetah | 10 vs 9 | – | – | – | – | – | – | incomplete |"]
    assert adjusted["Hopper"] >= 0.05 and "unresolved" in rows["Hopper"]  # 3p: Hopper is not decided without Holm
    assert "Adjusted p: 2 of the 3 tasks complete, so each complete task's is the Bonferroni bound min(1, 3p); " \
        "Holm's once all 3 are." in text
    decisions = text.split("Decision, per task:\n")[1].split("\n\n")[0].splitlines()
    assert decisions == [sentences["Walker2d"], sentences["Hopper"],
                         "- HalfCheetah: incomplete: 10 vs 9 runs, finished seeds PPO+ABS: 1, 2, 3, 4, 5, 6, 7, 8, 9, "
                         "10; PPO: 1, 2, 3, 4, 5, 6, 7, 8, 9; no test."]
    secondary = subsection(md, "Secondary outcomes (no correction)")
    assert [ln for ln in secondary.splitlines() if ln.startswith("| ") and not ln.startswith("| task")] == \
        secondary_rows(("Walker2d", "Hopper"))
    # seeds 1-3 alone (today's grid): every task incomplete, nothing tested, no secondary outcome
    md = make_report(grid, tmp_path / "three", "--benchmark", "mujoco", "--seeds", "1", "2", "3")
    text = section(md, "Pre-registered analysis")
    assert [ln for ln in text.splitlines() if ln.startswith("| ") and ln.endswith(" | incomplete |")] == \
        [f"| {t} | 3 vs 3 | – | – | – | – | – | – | incomplete |" for t in ("Walker2d", "Hopper", "HalfCheetah")]
    assert "Adjusted p: no task is complete" in text and "No task is complete: none is reported." in text


def test_the_analysis_is_only_for_the_runs_it_was_fixed_for(grid, tmp_path):
    """The MuJoCo benchmark, PPO+ABS against PPO, every run complete at 5M steps: other reports (another length,
    benchmark or pair, a prefix run) have no such section and no figure of it."""
    data, games, _ = report.collect({lb: grid / lb for lb in LABELS}, "mujoco", {})
    plan, pairs = measures.MUJOCO_5M, [("PPO+ABS", "PPO")]
    assert measures.is_preregistered(plan, "mujoco", data, games, pairs)
    assert not measures.is_preregistered(plan, None, data, games, pairs)
    assert not measures.is_preregistered(plan, "mujoco", data, games, [("PPO", "PPO+ABS")])
    one_run = data["PPO"]["Hopper"][1]
    for change in ({"total_timesteps": 1_000_000}, {"complete": False}):
        for key, value in change.items():
            old, data["PPO"]["Hopper"][1] = one_run, runs.Run(**{**one_run.__dict__, key: value})
            assert not measures.is_preregistered(plan, "mujoco", data, games, pairs)
            data["PPO"]["Hopper"][1] = old
    md = make_report(grid, tmp_path / "o", "--games", "Hopper")  # no --benchmark
    assert "## Pre-registered analysis" not in md and not (tmp_path / "o" / "evaluation_by_seed.csv").exists()
