"""Tests of reproduce/sweep.py: expansion of the built-in experiments into commands and directories,
a real local sweep (two workers) against a stand-in training script that follows
docs/CONVENTIONS.md, the submitit path (sbatch text, a job run as a mocked Slurm job, and the
time-limit signal -> checkpoint -> requeue -> resume cycle through submitit's LocalExecutor), and one
tiny real sweep with abs_pqn_atari.py. Refused command lines and experiment files, two sweeps of one grid and a
killed sweep: tests/test_sweep_faults.py."""
import dataclasses
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))
from reproduce import execution  # noqa: E402
from reproduce import experiment_file  # noqa: E402
from reproduce import experiments  # noqa: E402
from reproduce import slurm  # noqa: E402
from reproduce import sweep  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402
from sweep_standin import make_tiny, starts, sweep_cli  # noqa: E402


@pytest.fixture
def tiny(tmp_path):
    """A tiny experiment (two labels, one game, two seeds) on the stand-in (tests/sweep_standin.py), in its own TOML."""
    return make_tiny(tmp_path)


# ----------------------------------------------------------------------------- expansion
def builtin(name, **kw):
    games, exps = experiment_file.load_config()
    return experiments.expand(name, exps, games, "/r", experiments.Selection(**kw))


def test_atari10_batches_expansion():
    runs = builtin("atari10-batches")
    assert len(runs) == 5 * 10 * 3
    assert [r.label for r in runs[:5]] == ["ABS", "Small", "Vanilla", "Large", "GNS"]
    by = {(r.label, r.env_id, r.seed): r for r in runs}
    r = by["Small", "Qbert-v5", 2]
    assert r.dir == Path("/r/atari10-batches/Small/Qbert-v5__2")
    assert r.log == Path("/r/atari10-batches/Small/logs/Qbert-v5__2.log")
    assert r.command() == ["python", "abs_pqn_atari.py", "--env-id", "Qbert-v5", "--seed", "2",
                           "--total-timesteps", "20000000", "--output-dir", "/r/atari10-batches/Small",
                           "--run-name", "Qbert-v5__2", "--checkpoint-every", "1000000",
                           "--no-adapt", "--num-steps", "16"]
    assert by["ABS", "Qbert-v5", 1].command()[-2:] == ["--checkpoint-every", "1000000"]
    assert by["Vanilla", "Amidar-v5", 3].command()[-4:] == ["--no-adapt", "--num-steps", "32", "--track-divergence"]
    assert by["Large", "Amidar-v5", 3].command()[-3:] == ["--no-adapt", "--num-steps", "64"]
    assert by["GNS", "Phoenix-v5", 1].command()[1] == "gns_pqn_atari.py"
    # The paper's GNS row came from the authors' GNS protocol.
    assert by["GNS", "Phoenix-v5", 1].command()[-8:] == ["--gns-timing", "after", "--gns-micro-batching", "contiguous",
                                                         "--gns-start-steps", "32", "--gns-fixed-epochs", "--anneal-lr"]
    assert {r.env_id for r in runs} == {g + "-v5" for g in ("Amidar", "BattleZone", "Bowling", "DoubleDunk",
            "Frostbite", "KungFuMaster", "NameThisGame", "Phoenix", "Qbert", "Riverraid")}


def test_filters_scale_and_extra_args():
    runs = builtin("atari10-batches", games=["Pong"], seeds=[7], labels=["ABS", "Large"], scale=0.001,
                   extra_args=["--num-envs", "4"], checkpoint_every=500)
    assert [(r.label, r.name, r.total_timesteps) for r in runs] == [("ABS", "Pong-v5__7", 20000),
                                                                   ("Large", "Pong-v5__7", 20000)]
    assert runs[1].command()[13:] == ["500", "--no-adapt", "--num-steps", "64", "--num-envs", "4"]
    assert builtin("mujoco", scale=1e-12)[0].total_timesteps == 1  # floor: one step
    with pytest.raises(experiment_file.SweepError, match="no label"):
        builtin("atari10-batches", labels=["Huge"])
    with pytest.raises(experiment_file.SweepError, match="unknown experiment"):
        builtin("atari11")


def test_atari57_expansion():
    runs = builtin("atari57")
    games = {r.env_id for r in runs}
    assert len(games) == 57 and len(runs) == 2 * 57 * 3
    # the same ids as the score table the report uses
    csv_ids = {line.split(",")[1] for line in (ROOT / "reproduce" / "atari57_scores.csv").read_text().splitlines()[1:]
               if line.strip()}
    assert games == csv_ids
    pqn = [r for r in runs if r.label == "PQN"][0]
    assert pqn.command()[-3:] == ["--no-adapt", "--num-steps", "32"] and pqn.script == "abs_pqn_atari.py"


def test_scale_expansion():
    runs = builtin("scale", games=["Qbert"], seeds=[1])
    cmds = {r.label: " ".join(r.command()) for r in runs}
    assert len(cmds) == 15
    for net, name in (("pqn", "PQN"), ("pqn-l", "PQN-L"), ("pqn-xl", "PQN-XL")):
        assert cmds[f"{name}_fixed32"].endswith(f"--network {net} --no-adapt --num-steps 32")
        for hi in (32, 64, 128):
            assert cmds[f"{name}_ABS16-{hi}"].endswith(f"--network {net} --num-steps-min 16 --num-steps-max {hi}")
            assert "--no-adapt" not in cmds[f"{name}_ABS16-{hi}"]


def test_sensitivity_expansion():
    runs = builtin("sensitivity", games=["Qbert"], seeds=[1])
    flags = {r.label: r.flags for r in runs}
    assert flags["default"] == ()
    assert flags["L8-64"] == ("--num-steps-min", "8", "--num-steps-max", "64")
    assert flags["d15-85"] == ("--divergence-low", "0.15", "--divergence-high", "0.85")
    assert flags["K10"] == ("--adapt-freq", "10")
    assert all("--no-adapt" not in f for f in flags.values())
    assert len(builtin("sensitivity")) == len(flags) * 10 * 3


def test_mujoco_and_btr_expansion():
    runs = builtin("mujoco")
    # The paper's (and CleanRL's published) MuJoCo version.
    assert {r.env_id for r in runs} == {"HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4"}
    assert {r.label for r in runs} == {"PPO", "PPO+ABS"} and len(runs) == 30
    assert all(r.script == "abs_ppo_mujoco.py" and r.total_timesteps == 5_000_000 for r in runs)
    paper = ("--eval-episodes", "100")  # the paper's evaluation (the script's default is 10)
    assert [r.flags for r in runs[:2]] == [(*paper, "--no-adapt", "--num-steps", "2048"), paper]
    assert builtin("mujoco", games=["Hopper"])[0].env_id == "Hopper-v4"
    runs = builtin("btr-atari5")
    assert {r.env_id for r in runs} == {"BattleZone-v5", "DoubleDunk-v5", "NameThisGame-v5", "Phoenix-v5", "Qbert-v5"}
    assert all(r.script == "abs_btr.py" and r.total_timesteps == 20_000_000 for r in runs)  # the paper's 20M
    assert runs[0].dir == Path("/r/btr-atari5/BTR/BattleZone-v5__1")
    assert runs[0].flags == ("--no-adapt", "--batch-size", "256") and runs[1].flags == ()


