"""reproduce/divergence_study.py: its math against hand values and its command-line checks; the published study
is regenerated from the committed runs in test_results.py."""
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import divergence_study as study  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402


def test_rollout_lengths_are_the_steps_between_iterations():
    # iterations of 1024, 1024, 1664 and 2240 steps: logged after each at the global step
    assert study.rollout_lengths([1024, 2048, 3712, 5952]).tolist() == [1024, 1024, 1664, 2240]
    assert study.rollout_lengths([2048]).tolist() == [2048]


def test_length_at_picks_the_iteration_running_at_that_fraction():
    steps, lengths = np.array([1000, 2000, 4000, 8000]), np.array([1000, 1000, 2000, 4000])
    assert study.length_at(steps, lengths, 0.25) == 1000  # step 2000 ends the second iteration
    assert study.length_at(steps, lengths, 0.26) == 2000  # step 2080 is inside the third
    assert study.length_at(steps, lengths, 0.5) == 2000
    assert study.length_at(steps, lengths, 0.51) == 4000
    assert study.length_at(steps, lengths, 1.0) == 4000


def test_ratio_stats_by_hand():
    kl = [0.01, 0.02, 0.04, 0.0, 0.03]  # the zero (a policy that did not move) is left out of the ratio
    ess = [0.02, 0.03, 0.1, 0.0, 0.06]  # ratios 2, 1.5, 2.5, 2
    q = study.ratio_stats(kl, ess)
    assert q["n"] == 4
    assert q["median"] == pytest.approx(2.0)
    assert q["q10"] == pytest.approx(1.5 + 0.3 * 0.5)  # numpy's linear quantile of [1.5, 2, 2, 2.5] at 0.1
    assert q["q90"] == pytest.approx(2.0 + 0.7 * 0.5)
    assert q["kl"] == pytest.approx(0.025) and q["ess"] == pytest.approx(0.045)
    assert q["corr"] == pytest.approx(np.corrcoef([0.01, 0.02, 0.04, 0.03], [0.02, 0.03, 0.1, 0.06])[0, 1])
    exact = study.ratio_stats([0.01, 0.02, 0.03], [0.02, 0.04, 0.06])
    assert exact["median"] == pytest.approx(2.0) and exact["corr"] == pytest.approx(1.0)
    none = study.ratio_stats([0.0, np.nan], [0.0, 0.1])
    assert none["n"] == 0 and np.isnan(none["median"])


