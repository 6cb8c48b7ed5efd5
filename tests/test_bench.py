"""The benchmark's quick mode, shrunk further with --scale, on the PQN group: real processes, real numbers."""
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abs_pqn_atari as pqn  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
import throughput  # noqa: E402


def test_scaled_multiplies_only_total_timesteps():
    assert throughput.scaled("--a 1 --total-timesteps 1000 --b 2", 0.25) == \
        ["--a", "1", "--total-timesteps", "250", "--b", "2"]


def test_summarize_medians_and_ratios():
    rows = [[{"returncode": 0, "sps": s, "steady_sps": 2 * s, "peak_rss_mb": 10.0} for s in (100, 120, 110)],
            [{"returncode": 0, "sps": s, "steady_sps": s + 99, "peak_rss_mb": 12.0} for s in (99, 90, 105)],
            [{"returncode": 1, "peak_rss_mb": 5.0}]]
    out = throughput.summarize(rows)
    assert [o["sps"] for o in out[:2]] == [110, 99] and out[2]["sps"] is None
    assert [o["steady_sps"] for o in out[:2]] == [220, 198]
    assert out[0]["ratio"] == 1.0 and out[1]["ratio"] == pytest.approx(0.9) and out[2]["ratio"] is None


def test_markdown_keeps_the_rows_when_the_baseline_failed():
    rows = [[{"returncode": 1, "peak_rss_mb": 5.0, "name": "base", "command": "a"}],
            [{"returncode": 0, "sps": 90.0, "steady_sps": 95.0, "peak_rss_mb": 6.0, "name": "abs", "command": "b"}]]
    out = throughput.summarize(rows)
    results = {"mode": "quick", "machine": "m", "date": "d", "rounds": 1, "groups": {"g": out},
               "env_only": {"num_envs": 16, "sps": None, "error": "x"}}
    lines = throughput.markdown(results).splitlines()
    assert any(line.startswith("| base | failed |") for line in lines)
    assert any(line.startswith("| abs | 90 | 95 | - |") for line in lines), lines


def test_a_row_the_budget_skipped_is_reported_but_is_no_failure():
    skipped = {"name": "late", "returncode": None, "peak_rss_mb": 0.0, "error": "skipped: the budget was spent"}
    crashed = {"name": "broken", "returncode": 1, "peak_rss_mb": 1.0, "error": "Traceback ..."}
    ok = {"name": "fine", "returncode": 0, "sps": 5.0, "steady_sps": 5.0, "peak_rss_mb": 1.0}
    results = {"groups": {"g": throughput.summarize([[ok], [skipped]])}, "env_only": {"sps": 1.0}}
    assert throughput.failures(results) == ([], ["late"])
    results["groups"]["h"] = throughput.summarize([[crashed]])
    assert throughput.failures(results) == (["broken"], ["late"])


def test_steady_sps_is_the_rate_over_the_second_half():
    # 100 steps/s for the first 1000 steps (a slow start, e.g. compilation), then 400 steps/s.
    events = [(s, 0.0, s / 100) for s in range(0, 1001, 100)] + \
        [(1000 + s, 0.0, 10 + s / 400) for s in range(100, 1001, 100)]
    assert throughput.steady_sps(events) == pytest.approx(400)
    assert throughput.steady_sps(events[-1:]) is None  # one event: no rate


def test_speed_groups_add_only_their_flags():
    for quick in (True, False):
        table = throughput.configs(quick)
        base = table["pqn-speed"][0][2]
        assert [flags.replace(base, "") for _, _, flags in table["pqn-speed"]] == ["", " --bf16", " --compile",
                                                                                  " --bf16 --compile"]
        assert table["btr-speed"][1][2] == table["btr-speed"][0][2] + " --bf16" == table["btr"][1][2] + " --bf16"
        assert base == table["pqn"][1][2]  # the ABS row of the pqn group, L pinned at 32


def test_the_ppo_atari_group_is_selectable_and_pins_its_abs_row_at_the_baseline_L():
    for quick in (True, False):
        rows = throughput.configs(quick)["ppo-atari"]
        assert "ppo-atari" in throughput.GROUPS and [r[1] for r in rows] == ["abs_ppo_atari.py"] * 3
        base = rows[0][2].replace(" --no-adapt --num-steps 128", "")
        assert rows[1][2].startswith(base) and "--num-steps-min 128 --num-steps-max 128" in rows[1][2]
        assert rows[2][2] == base + f" --adapt-freq {2 if quick else 10}"