def test_mujoco_ess_expansion_matches_the_mujoco_grid():
    games, exps = experiment_file.load_config()
    same = ("games", "seeds", "total_timesteps", "checkpoint_every", "env_suffix", "benchmark", "script", "flags")
    assert {k: exps["mujoco-ess"][k] for k in same} == {k: exps["mujoco"][k] for k in same}
    runs = builtin("mujoco-ess")
    assert len(runs) == 45 and {r.label for r in runs} == {"PPO", "PPO+ABS", "PPO+ABS-ESS"}
    assert {r.env_id for r in runs} == {r.env_id for r in builtin("mujoco")}
    paper = ("--eval-episodes", "100")
    assert [r.flags for r in runs[:3]] == [(*paper, "--no-adapt", "--num-steps", "2048"),
                                           (*paper, "--divergence", "kl"), (*paper, "--divergence", "ess")]
    assert experiment_file.reference_and_comparisons("mujoco-ess", exps["mujoco-ess"]) == (
        "PPO+ABS-ESS", [("PPO+ABS", "PPO"), ("PPO+ABS-ESS", "PPO")])


def test_every_builtin_label_is_accepted_by_its_script(capsys):
    # Each label's command line (the first game's, and every MuJoCo task) parses and validates in its script,
    # without creating anything: a flag renamed in a script or a bad env id in the grid fails here.
    import importlib

    games, exps = experiment_file.load_config()
    checked = set()
    for name in exps:
        for r in experiments.expand(name, exps, games, "/nonexistent-root"):
            key = (r.label, r.script) if name != "mujoco" else (r.label, r.env_id)
            if (name, key) in checked:
                continue
            checked.add((name, key))
            module = importlib.import_module(Path(r.script).stem)
            try:
                module.parse_args(r.command()[2:])
            except SystemExit as e:
                pytest.fail(f"{name}/{r.label}: {' '.join(r.command())}: exit {e.code}: {capsys.readouterr().err}")
    assert ("atari10-batches", ("GNS", "gns_pqn_atari.py")) in checked and ("mujoco", ("PPO", "Ant-v4")) in checked
    assert not Path("/nonexistent-root").exists()


def test_dry_run_prints_commands_and_steps(tiny):
    opts, _ = tiny
    out = sweep_cli("run", "tiny", *opts, "--dry-run", "--scale", "0.5")
    assert out.returncode == 0, out.stderr
    cmds = [line for line in out.stdout.splitlines() if line.startswith("python ")]
    assert len(cmds) == 4 and all("--total-timesteps 500" in c for c in cmds)
    assert "4 runs, 2,000 environment steps" in out.stdout
    assert not (tiny[1]).exists()  # a dry run creates nothing
    out = sweep_cli("run", "tiny", *opts, "--dry-run", "--seeds", "1", "--labels", "A", "--extra-args", "--no-cuda")
    assert out.stdout.splitlines()[1].endswith("--checkpoint-every 0 --no-cuda"), out.stdout + out.stderr
    bad = sweep_cli("run", "nope", *opts, "--dry-run")
    assert bad.returncode == 2 and "unknown experiment" in bad.stderr


# ----------------------------------------------------------------------------- a real local sweep
def test_local_sweep_idempotent_rerun_failure_resume(tiny):
    opts, exp_dir = tiny
    # 1. all four runs finish, two at a time
    out = sweep_cli("run", "tiny", *opts, "--workers", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    results = {p.parent.relative_to(exp_dir).as_posix(): json.loads(p.read_text())
               for p in exp_dir.rglob("eval_results.json")}
    assert set(results) == {"A/Pong-v5__1", "A/Pong-v5__2", "B/Pong-v5__1", "B/Pong-v5__2"}
    assert results["B/Pong-v5__2"]["extra"] == ["--label-b"] and results["A/Pong-v5__1"]["extra"] == []
    spans = sorted((r["start"], r["end"]) for r in results.values())
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), "two workers never overlapped"
    assert (exp_dir / "A" / "logs" / "Pong-v5__1.log").exists()
    log = (exp_dir / "A" / "logs" / "Pong-v5__1.log").read_text()
    assert f"[sweep] source: {execution.source_version()}\n" in log  # the commit it ran from, after its command
    # each finished run is listed with its own time and the time since the sweep started (which includes its wait)
    done = re.findall(r"^\[\d/4\] ok +\S+ Pong-v5__\d \(exit 0 after (\d+) s; (\d+) s since the sweep started\)$",
                      out.stdout, re.M)
    assert len(done) == 4 and all(int(own) <= int(since) for own, since in done), out.stdout
    # 2. a second invocation starts nothing
    out = sweep_cli("run", "tiny", *opts, "--workers", "2")
    assert out.returncode == 0 and "4 already done, 0 to run" in out.stdout
    assert all(starts(log) == 1 for log in exp_dir.glob("*/logs/*.log"))
    # 3. a deleted result is run again, and only that one
    (exp_dir / "B" / "Pong-v5__1" / "eval_results.json").unlink()
    out = sweep_cli("run", "tiny", *opts, "--workers", "2")
    assert out.returncode == 0 and "1 to run" in out.stdout
    assert starts(exp_dir / "B" / "logs" / "Pong-v5__1.log") == 2
    assert starts(exp_dir / "A" / "logs" / "Pong-v5__1.log") == 1
    # 4. a run made to fail is reported with its log tail; the others complete; exit code 1
    out = sweep_cli("run", "tiny", *opts, "--seeds", "1", "2", "3", "4", "--workers", "2",
                    "--extra-args", "--fail-seeds 3")
    assert out.returncode == 1
    assert "FAILED A Pong-v5__3" in out.stdout and "FAILED B Pong-v5__3" in out.stdout
    assert "boom: made to fail" in out.stdout
    assert (exp_dir / "A" / "Pong-v5__4" / "eval_results.json").exists()
    assert (exp_dir / "B" / "Pong-v5__4" / "eval_results.json").exists()
    # 5. a run with a checkpoint is resumed
    (exp_dir / "A" / "Pong-v5__5").mkdir()
    (exp_dir / "A" / "Pong-v5__5" / "checkpoint.pt").write_text("{}")
    out = sweep_cli("run", "tiny", *opts, "--seeds", "5", "--labels", "A", "--dry-run")
    assert f"--resume {exp_dir}/A/Pong-v5__5/checkpoint.pt" in out.stdout and "1 of them resumed" in out.stdout
    out = sweep_cli("status", "tiny", *opts)
    assert re.search(r"A\s+Pong-v5\s+3\s+0\s+1\s+1\s+0", out.stdout), out.stdout  # done 1-2-4, resumable 5, failed 3
    out = sweep_cli("run", "tiny", *opts, "--seeds", "5", "--labels", "A")
    assert out.returncode == 0, out.stdout
    res = json.loads((exp_dir / "A" / "Pong-v5__5" / "eval_results.json").read_text())
    assert res["resumed_from"] == str(exp_dir / "A" / "Pong-v5__5" / "checkpoint.pt")
    # status: done / failed / missing per label and game
    out = sweep_cli("status", "tiny", *opts, "--seeds", "1", "2", "3", "4", "5", "6")
    assert out.returncode == 0
    assert re.search(r"A\s+Pong-v5\s+4\s+0\s+0\s+1\s+1", out.stdout), out.stdout
    assert re.search(r"B\s+Pong-v5\s+3\s+0\s+0\s+1\s+2", out.stdout), out.stdout
    assert "==> failed: A Pong-v5__3" in out.stdout