@pytest.mark.parametrize("argv, message", [
    (["--runs", "results"], "expected distinct LABEL=DIR"),
    (["--runs", "A=results", "A=results"], "expected distinct LABEL=DIR"),
    (["--runs", "A=no/such/dir"], "is not a directory"),
    (["--runs", "A="], "expected distinct LABEL=DIR entries, got 'A='"),
    (["--runs", "A=results", "--bins", "0"], "--bins and --last-games must be positive"),
])
def test_bad_arguments_name_the_flag(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    with pytest.raises(SystemExit) as e:
        study.parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_no_runs_found_exits_1(tmp_path, capsys):
    assert study.main(["--runs", f"A={tmp_path}", "--out", str(tmp_path / "out")]) == 1
    assert "no finished abs_ppo_mujoco.py runs" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_paired_keeps_the_steps_both_divergences_were_logged_at():
    steps, kl, ess = study.paired((np.array([10.0, 20.0, 30.0]), np.array([0.1, 0.2, 0.3])),
                                  (np.array([20.0, 30.0, 40.0]), np.array([2.0, 3.0, 4.0])))
    assert steps.tolist() == [20.0, 30.0] and kl.tolist() == [0.2, 0.3] and ess.tolist() == [2.0, 3.0]


def test_unexpected_lengths_by_the_runs_flags():
    abs_args = {"adapt": True, "num_steps_min": 1024, "num_steps_max": 8192, "num_steps": 2048}
    assert study.unexpected_lengths(np.array([1024.0, 5000, 8192, 9216, 512]), abs_args).tolist() == [9216, 512]
    fixed = {**abs_args, "adapt": False}
    assert study.unexpected_lengths(np.array([2048.0, 4096]), fixed).tolist() == [4096]
    assert study.unexpected_lengths(np.array([2048.0]), {}).tolist() == []


def write_run(path: Path, env_id: str, seed: int, args: dict, iterations, kl=(), ess=(), returns=(), purge_step=None):
    """A finished run as abs_ppo_mujoco.py leaves it: eval_results.json and TensorBoard events."""
    from torch.utils.tensorboard import SummaryWriter
    path.mkdir(parents=True, exist_ok=True)
    (path / "eval_results.json").write_text(json.dumps({
        "env_id": env_id, "seed": seed, "global_step": int(iterations[-1]), "total_timesteps": int(iterations[-1]),
        "eval": {"mean": 100.0 + seed, "returns": [100.0 + seed]}, "args": {"num_envs": 1, **args}}))
    writer = SummaryWriter(str(path), purge_step=purge_step)
    for step in iterations:
        writer.add_scalar("losses/policy_loss", 0.0, step)
    for tag, series in (("adapt/kl", kl), ("adapt/divergence_ess", ess), ("charts/episodic_return", returns)):
        for step, value in series:
            writer.add_scalar(tag, value, step)
    writer.close()


def test_study_end_to_end_on_written_runs(tmp_path):
    ess_args = {"adapt": True, "divergence": "ess", "num_steps_min": 1024, "num_steps_max": 8192,
                "kl_low": 0.01, "kl_high": 0.1, "ess_low": 0.02, "ess_high": 0.2}
    run = tmp_path / "abs" / "Hopper-v4__1"
    # first process: iterations of 1024, 1024, 1664, 2240; stopped after its checkpoint at step 3712 and resumed,
    # the resumed process purges what the first wrote after the checkpoint and goes on with 2240 and 2240
    write_run(run, "Hopper-v4", 1, ess_args, [1024, 2048, 3712, 5952, 7000], kl=[(2048, 0.01), (5952, 0.5)],
              ess=[(1024, 0.02), (2048, 0.02), (5952, 0.9)], returns=[(1024, 1.0), (2048, 2.0), (5952, 9.0)])
    write_run(run, "Hopper-v4", 1, ess_args, [5952, 8192], kl=[(5952, 0.02)], ess=[(5952, 0.03)],
              returns=[(5952, 4.0), (8192, 5.0)], purge_step=3713)
    fixed = {"adapt": False, "num_steps": 2048}
    write_run(tmp_path / "ppo" / "a" / "Hopper-v4__1", "Hopper-v4", 1, fixed, [2048, 4096, 8192])  # a lost event
    write_run(tmp_path / "ppo" / "b" / "Hopper-v4__2", "Hopper-v4", 2, fixed, [2048, 4096])
    write_run(tmp_path / "ppo" / "c" / "Hopper-v4__2", "Hopper-v4", 2, fixed, [2048, 4096])  # a second copy
    write_run(tmp_path / "ppo" / "d" / "Ant-v4__1", "Ant-v4", 1, fixed, [2048])  # not asked for
    out = tmp_path / "out"
    assert study.main(["--runs", f"ESS={tmp_path / 'abs'}", f"PPO={tmp_path / 'ppo'}", "--games", "Hopper-v4",
                       "Hopper-v4", "Walker2d-v4", "--last-games", "2", "--out", str(out)]) == 0
    text = (out / "study.md").read_text()
    rows = [[c.strip() for c in ln.strip("| ").split("|")] for ln in text.splitlines() if ln.startswith("| Hopper")]
    ess_row = rows[0]
    # L: 1024, 1024, 1664, 2240, 2240 (mean 1638.4; step 2048 ends the 2nd iteration, 4096 is inside the 4th);
    # delta_ESS / KL at the steps that have both, 2048 and 5952 (the resumed process's values): 2.0 and 1.5
    assert ess_row[1:12] == ["ESS", "1", "8,192", "ess", "101.0", "4.500", "5", "1638", "1024", "2240", "2240"]
    assert ess_row[12:16] == ["1.75 [1.55, 1.95]", "1.000", "0.015", "0.025"]
    assert [r[1:4] for r in rows[1:3]] == [["PPO", "1", "8,192"], ["PPO", "2", "4,096"]]  # the copy counted once
    assert rows[3][1:3] == ["ESS", "1"] and rows[4][1:3] == ["PPO", "2"]  # mean over seeds: PPO has 2 runs
    assert "Ant-v4" not in text and text.count("| Hopper-v4 | ESS | 1 |") == 1 + 1  # per run and the mean
    assert "Hopper-v4 seed 2 found twice" in text
    assert "1 iteration(s) of a length its flags cannot give (4096)" in text
    assert "--games Walker2d-v4: no run under any label" in text
    with open(out / "rollout.csv") as f:
        lengths = [int(row[-1]) for row in csv.reader(f) if row[1] == "ESS"]
    assert lengths == [1024, 1024, 1664, 2240, 2240]
    with open(out / "divergence.csv") as f:
        pairs = [float(x) for row in list(csv.reader(f))[1:] for x in row[3:]]
    assert pairs == pytest.approx([2048, 0.01, 0.02, 5952, 0.02, 0.03])  # float32 in the event files
    assert all((out / f"{name}.png").is_file() for name in ("divergence", "rollout", "returns"))


def test_seeds_matching_nothing_say_so(tmp_path, capsys):
    write_run(tmp_path / "ppo" / "Hopper-v4__1", "Hopper-v4", 1, {"adapt": False, "num_steps": 2048}, [2048])
    assert study.main(["--runs", f"PPO={tmp_path / 'ppo'}", "--seeds", "7", "--out", str(tmp_path / "out")]) == 1
    assert "no finished abs_ppo_mujoco.py runs matching --seeds 7" in capsys.readouterr().err


def test_a_damaged_event_file_is_named_and_its_run_left_out(tmp_path):
    """A run whose event file is cut in its last record reads, through TensorBoard alone, as a run that ended a
    little early. The study reads every file record by record as the report does: the run is left out and the
    file named with where reading stopped, so its L and final training return never enter a table."""
    fixed = {"adapt": False, "num_steps": 2048}
    iterations, returns = [2048, 4096, 6144, 8192], [(2048, 1.0), (4096, 2.0), (6144, 3.0), (8192, 4.0)]
    write_run(tmp_path / "ppo" / "Hopper-v4__1", "Hopper-v4", 1, fixed, iterations, returns=returns)
    write_run(tmp_path / "ppo" / "Hopper-v4__2", "Hopper-v4", 2, fixed, iterations, returns=returns)
    [events] = (tmp_path / "ppo" / "Hopper-v4__1").glob("events.out.tfevents.*")
    size = events.stat().st_size
    with open(events, "r+b") as f:
        f.truncate(size - 10)  # the last record cut short
    out = tmp_path / "out"
    assert study.main(["--runs", f"PPO={tmp_path / 'ppo'}", "--out", str(out)]) == 0
    text = (out / "study.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| Hopper-v4 | PPO |")]
    assert [r.split(" | ")[2] for r in rows] == ["2", "1"]  # per run: seed 2 alone; the mean: over 1 run
    assert (f"- PPO: left out (event files damaged or incomplete): `{events}` (PPO Hopper seed 1): damaged: a record "
            f"cut short (in its data) at byte ") in text
    assert f"of {size - 10:,}; TensorBoard stops reading the file there, so its events end at step 8,192" in text
    with open(out / "returns.csv") as f:
        assert {row[-1] for row in list(csv.reader(f))[1:]} == {"1"}  # every bin rests on seed 2 alone