def test_benchmarks_page_quotes_the_ppo_atari_results_file():
    """docs/benchmarks.md's PPO-Atari table is bench/ppo-atari/results.json, row by row."""
    rows = json.loads((Path(ROOT, "bench", "ppo-atari", "results.json")).read_text())["groups"]["ppo-atari"]
    page = Path(ROOT, "docs", "benchmarks.md").read_text()
    lines = [ln for ln in page.splitlines() if ln.startswith("| PPO Atari ")]
    assert len(lines) == len(rows) == 3
    for ln, r in zip(lines, rows):
        split = " / ".join(f"{100 * r['phases'][k] / sum(r['phases'].values()):.0f}"
                           for k in ("env_seconds", "inference_seconds", "update_seconds", "adapt_seconds"))
        assert ln.split("|")[2:6] == [f" {r['sps']:.0f} ", f" {r['steady_sps']:.0f} ", f" {r['ratio']:.3f} ",
                                      f" {split} % "], (ln, r)


def test_quick_benchmark_pqn_group(tmp_path):
    """The command line end to end on the PQN group, two iterations per run (--scale 0.0625: 1024 steps)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "throughput.py"), "--quick", "--groups", "pqn",
                        "--rounds", "1", "--scale", "0.0625", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["env_only"]["sps"] > 0
    rows = res["groups"]["pqn"]
    assert [r["name"] for r in rows] == ["PQN fixed L=32", "PQN + ABS, L pinned at 32", "PQN + ABS, L in [16, 64]",
                                         "PQN + GNS, L pinned at 32"]
    assert rows[0]["ratio"] == 1.0 and rows[0]["phases"]["adapt_seconds"] == 0.0  # fixed L: no divergence phase
    for r in rows:
        assert r["returncode"] == 0 and r["sps"] > 0 and r["steady_sps"] > 0 and r["peak_rss_mb"] > 50
        assert set(r["phases"]) == {"env_seconds", "inference_seconds", "update_seconds", "adapt_seconds"}
        assert r["command"].startswith("python ") and "--total-timesteps 1024" in r["command"]
    storage = lambda L: pqn.Rollout.allocate(L, 16, (4, 84, 84), "meta").nbytes  # noqa: E731
    assert rows[0]["storage_bytes"] == storage(32) and rows[2]["storage_bytes"] == storage(64)
    md = (tmp_path / "results.md").read_text()
    assert md.count("| PQN") == 4 and "Environment only" in md and "| steady SPS |" in md


def test_the_divergence_phase_is_timed_where_abs_measures(tmp_path):
    """adapt_seconds > 0 for ABS once it has measured (K = 2 here, 3 iterations: once); the fixed-L row's 0 is
    checked by the pipeline test above."""
    flags = throughput.with_steps(shlex.split(throughput.configs(True)["pqn"][1][2]), 3 * 16 * 32)  # L pinned at 32
    row = throughput.run_variant("abs_pqn_atari.py", flags, tmp_path, "--adapt-freq 2 --no-cuda")
    assert row["returncode"] == 0, row.get("error")
    assert row["phases"]["adapt_seconds"] > 0.0


def test_gns_vs_abs_cost_reports_per_call_and_per_run_shares(tmp_path):
    out = tmp_path / "cost.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gns_vs_abs_cost.py"), "--num-envs", "8",
                        "--num-steps", "4", "--ref-batch-size", "16", "--micro-batches", "4", "--repeats", "2",
                        "--adapt-freq", "10", "--json", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["batch"] == 32 and len(res["abs_seconds"]) == len(res["gns_seconds"]) == len(res["update_seconds"]) == 2
    t_abs, t_gns, upd = res["abs_median_s"], res["gns_median_s"], res["update_median_s"]
    assert min(t_abs, t_gns, upd) > 0
    assert res["abs_run_share_max"] == pytest.approx(t_abs / (10 * upd + t_abs))
    assert res["gns_run_share_max"] == pytest.approx(t_gns / (10 * upd + t_gns))
    assert "per run at K = 10" in p.stdout


def test_gpu_groups_are_the_paper_settings_and_weights():
    table = throughput.configs(False)
    pqn_rows, btr_rows = table["pqn-gpu"], table["btr-gpu"]
    assert all("--num-envs 128" in f and "Breakout-v5" in f for _, _, f in pqn_rows)
    assert pqn_rows[0][2].endswith("--no-adapt --num-steps 32") and "--adapt-freq 50" in pqn_rows[2][2]
    assert pqn_rows[4][2] == pqn_rows[1][2] + " --bf16" and pqn_rows[5][2] == pqn_rows[1][2] + " --compile"
    assert pqn_rows[3][1] == "gns_pqn_atari.py" and "--gns-freq 50" in pqn_rows[3][2]
    # BTR: the default network and batch range (no --no-impala, no --batch-size flags), fixed vs ABS vs --bf16
    assert btr_rows[0][2] == btr_rows[1][2] + " --no-adapt" and btr_rows[2][2] == btr_rows[1][2] + " --bf16"
    assert "--no-impala" not in btr_rows[1][2] and "--batch-size" not in btr_rows[1][2]
    assert [throughput.weight(s, f) for _, s, f in pqn_rows + btr_rows] == [1, 1, 1, 1, 1, 3, 2, 2, 2]
    assert throughput.with_steps(["--a", "1", "--total-timesteps", "9"], 5) == ["--a", "1", "--total-timesteps", "5"]


def test_time_limit_stops_a_run_that_still_counts(tmp_path):
    """A run stopped by SIGTERM at its time limit checkpoints, exits 143, and keeps its SPS and the steps reached.
    Nothing here depends on how busy the machine is: the limit (1 s) passes during start-up, so the SIGTERM goes at
    the first progress line, however late that comes, and the run then ends at the end of an iteration."""
    flags = throughput.scaled(throughput.configs(True)["pqn"][0][2], 100)  # far more steps than a test runs
    row = throughput.run_variant("abs_pqn_atari.py", flags, tmp_path, "--no-cuda", time_limit=1)
    assert row["stopped"] and row["returncode"] == 143, row.get("error")
    assert row["term_seconds"] >= 1 and row["step_at_term"] > 0  # sent after the limit, once the loop printed
    assert 0 < row["step_at_term"] <= row["steps"] < 1638400 and row["steps"] % (16 * 32) == 0
    assert row["sps"] > 0 and row["steady_sps"] > 0 and row["speed_from"] == "events" and row["phases"]
    log = (tmp_path / "log.txt").read_text()
    assert f"stopped by signal 15 at global_step {row['steps']};" in log  # the events reach the checkpoint's step
    assert (tmp_path / "bench" / "checkpoint.pt").exists()
    summary = throughput.summarize([[row]])[0]
    assert summary["stopped_rounds"] == 1 and summary["sps"] == row["sps"] and "cuda_peak_bytes" not in summary


def test_last_progress_reads_the_scripts_progress_lines():
    log = ("run runs/x on cpu\nstep 512/4096 | SPS 90 | L 32 | return n/a | ETA 0:00:40\n"
           "step 1024/4096 (stop at 2048) | SPS 101 | L 32 | return 1.0 | ETA 0:00:10\n")
    assert throughput.last_progress(log) == (1024, 101, False)
    assert throughput.last_progress(log + "step 2048/4096 (stop at 2048) | SPS 99 | L 32\n") == (2048, 99, True)
    assert throughput.last_progress("step 3008/3000 | SPS 140 | batch 64\neval: mean 1.0\n") == (3008, 140, True)
    assert throughput.last_progress("step 1\n") is None and throughput.last_progress("") is None


def fake_run(tmp_path, body: str) -> str:
    """A stand-in training script (a few lines of Python): what a real one does at the moments that matter here."""
    script = tmp_path / "fake.py"
    script.write_text("import signal, sys, time\n" + body)
    (tmp_path / "bench").mkdir()
    return str(script)


def test_a_stopped_run_that_printed_progress_keeps_its_speed_whatever_its_exit(tmp_path):
    """A SIGTERM during a run's end-of-run work (Python's own handler back, at interpreter exit) ends it with -15
    before its events are read: the run printed its progress, so the row has that speed, not a failure."""
    script = fake_run(tmp_path, "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
                      "print('step 2048/8192 | SPS 321 | L 32 | return n/a | ETA 0:00:18', flush=True)\n"
                      "time.sleep(60)\n")
    row = throughput.run_variant(script, [], tmp_path, "", time_limit=0.5, kill_after=30)
    assert row["stopped"] and row["returncode"] == -15 and "error" not in row, row
    assert (row["steps"], row["sps"], row["steady_sps"], row["speed_from"]) == (2048, 321.0, 321.0, "log")
    row["name"] = "fake"
    results = {"mode": "quick", "machine": "m", "date": "d", "rounds": 1,
               "groups": {"g": throughput.summarize([[row]])}, "env_only": {"num_envs": 16, "sps": 10.0}}
    assert throughput.failures(results) == ([], [])
    line = next(ln for ln in throughput.markdown(results).splitlines() if ln.startswith("| fake |"))
    assert line.split("|")[2:6] == [" 321* ", " 321 ", " 1.000 ", " - "]  # stopped (*), no phase split


def test_a_run_past_its_last_step_is_left_to_end(tmp_path):
    """A run whose loop printed its last step gets no SIGTERM, however long its end-of-run work: it is left to end
    by itself (within kill_after of its share)."""
    script = fake_run(tmp_path, "signal.signal(signal.SIGTERM, lambda *_: (print('SIGTERM', flush=True), "
                      "sys.exit(9)))\n"
                      "print('step 3008/3000 | SPS 140 | batch 64 | return n/a | ETA 0:00:00', flush=True)\n"
                      "time.sleep(2)\n")
    row = throughput.run_variant(script, [], tmp_path, "", time_limit=0.2, kill_after=30)
    assert not row["stopped"] and row["returncode"] == 0 and "term_seconds" not in row, row
    assert "SIGTERM" not in (tmp_path / "log.txt").read_text() and row["wall_seconds"] >= 2


def test_gpu_summary_counts_verdicts_and_names_the_key_numbers(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    import summary

    (tmp_path / "tests.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_cuda" name="test_a"/>'
        '<testcase classname="tests.test_cuda" name="test_b"><failure message="assert 1 == 2&#10;more">x</failure>'
        '</testcase><testcase classname="tests.test_cuda" name="test_c"><skipped message="no CUDA"/></testcase>'
        '</testsuite></testsuites>')
    counts, problems = summary.test_verdicts(tmp_path / "tests.xml")
    assert counts == {"passed": 1, "failed": 1, "error": 0, "skipped": 1}
    assert problems == ["failed: `test_b`: assert 1 == 2"]
    assert summary.test_verdicts(tmp_path / "missing.xml")[1][0].startswith("no tests.xml")
    rows = [{"name": "PQN fixed L=32", "sps": 1000.0, "steady_sps": 1100.0, "ratio": 1.0, "cuda_peak_bytes": 2**30},
            {"name": "PQN + ABS", "sps": 990.0, "steady_sps": 1045.0, "ratio": 0.95, "stopped_rounds": 1},
            {"name": "PQN + GNS", "sps": None, "error": "Traceback\nRuntimeError: boom"}]
    lines = summary.key_numbers({"env_only": {"num_envs": 128, "sps": 25000.0}, "groups": {"pqn-gpu": rows}})
    assert lines == ["- envpool alone, 128 envs, random actions (the ceiling): **25000 SPS**",
                     "- PQN fixed L=32: 1000 SPS, steady **1100**, peak CUDA 1024 MiB",
                     "- PQN + ABS: 990 SPS, steady **1045**, 0.950 x PQN fixed L=32, stopped at its time limit in "
                     "1 round(s)",
                     "- PQN + GNS: **no result** (RuntimeError: boom)"]


# Every numeric flag of throughput.py at values outside its domain, and the flags naming paths or other flags.
BAD_INPUTS = [(["--rounds", v], "--rounds") for v in ("-1", "0", "nan", "inf", "x", "1.5", "101", str(10**12))] + \
    [(["--scale", v], "--scale") for v in ("-1", "0", "nan", "inf", "-inf", "x", "1e300")] + \
    [(["--budget", v], "--budget") for v in ("-1", "0", "10", "nan", "inf", "x")] + \
    [(["--extra-args", '"--no-cuda'], "--extra-args '\"--no-cuda': No closing quotation"),
     (["--extra-args=--x 'y"], "--extra-args \"--x 'y\": No closing quotation"),
     (["--out", "FILE"], "--out FILE: is a file, not a directory"),
     (["--out", "FILE/sub"], "--out FILE/sub: FILE is a file, so no directory can be made below it"),
     (["--keep-logs", "FILE"], "--keep-logs FILE: is a file, not a directory"),
     (["--groups", "nope"], "argument --groups: invalid choice: 'nope'")]


@pytest.mark.parametrize("argv,message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2_before_any_run(tmp_path, argv, message):
    """Checked before the first run starts (a bad --out was found only after the runs), and nothing is written."""
    (tmp_path / "FILE").write_text("x")
    argv = [a.replace("FILE", str(tmp_path / "FILE")) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "throughput.py"), "--quick", *argv],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p
    assert p.stderr.startswith("throughput.py: error: ") and message.replace("FILE", str(tmp_path / "FILE")) in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["FILE"] and (tmp_path / "FILE").read_text() == "x"


def test_a_failed_run_prints_its_command_and_its_last_output(tmp_path):
    """The cause of a failure is on the console beside the run, not only in results.json: here a learning rate that
    ruins the weights at the first update (the scripts' non-finite stop, exit 3)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "throughput.py"), "--quick", "--groups", "ppo",
                        "--rounds", "1", "--scale", "0.01", "--extra-args", "--learning-rate 1e30 --no-cuda", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    for name, flags in (("PPO fixed L=2048", "--no-adapt --num-steps 2048 "), ("PPO + ABS", "")):
        block = p.stdout.split(f"round 1/1 {name}: failed (3)\n")[1].splitlines()
        assert block[0].startswith("  command: python abs_ppo_mujoco.py --env-id HalfCheetah-v5 ") and \
            block[0].endswith(f"{flags}--learning-rate 1e30 --no-cuda"), block[:3]
        assert block[1] == "  last lines of its output:" and any("non-finite" in ln for ln in block[2:20]), block
    assert p.stderr.endswith("failed: PPO fixed L=2048, PPO + ABS\n")


def test_the_ppo_threads_group_differs_only_in_torch_threads():
    for quick in (True, False):
        rows = throughput.configs(quick)["ppo-threads"]
        assert "ppo-threads" in throughput.GROUPS and [r[1] for r in rows] == ["abs_ppo_mujoco.py"] * 2
        assert [r[2].replace(rows[0][2].removesuffix(" --torch-threads 1"), "") for r in rows] == \
            [" --torch-threads 1", " --torch-threads 2"]
        assert "--no-adapt --num-steps 2048" in rows[0][2]  # CleanRL's PPO


def test_running_page_quotes_the_ppo_threads_record():
    """docs/running.md's reason for PPO's default --torch-threads 1 is bench/ppo-threads/results.json."""
    record = json.loads(Path(ROOT, "bench", "ppo-threads", "results.json").read_text())
    one, two = record["groups"]["ppo-threads"]
    assert one["name"].endswith("1 torch thread") and two["name"].endswith("2 torch threads")
    assert record["rounds"] == one["rounds"] == two["rounds"] >= 3 and not one["stopped_rounds"]
    page = " ".join(Path(ROOT, "docs", "running.md").read_text().split())
    quoted = (f"steady SPS {one['steady_sps']:.0f} with 1 thread and {two['steady_sps']:.0f} with 2, "
              f"a ratio of {two['ratio']:.3f}")
    assert quoted in page, quoted
    assert f"--rounds {record['rounds']} --out bench/ppo-threads" in page and "busy 2-core machine" in page


def test_extra_args_a_script_refuses_stop_the_benchmark_with_the_scripts_line(tmp_path):
    """Every variant would fail the same: the first refusal (exit 2) ends the benchmark with the script's own line,
    which names the flag and the value, and exit 2."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "throughput.py"), "--quick", "--groups", "ppo",
                        "--extra-args", "--seed x", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=300)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.startswith("error: PPO fixed L=2048 (abs_ppo_mujoco.py) refused its flags")
    assert "--seed" in last and "'x'" in last, last