def test_sigterm_to_local_sweep_checkpoints_and_rerun_resumes(tiny):
    opts, exp_dir = tiny
    cmd = [*tool("sweep"), "run", "tiny", *opts, "--labels", "A", "--workers", "2", "--extra-args", "--sleep 60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tool_env())
    logs = [exp_dir / "A" / "logs" / f"Pong-v5__{s}.log" for s in (1, 2)]
    deadline = time.time() + 60
    while not all(log.exists() and "training" in log.read_text() for log in logs):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    for log in logs:  # each script got the signal once, checkpointed and exited 143
        assert "checkpointed on signal 15" in log.read_text() and log.read_text().rstrip().endswith("exit 143")
    assert "interrupted" in sweep_cli("status", "tiny", *opts).stdout.splitlines()[0]
    assert re.search(r"A\s+Pong-v5\s+0\s+0\s+2\s+0\s+0", sweep_cli("status", "tiny", *opts).stdout)
    out = sweep_cli("run", "tiny", *opts, "--labels", "A", "--workers", "2")
    assert out.returncode == 0, out.stdout
    for seed in (1, 2):
        res = json.loads((exp_dir / "A" / f"Pong-v5__{seed}" / "eval_results.json").read_text())
        assert res["resumed_from"].endswith(f"A/Pong-v5__{seed}/checkpoint.pt")


def test_source_version_names_the_commit_and_uncommitted_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # a tmp_path inside a checkout is not one
    assert execution.source_version(tmp_path) == "unknown (not a git checkout)"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "new.txt").write_text("untracked files are not the source\n")
    assert execution.source_version(tmp_path) == f"commit {sha}" and len(sha) == 40
    (tmp_path / "a.py").write_text("x = 2\n")
    assert execution.source_version(tmp_path) == f"commit {sha} with uncommitted changes to tracked files"


def test_state_from_log(tmp_path):
    run = experiments.Run("e", "L", "x.py", "Pong-v5", 1, 10, 0, (), tmp_path / "e" / "L")
    assert sweep.state(run) == "missing"
    run.log.parent.mkdir(parents=True)
    run.log.write_text("[sweep] 2026-01-01T00:00:00 start on h: python x.py\nstep 1\n")
    assert sweep.state(run) == "interrupted"  # started, never ended, and nobody holds its locks: killed
    run.dir.mkdir()
    for lock in (run.claim_file, run.dir / ".lock"):  # a sweep that owns the run, or its script
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            assert sweep.state(run) == "running" and execution.live(run)
        assert sweep.state(run) == "interrupted" and not execution.live(run)
    run.log.write_text(run.log.read_text() + "[sweep] 2026-01-01T00:01:00 exit 143\n")
    assert sweep.state(run) == "interrupted"
    run.log.write_text(run.log.read_text() + "[sweep] 2026-01-01T00:02:00 start on h: python x.py\n"
                       "Traceback\n[sweep] 2026-01-01T00:03:00 exit 1\n")
    assert sweep.state(run) == "failed"
    (run.dir / "eval_results.json").write_text('{"total_timesteps": 5, "global_step": 5}')  # a shorter run's result
    assert sweep.state(run) == "other-length" and not run.done()
    # A prefix of this run's protocol (--stop-at-step 4 of 10) is done only for a run that stops there too.
    (run.dir / "eval_results.json").write_text('{"total_timesteps": 10, "global_step": 4}')
    assert sweep.state(run) == "failed" and not run.done()
    prefix = dataclasses.replace(run, stop_at_step=4)
    assert sweep.state(prefix) == "done" and prefix.done()
    assert not dataclasses.replace(run, stop_at_step=6).done()
    (run.dir / "checkpoint.pt").write_bytes(b"")  # the prefix run's checkpoint: the full run resumes it
    assert "--resume" in run.command() and run.command()[-1].endswith("checkpoint.pt")
    assert "--stop-at-step" not in run.command() and prefix.command()[-4:-2] == ["--stop-at-step", "4"]
    (run.dir / "checkpoint.pt").unlink()
    (run.dir / "eval_results.json").write_text('{"total_timesteps": 10, "global_step": 10}')
    assert sweep.state(run) == "done" and run.done() and prefix.done()
    # A recorded Slurm job that Slurm lists as queued or running wins over the files; one it no longer
    # knows leaves the state to them.
    (run.dir / "eval_results.json").unlink()
    run.job_file.write_text("12_3\n")
    assert sweep.state(run, {"12_3": "PENDING"}) == "queued"
    assert sweep.state(run, {"12_3": "RUNNING"}) == "running"
    assert sweep.state(run, {"12_3": "UNKNOWN"}) == sweep.state(run) == "failed"


def test_scale_has_its_own_root_and_a_short_result_is_not_done(tiny):
    assert sweep.parse_args(["run", "tiny"]).root == "runs/sweeps"
    assert sweep.parse_args(["run", "tiny", "--scale", "0.001"]).root == "runs/sweeps-scale0.001"
    assert sweep.parse_args(["status", "tiny", "--scale", "0.5"]).root == "runs/sweeps-scale0.5"
    assert sweep.parse_args(["run", "tiny", "--scale", "0.5", "--root", "/x"]).root == "/x"
    opts, exp_dir = tiny
    assert sweep_cli("run", "tiny", *opts, "--labels", "A", "--scale", "0.02").returncode == 0  # 20 steps
    assert json.loads((exp_dir / "A" / "Pong-v5__1" / "eval_results.json").read_text())["total_timesteps"] == 20
    # The same root at full length: the mini results are neither done nor overwritten.
    out = sweep_cli("run", "tiny", *opts, "--labels", "A", "--dry-run")
    assert "0 done, 0 to run" in out.stdout and "skipping 2 run(s) whose directory holds a result of another " \
        "length (not 1,000 steps)" in out.stdout, out.stdout
    out = sweep_cli("status", "tiny", *opts)
    assert re.search(r"A\s+Pong-v5\s+0\s+0\s+0\s+0\s+0\s+0\s+2", out.stdout), out.stdout
    assert "==> other length:" in out.stdout
    assert re.search(r"A\s+Pong-v5\s+2\s+0", sweep_cli("status", "tiny", *opts, "--scale", "0.02").stdout)
    assert "no finished run of tiny" in sweep_cli("report", "tiny", *opts).stderr