def damage(run: Path, how: str) -> str:
    """Damage one written run `how`; returns what the study must say about it."""
    [events] = run.glob("events.out.tfevents.*")
    if how == "cut event file":
        events.write_bytes(events.read_bytes()[:-10])
        return f"`{events}` (PPO Hopper seed 1): damaged: a record cut short (in its data)"
    if how == "empty event file":
        events.write_bytes(b"")
        return f"`{events}` (PPO Hopper seed 1): incomplete: its event files hold no training events"
    if how == "no event file":
        events.unlink()
        return f"`{run}` (PPO Hopper seed 1): incomplete: no TensorBoard event file"
    result = run / "eval_results.json"
    text = {"invalid JSON": '{"env_id": ', "a list": "[1, 2]", "no eval": json.dumps({"env_id": "Hopper-v4",
                                                                                          "seed": 1})}[how]
    result.write_text(text)
    return f"skipped `{result}`: malformed eval_results.json ("


DAMAGES = ["cut event file", "empty event file", "no event file", "invalid JSON", "a list", "no eval"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_run_is_named_whether_other_runs_remain_or_none(tmp_path, capsys, how):
    """With another run, the damaged one is named in study.md's notes and absent from its tables; alone, the
    'no runs' error names it (and what was wrong) instead of reading as an empty directory."""
    fixed = {"adapt": False, "num_steps": 2048}
    iterations, returns = [2048, 4096, 6144, 8192], [(2048, 1.0), (4096, 2.0), (6144, 3.0), (8192, 4.0)]
    for seed in (1, 2):
        write_run(tmp_path / "ppo" / f"Hopper-v4__{seed}", "Hopper-v4", seed, fixed, iterations, returns=returns)
    said = damage(tmp_path / "ppo" / "Hopper-v4__1", how)
    assert study.main(["--runs", f"PPO={tmp_path / 'ppo'}", "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert said in text.split("## Notes")[1]
    assert [ln.split(" | ")[2] for ln in text.splitlines() if ln.startswith("| Hopper-v4 | PPO |")] == ["2", "1"]
    capsys.readouterr()
    shutil.rmtree(tmp_path / "ppo" / "Hopper-v4__2")
    assert study.main(["--runs", f"PPO={tmp_path / 'ppo'}", "--out", str(tmp_path / "alone")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"divergence_study.py: no finished abs_ppo_mujoco.py runs under {tmp_path / 'ppo'}\n- ")
    assert said in err and len(err.splitlines()) == 2 and not (tmp_path / "alone").exists()


@pytest.mark.parametrize("out,problem", [("file", "is a file, not a directory"),
                                         ("file/sub", "FILE is a file, so no directory can be made below it")])
def test_out_that_is_a_file_or_below_one_is_one_line_and_exit_2(tmp_path, out, problem):
    write_run(tmp_path / "ppo" / "Hopper-v4__1", "Hopper-v4", 1, {"adapt": False, "num_steps": 2048}, [2048])
    (tmp_path / "file").write_text("x")
    res = subprocess.run([*tool("divergence_study"), "--runs", f"PPO={tmp_path / 'ppo'}", "--out", str(tmp_path / out)],
                         capture_output=True, text=True, timeout=120, env=tool_env())
    assert res.returncode == 2 and res.stdout == "", res
    problem = problem.replace("FILE", str(tmp_path / "file"))
    assert res.stderr == f"divergence_study.py: --out {tmp_path / out}: {problem}\n"
    assert (tmp_path / "file").read_text() == "x"