def test_report_calls_report_tool_with_labels(tiny, tmp_path):
    opts, exp_dir = tiny
    assert sweep_cli("run", "tiny", *opts, "--labels", "A", "--seeds", "1").returncode == 0
    out = sweep_cli("report", "tiny", *opts, "--out", str(tmp_path / "rep"), timeout=300)
    assert f"--runs A={exp_dir / 'A'} --out {tmp_path / 'rep'} --total-timesteps 1000 --reference A" in out.stdout
    assert "B=" not in out.stdout.splitlines()[0] and "--compare" not in out.stdout  # B has no finished run
    assert out.stdout.splitlines()[0].endswith("--reference A --skip-compare A B"), out.stdout
    assert out.returncode == 0 and (tmp_path / "rep" / "report.md").exists(), out.stdout + out.stderr
    assert sweep_cli("run", "tiny", *opts, "--labels", "B", "--seeds", "1").returncode == 0
    out = sweep_cli("report", "tiny", *opts, "--out", str(tmp_path / "rep"), "--reference", "B", timeout=300)
    assert out.stdout.splitlines()[0].endswith("--reference B --compare B A"), out.stdout
    assert "## Improvement rate of B" in (tmp_path / "rep" / "report.md").read_text()
    bad = sweep_cli("report", "tiny", *opts, "--reference", "C")
    assert bad.returncode == 2 and "--reference: 'C' is not one of the labels" in bad.stderr
    # --games and --seeds choose the runs the report reads (the label directories hold every game and seed)
    assert sweep_cli("run", "tiny", *opts, "--labels", "A", "--seeds", "2").returncode == 0
    out = sweep_cli("report", "tiny", *opts, "--out", str(tmp_path / "one"), "--games", "Pong", "--seeds", "2",
                    timeout=300)
    assert out.returncode == 0 and " --games Pong --seeds 2" in out.stdout.splitlines()[0], out.stdout + out.stderr
    data = (tmp_path / "one" / "report.md").read_text().split("## Data")[1].split("\n## ")[0]
    assert "| A |" in data and "| 1 | 1 of 1 | Pong: 1 | none |" in data  # seed 2 of A only, though 1 is done


def test_report_names_run_directories_below_the_working_directory_relatively(tmp_path, monkeypatch):
    """A report written from the repository root names results/... the same on every clone (results/ is
    regenerated by a test and compared line by line)."""
    monkeypatch.chdir(tmp_path)
    assert sweep._shown(tmp_path.resolve() / "results" / "A") == Path("results/A")
    assert sweep._shown(Path("/elsewhere/A")) == Path("/elsewhere/A")


def fake_result(run_dir: Path, steps: int, game="Pong-v5", seed=1):
    """What the stand-in writes for a finished run of `steps` environment steps."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "eval_results.json").write_text(json.dumps({
        "env_id": game, "seed": seed, "global_step": steps, "total_timesteps": steps,
        "args": {"seed": seed}, "eval": {"episodes": 1, "returns": [1.0], "mean": 1.0}}))


def test_report_skips_comparisons_without_runs_instead_of_comparing_across_networks(tmp_path):
    """A partly finished grid whose comparisons pair labels of one network: no comparison has runs of both its
    labels, and the report lists them as skipped rather than comparing the reference with every other label."""
    config = tmp_path / "grid.toml"
    config.write_text(textwrap.dedent('''
        [experiments.grid]
        script = "x.py"
        games = ["Pong-v5"]
        seeds = [1]
        total_timesteps = 1000
        reference = "S_ABS"
        comparisons = [["S_ABS", "S_fixed"], ["L_ABS", "L_fixed"]]
        [experiments.grid.labels]
        S_ABS = ""
        S_fixed = ""
        L_ABS = ""
        L_fixed = ""
    '''))
    root = tmp_path / "sweeps"
    for label in ("S_ABS", "L_fixed"):
        fake_result(root / "grid" / label / "Pong-v5__1", 1000)
    out = sweep_cli("report", "grid", "--config", str(config), "--root", str(root), "--out", str(tmp_path / "rep"),
                    timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    cmd = out.stdout.splitlines()[0]
    assert "--skip-compare S_ABS S_fixed --skip-compare L_ABS L_fixed" in cmd and "--compare" not in cmd
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "S_ABS over L_fixed" not in md and "S_ABS vs L_fixed" not in md
    assert "- S_ABS over S_fixed: no finished run of S_fixed" in md
    assert "- L_ABS over L_fixed: no finished run of L_ABS" in md


def test_report_keeps_the_experiments_length_and_leaves_other_lengths_out(tiny, tmp_path):
    """A label directory holding runs of the full length and of a --scale run: `report` reports the runs of its
    own length and lists the others, instead of refusing the mixed lengths (or pooling them)."""
    opts, exp_dir = tiny
    fake_result(exp_dir / "A" / "Pong-v5__1", 1000)
    fake_result(exp_dir / "A" / "Pong-v5__2", 20, seed=2)
    out = sweep_cli("report", "tiny", *opts, "--out", str(tmp_path / "full"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "--total-timesteps 1000" in out.stdout.splitlines()[0]
    data = (tmp_path / "full" / "report.md").read_text().split("## Data")[1].split("\n## ")[0]
    assert "| A |" in data and "Pong: 1 |" in data
    assert f"A: other length, left out: `{exp_dir / 'A' / 'Pong-v5__2'}` (20 steps, not 1,000)" in data
    out = sweep_cli("report", "tiny", *opts, "--scale", "0.02", "--out", str(tmp_path / "mini"), timeout=300)
    assert out.returncode == 0 and "--total-timesteps 20" in out.stdout, out.stdout + out.stderr
    assert "A: other length, left out" in (tmp_path / "mini" / "report.md").read_text()
    (exp_dir / "A" / "Pong-v5__1" / "eval_results.json").unlink()
    out = sweep_cli("report", "tiny", *opts)
    assert out.returncode == 2 and "no finished run of tiny with 1,000 steps" in out.stderr
    assert "1 run(s) of another length: use the --scale they were run with" in out.stderr


def test_publish_copies_finished_runs_without_checkpoints_and_writes_their_report(tiny, tmp_path, monkeypatch):
    """`publish` copies each finished run's results, event files and log (never a checkpoint, model or lock) to
    OUT/runs, leaves unfinished runs out with a line each, keeps runs published before from another root, and writes
    the report that `report --root OUT/runs` writes of every label, game and seed published there."""
    from torch.utils.tensorboard import SummaryWriter

    opts, exp_dir = tiny
    assert sweep_cli("run", "tiny", *opts, "--seeds", "1").returncode == 0
    run = exp_dir / "A" / "Pong-v5__1"
    with SummaryWriter(str(run)) as w:
        w.add_scalar("charts/episodic_return", 1.0, 500)
    for name in ("checkpoint.pt", "model.pt", ".lock", "eval_results_at_500.json", "notes.txt"):
        (run / name).write_text("{}")
    monkeypatch.chdir(tmp_path)  # a relative --out, as results/NAME from the repository root
    out = sweep_cli("publish", "tiny", *opts, "--out", "pub", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "published A/Pong-v5__1: 3 file(s)" in lines and "published B/Pong-v5__1: 1 file(s)" in lines
    assert "not published (not done): A/Pong-v5__2" in lines and "not published (not done): B/Pong-v5__2" in lines
    pub = tmp_path / "pub" / "runs" / "tiny"
    assert sorted(p.name for p in (pub / "A" / "Pong-v5__1").iterdir()) == sorted(
        ["eval_results.json", "eval_results_at_500.json"] + [p.name for p in run.glob("events.out.tfevents.*")])
    logs = "A", "logs", "Pong-v5__1.log"
    assert (pub.joinpath(*logs)).read_text() == (exp_dir.joinpath(*logs)).read_text()
    assert not list((tmp_path / "pub").rglob("*.pt")) and not list((tmp_path / "pub").rglob(".lock"))
    report = (tmp_path / "pub" / "report.md").read_text()
    again = sweep_cli("report", "tiny", "--config", opts[1], "--root", "pub/runs", "--games", "Pong-v5", "--seeds", "1",
                      "--out", "again", timeout=300)
    assert again.returncode == 0 and (tmp_path / "again" / "report.md").read_text() == report, again.stderr
    assert "| A | `pub/runs/tiny/A` |" in report  # named relatively, the same on every clone
    # Seed 2 finishes on another machine (another root): publishing it keeps seed 1, published before.
    other = ["--config", opts[1], "--root", str(tmp_path / "elsewhere")]
    assert sweep_cli("run", "tiny", *other, "--seeds", "2").returncode == 0
    out = sweep_cli("publish", "tiny", *other, "--out", "pub", timeout=300)
    assert out.returncode == 0 and "kept, published before: A/Pong-v5__1" in out.stdout, out.stdout + out.stderr
    assert "published A/Pong-v5__2: 1 file(s)" in out.stdout
    data = (tmp_path / "pub" / "report.md").read_text().split("## Data")[1].split("\n## ")[0]
    assert "| A |" in data and "Pong: 2 |" in data
    assert (pub / "A" / "Pong-v5__1" / "eval_results_at_500.json").exists()
    # Publishing one label's run of one seed still writes the report of everything published: A's two seeds stay in it
    third = ["--config", opts[1], "--root", str(tmp_path / "third")]
    assert sweep_cli("run", "tiny", *third, "--seeds", "3", "--labels", "B").returncode == 0
    out = sweep_cli("publish", "tiny", *third, "--seeds", "3", "--labels", "B", "--out", "pub", timeout=300)
    assert out.returncode == 0 and "--labels" not in out.stdout, out.stdout + out.stderr
    assert re.search(r"-m reproduce\.report --runs A=\S+ B=\S+ .*--seeds 1 2 3", out.stdout), out.stdout
    data = (tmp_path / "pub" / "report.md").read_text().split("## Data")[1].split("\n## ")[0]
    assert "| A |" in data and "| B |" in data and "Pong: 2 |" in data and "Pong: 3 |" in data, data
    bad = sweep_cli("publish", "tiny", "--config", opts[1], "--root", str(tmp_path / "none"), "--out", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("error: no finished run of tiny")
    assert not (tmp_path / "x").exists()
    assert "--out" in sweep_cli("publish", "tiny", *opts).stderr  # required
    same = sweep_cli("publish", "tiny", "--config", opts[1], "--root", "pub/runs", "--out", "pub")
    assert same.returncode == 2 and "its runs/ is the --root itself" in same.stderr
    assert (pub / "A" / "Pong-v5__1" / "eval_results.json").exists()  # nothing removed


def test_builtin_references_and_comparisons():
    games, exps = experiment_file.load_config()
    refs = {name: experiment_file.reference_and_comparisons(name, exp) for name, exp in exps.items()}
    assert refs["mujoco"] == ("PPO+ABS", [("PPO+ABS", "PPO")])
    assert refs["btr-atari5"] == ("BTR+ABS", [("BTR+ABS", "BTR")])
    assert refs["atari10-batches"][1] == [("ABS", lb) for lb in ("Small", "Vanilla", "Large", "GNS")]
    assert refs["atari57"][1] == [("ABS", "PQN")] and refs["sensitivity"][0] == "default"
    pairs = refs["scale"][1]  # Figure 5: each ABS range against the fixed baselines of its own network
    assert len(pairs) == 18 and len(set(pairs)) == 18
    for a, b in pairs:
        net = a.split("_")[0]
        assert a.startswith(f"{net}_ABS16-") and b in (f"{net}_fixed32", f"{net}_fixed64")
    with pytest.raises(experiment_file.SweepError, match="reference 'X' is not one of its labels"):
        experiment_file.reference_and_comparisons("e", {"labels": {"A": "", "B": ""}, "reference": "X"})
    with pytest.raises(experiment_file.SweepError, match="comparisons must be a list"):
        experiment_file.reference_and_comparisons("e", {"labels": {"A": "", "B": ""}, "comparisons": [["A", "C"]]})


def test_local_run_and_dry_run_leave_runs_with_a_queued_or_running_slurm_job_alone(tiny, monkeypatch, capsys):
    """A recorded Slurm job that is queued or running owns its run directory: a local run does not start that run
    (two writers on one directory), and a dry run does not list it as to run. A job Slurm no longer lists
    (COMPLETED, or unknown) does not hold its run back."""
    opts, exp_dir = tiny
    logs = exp_dir / "A" / "logs"
    logs.mkdir(parents=True)
    for seed, job in ((1, "7_0"), (2, "7_1")):
        (logs / f"Pong-v5__{seed}.slurm").write_text(f"{job}\n")
    asked = []

    def states(runs):
        asked.append(sorted(slurm.job_id(r) for r in runs if slurm.job_id(r)))
        return {"7_0": "RUNNING", "7_1": "COMPLETED"}
    monkeypatch.setattr(sweep, "slurm_states", states)
    assert sweep.main(["run", "tiny", *opts, "--labels", "A", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# skipping 1 run(s) whose Slurm job is queued or running: A/Pong-v5__1 (job 7_0 RUNNING)" in out
    cmds = [line for line in out.splitlines() if line.startswith("python ")]
    assert len(cmds) == 1 and "--seed 2 " in cmds[0]
    assert "1 to run" in out and "1 left to their queued or running Slurm jobs" in out
    assert sweep.main(["run", "tiny", *opts, "--labels", "A"]) == 0
    out = capsys.readouterr().out
    assert "skipping 1 run(s) whose Slurm job is queued or running: A/Pong-v5__1 (job 7_0 RUNNING)" in out
    assert "1 to run" in out and asked == [["7_0", "7_1"], ["7_0", "7_1"], ["7_1"]]  # (the last: for its summary)
    assert not (exp_dir / "A" / "Pong-v5__1").exists() and not (logs / "Pong-v5__1.log").exists()
    assert (exp_dir / "A" / "Pong-v5__2" / "eval_results.json").exists()


# ----------------------------------------------------------------------------- submitit / Slurm
def slurm_args(tiny_opts, *extra):
    return sweep.parse_args(["run", "tiny", *tiny_opts, "--slurm", "--partition", "gpu-long", "--gpus-per-job", "2",
                             "--cpus-per-job", "12", "--time-min", "240", "--mem-gb", "48", "--workers", "16",
                             "--signal-delay-s", "300", "--slurm-arg", "account=rl", *extra])


def test_slurm_sbatch_parameters(tiny, tmp_path, monkeypatch):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    ex = slurm.slurm_executor(slurm_args(tiny[0]), tmp_path / "submitit")
    assert ex._executor.max_num_timeout == 20
    text = ex._executor._make_submission_file_text("python -m submitit.core._submit X", "uid")
    for line in ("#SBATCH --partition=gpu-long", "#SBATCH --gpus-per-node=2", "#SBATCH --cpus-per-task=12",
                 "#SBATCH --time=240", "#SBATCH --mem=48GB", "#SBATCH --signal=USR2@300",
                 "#SBATCH --account=rl", "#SBATCH --job-name=sweep-tiny"):
        assert line in text.splitlines(), text


def test_slurm_submit_and_run_job_mocked(tiny, tmp_path):
    """The Slurm path with submitit's own Slurm mock (its sbatch answers with a job id): the CLI
    submits one job array, then one job runs as Slurm would run it (python -m submitit.core._submit)
    in a fresh process, which unpickles the job (sent by value from __main__) and trains."""
    pytest.importorskip("submitit.slurm.test_slurm")
    opts, exp_dir = tiny
    submit_py = textwrap.dedent(f'''
        import runpy, sys
        from submitit.slurm.test_slurm import mocked_slurm
        sys.argv = ["sweep.py", "run", "tiny", *{opts!r}, "--slurm", "--partition", "p", "--time-min", "60"]
        with mocked_slurm():
            runpy.run_module("reproduce.sweep", run_name="__main__", alter_sys=True)
    ''')
    out = subprocess.run([sys.executable, "-c", submit_py], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env=tool_env())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "submitted 4 jobs (12_0 ... 12_3)" in out.stdout
    text = next((exp_dir / "submitit").glob("*submission*.sh")).read_text()
    for line in ("#SBATCH --array=0-3%4", "#SBATCH --signal=USR2@180", "#SBATCH --partition=p", "#SBATCH --time=60"):
        assert line in text.splitlines(), text
    env = dict(os.environ, SUBMITIT_EXECUTOR="slurm", SLURM_JOB_ID="12_1")
    job = subprocess.run([sys.executable, "-m", "submitit.core._submit", str(exp_dir / "submitit")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    results = list(exp_dir.rglob("eval_results.json"))
    assert [r.parent.relative_to(exp_dir).as_posix() for r in results] == ["B/Pong-v5__1"]  # job 1: 2nd run


def test_slurm_job_ids_status_and_no_second_submission(tiny, tmp_path):
    """Job ids are recorded at submission; status shows what Slurm (sacct, mocked by submitit) says is queued or
    running; a second `run --slurm` submits only the runs whose job is neither."""
    pytest.importorskip("submitit.slurm.test_slurm")
    opts, exp_dir = tiny
    script = textwrap.dedent(f'''
        import runpy, sys
        from submitit.slurm.test_slurm import mocked_slurm
        def cli(*args):
            sys.argv = ["sweep.py", *args, *{opts!r}]
            print("==>", args[0], flush=True)
            try:
                runpy.run_module("reproduce.sweep", run_name="__main__", alter_sys=True)
            except SystemExit as e:
                print("exit", e.code, flush=True)
        with mocked_slurm() as mock:
            cli("run", "tiny", "--slurm", "--partition", "p")
            mock.job_sacct["12"] = "JobID|State\\n12_0|PENDING\\n12_1|RUNNING\\n12_2|COMPLETED\\n12_3|PREEMPTED"
            cli("status", "tiny")
            cli("run", "tiny", "--slurm", "--partition", "p")
    ''')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=tool_env())
    assert out.returncode == 0, out.stdout + out.stderr
    first, status, second = out.stdout.split("==> ")[1:]
    assert "submitted 4 jobs (12_0 ... 12_3)" in first
    jobs = {f"{p.parent.parent.name}/{p.stem}": p.read_text().strip() for p in exp_dir.glob("*/logs/*.slurm")}
    # seed-major order: A seed 1, B seed 1, A seed 2, B seed 2; the re-submitted two got one new array
    assert jobs["A/Pong-v5__1"] == "12_0" and jobs["B/Pong-v5__1"] == "12_1"
    assert re.search(r"A\s+Pong-v5\s+0\s+0\s+0\s+0\s+1\s+1\s+0", status), status  # 12_2 COMPLETED, no result: missing
    assert re.search(r"B\s+Pong-v5\s+0\s+1\s+0\s+0\s+1\s+0\s+0", status), status  # 12_3 preempted: missing
    assert "skipping 2 run(s) whose Slurm job is queued or running: A/Pong-v5__1 (job 12_0 PENDING), " \
        "B/Pong-v5__1 (job 12_1 RUNNING)" in second
    assert "2 to run" in second and "submitted 2 jobs (13_0 ... 13_1)" in second, second
    assert (jobs["A/Pong-v5__2"], jobs["B/Pong-v5__2"]) == ("13_0", "13_1")


def test_preemption_sigterm_without_usr2_requeues_and_resumes(tiny):
    """A preemption: SIGTERM reaches the script with no earlier time-limit signal. It checkpoints and exits 143;
    the job requeues itself (through submitit's LocalExecutor here) instead of failing, and resumes."""
    submitit = pytest.importorskip("submitit")
    opts, exp_dir = tiny
    games, exps = experiment_file.load_config(opts[1])
    run = experiments.expand("tiny", exps, games, opts[3], experiments.Selection(seeds=[1], labels=["A"],
                                                                            extra_args=["--sleep", "120"]))[0]
    ex = submitit.LocalExecutor(folder=exp_dir / "submitit")
    ex.update_parameters(timeout_min=5)
    job = slurm.submit(ex, [run], grace_s=20)[0]
    deadline = time.time() + 60
    while not (run.log.exists() and (m := re.search(r"training Pong-v5 1 pid (\d+)", run.log.read_text()))):
        assert time.time() < deadline, "the script did not start"
        time.sleep(0.1)
    os.kill(int(m.group(1)), signal.SIGTERM)
    assert job.result() == 0
    log = run.log.read_text()
    assert "checkpointed on signal 15" in log
    assert "without the time-limit signal (preemption); requeue 1 of at most 20: requeued" in log
    assert starts(run.log) == 2 and "exit 143 (stopped by the" not in log
    assert run.requeue_file.read_text() == "1\n"  # counted against --max-requeues
    assert json.loads((run.dir / "eval_results.json").read_text())["resumed_from"] == str(run.dir / "checkpoint.pt")


@pytest.fixture
def preempted(tmp_path, monkeypatch):
    """A run stopped by SIGTERM with its checkpoint written, inside a mocked Slurm job 12_3 (SLURM_JOB_ID 77):
    `scontrol show job` answers with the JobState in $FAKE_JOBSTATE (or fails when it is "fail"), and the
    requeue is recorded, or raises what `requeue_error` holds."""
    import submitit.core.job_environment as je

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "scontrol").write_text('#!/bin/sh\n[ "$FAKE_JOBSTATE" = fail ] && exit 1\n'
                                       'echo "JobId=$3 JobName=sweep-tiny"\n'
                                       'echo "   JobState=$FAKE_JOBSTATE Reason=None Dependency=(null)"\n')
    (fake_bin / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    run = experiments.Run("e", "L", "x.py", "Pong-v5", 1, 10, 0, (), tmp_path / "e" / "L")
    run.dir.mkdir(parents=True)
    (run.dir / "checkpoint.pt").write_text("{}")
    run.log.parent.mkdir(parents=True)
    run.log.write_text("[sweep] 2026-01-01T00:00:00 start on h: python x.py\n[sweep] 2026-01-01T00:01:00 exit 143\n")
    calls, requeue_error = [], []

    class FakeSlurmEnvironment:
        cluster, job_id = "slurm", "12_3"

        def _requeue(self, countdown):
            calls.append(run.log.read_text())  # the log as it was when the requeue was asked for
            if requeue_error:
                raise requeue_error[0]
    monkeypatch.setattr(je, "JobEnvironment", FakeSlurmEnvironment)
    return run, calls, requeue_error


def test_preemption_requeue_asks_slurm_first_and_logs_the_outcome(preempted, monkeypatch):
    run, calls, _ = preempted
    monkeypatch.setenv("FAKE_JOBSTATE", "PREEMPTED")
    assert slurm.slurm_job_state("77") == "PREEMPTED"
    with pytest.raises(SystemExit):
        slurm.RunJob(run, 10, max_requeues=2)._requeue_preempted(143)
    assert len(calls) == 1 and "requeue" not in calls[0]  # the log line comes after the requeue, with its outcome
    assert run.log.read_text().rstrip().endswith("without the time-limit signal (preemption); requeue 1 of at most "
                                                 "2: requeued")
    assert run.requeue_file.read_text() == "1\n"


def test_preemption_requeue_not_after_a_scancel_nor_an_unknown_state(preempted, monkeypatch):
    run, calls, _ = preempted
    job = slurm.RunJob(run, 10)
    monkeypatch.setenv("FAKE_JOBSTATE", "CANCELLED")
    job._requeue_preempted(143)  # returns: the job ends as failed, the run stays interrupted
    assert "not requeued: job 77 was cancelled (JobState=CANCELLED)" in run.log.read_text()
    monkeypatch.setenv("FAKE_JOBSTATE", "fail")
    assert slurm.slurm_job_state("77") is None
    job._requeue_preempted(143)
    assert "not requeued: `scontrol show job 77` gave no JobState" in run.log.read_text()
    assert calls == [] and not run.requeue_file.exists() and sweep.state(run) == "interrupted"


def test_preemption_requeues_are_capped_and_a_requeue_timeout_is_caught(preempted, monkeypatch):
    run, calls, requeue_error = preempted
    monkeypatch.setenv("FAKE_JOBSTATE", "RUNNING")
    requeue_error.append(subprocess.TimeoutExpired(["scontrol", "requeue", "12_3"], 60))
    slurm.RunJob(run, 10, max_requeues=2)._requeue_preempted(143)  # returns instead of raising
    assert len(calls) == 1 and "requeue 1 of at most 2: failed (TimeoutExpired" in run.log.read_text()
    requeue_error.clear()
    with pytest.raises(SystemExit):
        slurm.RunJob(run, 10, max_requeues=2)._requeue_preempted(143)
    assert len(calls) == 2 and run.requeue_file.read_text() == "2\n"
    slurm.RunJob(run, 10, max_requeues=2)._requeue_preempted(143)
    assert len(calls) == 2 and run.log.read_text().rstrip().endswith(
        "not requeued: requeued 2 time(s) after preemptions already (--max-requeues 2)")


def test_timeout_signal_checkpoints_requeues_and_resumes(tiny):
    """submitit's LocalExecutor sends its time-limit signal (USR2) to the job like Slurm does: the job
    stops the script with SIGTERM (it checkpoints), submitit requeues, the new job resumes."""
    submitit = pytest.importorskip("submitit")
    opts, exp_dir = tiny
    games, exps = experiment_file.load_config(opts[1])
    run = experiments.expand("tiny", exps, games, opts[3], experiments.Selection(seeds=[1], labels=["A"],
                                                                            extra_args=["--sleep", "120"]))[0]
    ex = submitit.LocalExecutor(folder=exp_dir / "submitit")
    ex.update_parameters(timeout_min=0.25, signal_delay_s=9)  # the signal comes after 6 s
    job = slurm.submit(ex, [run], grace_s=20)[0]
    assert job.result() == 0
    log = run.log.read_text()
    assert "checkpointed on signal 15" in log and "exit 143 (stopped by the" in log
    second_start = [line for line in log.splitlines() if experiments.START.match(line)][1]
    assert starts(run.log) == 2 and second_start.endswith(f"--resume {run.dir / 'checkpoint.pt'}")
    assert json.loads((run.dir / "eval_results.json").read_text())["resumed_from"] == str(run.dir / "checkpoint.pt")


# ----------------------------------------------------------------------------- the real script
@pytest.mark.skipif(not (ROOT / "abs_pqn_atari.py").exists(), reason="abs_pqn_atari.py not written yet")
def test_real_tiny_sweep_abs_pqn_atari(tmp_path):
    pytest.importorskip("envpool")
    tiny_flags = ("--num-envs 4 --num-steps-min 4 --num-steps-max 8 --num-steps 8 --num-minibatches 2 "
                  "--eval-episodes 1 --eval-num-envs 1 --eval-max-episode-steps 50 --no-cuda "
                  "--ref-batch-size 16 --log-every-seconds 0")
    root = tmp_path / "sweeps"
    # --scale 1.6e-6: 20M -> 32 environment steps, two iterations of 4 envs x L = 4 or 8
    out = sweep_cli("run", "atari10-batches", "--games", "Pong", "--seeds", "1", "--labels", "ABS", "Small",
                    "--scale", "0.0000016", "--workers", "2", "--root", str(root), "--extra-args", tiny_flags,
                    timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout + out.stderr
    for label, adapt in (("ABS", True), ("Small", False)):
        res = json.loads((root / "atari10-batches" / label / "Pong-v5__1" / "eval_results.json").read_text())
        assert res["env_id"] == "Pong-v5" and res["seed"] == 1 and res["args"]["adapt"] is adapt
        assert res["total_timesteps"] == 32 and res["eval"]["episodes"] == 1
    out = sweep_cli("status", "atari10-batches", "--root", str(root), "--scale", "0.0000016")
    assert re.search(r"ABS\s+Pong-v5\s+1\s+0\s+0\s+0\s+0", out.stdout), out.stdout
    # A run directory left with only event files (stopped before its first checkpoint) starts afresh, and TensorBoard
    # shows that run's events only; one with a checkpoint is resumed with the same flags, without a warning.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    small, abs_dir = root / "atari10-batches" / "Small" / "Pong-v5__1", root / "atari10-batches" / "ABS" / "Pong-v5__1"
    (small / "eval_results.json").unlink()
    (small / "checkpoint.pt").unlink()
    (abs_dir / "eval_results.json").unlink()
    out = sweep_cli("run", "atari10-batches", "--games", "Pong", "--seeds", "1", "--labels", "ABS", "Small",
                    "--scale", "0.0000016", "--workers", "2", "--root", str(root), "--extra-args", tiny_flags,
                    timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(list(small.glob("events.out.tfevents.*"))) == 2 and (small / "eval_results.json").exists()
    acc = EventAccumulator(str(small), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("charts/SPS")] == [32]  # one run's row, not [32, 32] from two runs
    log = (root / "atari10-batches" / "ABS" / "logs" / "Pong-v5__1.log").read_text()
    assert "resumed" in log and "ignoring" not in log and (abs_dir / "eval_results.json").exists()
    out = sweep_cli("status", "atari10-batches", "--root", str(root))  # the full-length grid: not done
    assert re.search(r"ABS\s+Pong-v5\s+0\s+0\s+0\s+0\s+0\s+0\s+1", out.stdout), out.stdout


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="Linux autogroup scheduling only")
def test_a_niced_sweep_gives_its_runs_session_group_its_niceness():
    """A run starts in a session of its own, a new autogroup at niceness 0 whatever the sweep's; the sweep sets it
    to its own (here 7 above the suite's), and leaves it alone at niceness 0 (tested when the suite runs at 0)."""
    code = textwrap.dedent(f"""
        import os, subprocess, sys
        sys.path.insert(0, {str(ROOT)!r})  # the reproduce package
        from reproduce import local_pool
        def group_nice(nice):
            os.nice(nice)
            p = subprocess.Popen(["sleep", "10"], start_new_session=True)
            read = lambda: open(f"/proc/{{p.pid}}/autogroup").read().split()[-1]
            before = read()
            local_pool.share_niceness(p.pid)
            print(before, read())
            p.kill()
        group_nice(int(sys.argv[1]))
    """)
    # relative to the suite's own niceness (a suite run under `nice -n 19` cannot test the niceness-0 case)
    own = os.nice(0)
    for nice, expected in ((0, f"0 {own}"), (7, f"0 {min(own + 7, 19)}")):
        p = subprocess.run([sys.executable, "-c", code, str(nice)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.split("\n")[0] == expected, (nice, p.stdout, p.stderr)


def test_workers_divide_the_cores_and_a_users_thread_flag_wins(tmp_path):
    """Each local worker's run gets cores // workers threads for torch and envpool, as flags the script has (the
    MuJoCo script has no envpool); a thread flag the user gave (experiment, label or --extra-args) is kept."""
    assert {"--torch-threads", "--env-threads", "--stop-at-step"} <= experiments.script_flags("abs_pqn_atari.py")
    assert "--torch-threads" in experiments.script_flags("abs_ppo_mujoco.py")
    assert "--env-threads" not in experiments.script_flags("abs_ppo_mujoco.py")
    assert experiments.script_flags("no_such_script.py") == frozenset()
    pqn_run = experiments.Run("e", "L", "abs_pqn_atari.py", "Pong-v5", 1, 10, 0, (), tmp_path)
    ppo_run = experiments.Run("e", "L", "abs_ppo_mujoco.py", "Hopper-v4", 1, 10, 0, (), tmp_path)
    assert "--torch-threads" not in pqn_run.command()  # no worker split asked for: the scripts' defaults
    pqn_cmd, ppo_cmd = (r.command() for r in experiments.with_threads([pqn_run, ppo_run], 3))
    assert pqn_cmd[-4:] == ["--torch-threads", "3", "--env-threads", "3"]
    assert ppo_cmd[-2:] == ["--torch-threads", "3"] and "--env-threads" not in ppo_cmd
    mine = dataclasses.replace(pqn_run, flags=("--torch_threads=2",), threads=3)
    assert mine.command()[-3:] == ["--torch_threads=2", "--env-threads", "3"]
    out = sweep_cli("run", "atari10-early", "--games", "Pong", "--workers", "2", "--dry-run", "--root", str(tmp_path))
    threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
    commands = [line.split() for line in out.stdout.splitlines() if line.startswith("python")]
    assert len(commands) == 2 and all(c[-6:] == ["--stop-at-step", "2000000", "--torch-threads", threads,
                                                 "--env-threads", threads] for c in commands), out.stdout
    assert "4,000,000 steps" in out.stdout  # the prefix's steps, not 2 x 20M


def test_docs_state_the_slurm_stop_lead_and_wait():
    """docs/running.md and docs/reproducing.md give --signal-delay-s's default and the wait it leaves the script, as
    sweep.py sets them (the wait: the delay less 30 s)."""
    delay = sweep.parse_args(["run", "mujoco"]).signal_delay_s
    assert "grace_s=max(10, args.signal_delay_s - 30)" in (ROOT / "reproduce" / "sweep.py").read_text()
    running = " ".join((ROOT / "docs" / "running.md").read_text().split())
    reproducing = " ".join((ROOT / "docs" / "reproducing.md").read_text().split())
    assert f"`--signal-delay-s` ({delay} s) before the time limit, and waits `--signal-delay-s` - 30 = {delay - 30} s" \
        in running
    assert f"If the longest is above {delay - 30} s" in running
    assert f"`--signal-delay-s` ({delay} s) before its time limit" in reproducing
    assert f"waits {delay - 30} s" in reproducing
