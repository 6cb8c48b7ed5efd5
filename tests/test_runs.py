"""Tests of reproduce/runs.py: finding, parsing and checking eval_results.json, and choosing the runs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import report  # noqa: E402
from reproduce import runs  # noqa: E402
from report_helpers import row, section, write_prefix_run, write_run  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402


def test_read_run_scores_from_the_mean_or_the_returns_and_names_an_empty_evaluation(tmp_path):
    write_run(tmp_path / "a", "Amidar-v5", 1, 250.0)
    assert runs.read_run("ABS", tmp_path / "a").score == 250.0
    res = json.loads((tmp_path / "a" / "eval_results.json").read_text())
    res["eval"] = {"episodes": 2, "returns": [100.0, 300.0], "mean": None}  # mean null: use the returns
    (tmp_path / "a" / "eval_results.json").write_text(json.dumps(res))
    assert runs.read_run("ABS", tmp_path / "a").score == 200.0
    # What a script writes with --eval-episodes 0: null statistics, no returns.
    res["eval"] = {"episodes": 0, "returns": [], "lengths": [], "mean": None, "std": None, "median": None,
                   "min": None, "max": None, "capped": 0}
    (tmp_path / "a" / "eval_results.json").write_text(json.dumps(res))
    with pytest.raises(ValueError, match="no evaluation episodes"):
        runs.read_run("ABS", tmp_path / "a")
    _, skipped = runs.find_runs("ABS", tmp_path)
    assert len(skipped) == 1 and "no evaluation episodes" in skipped[0]


def test_total_timesteps_keeps_one_length_and_lists_the_others(tmp_path):
    write_run(tmp_path / "ABS" / "full", "Amidar-v5", 1, 200.0, total=1000)
    write_run(tmp_path / "ABS" / "mini", "Amidar-v5", 2, 50.0, total=20)
    dirs = ["--runs", f"ABS={tmp_path / 'ABS'}", "--reps", "20"]
    res = subprocess.run([*tool("report"), *dirs, "--out", str(tmp_path / "o1")], capture_output=True, text=True,
                         timeout=120, env=tool_env())
    assert res.returncode == 2 and "pass --total-timesteps N to report only the runs of length N" in res.stderr
    assert report.main([*dirs, "--out", str(tmp_path / "o2"), "--total-timesteps", "1000"]) == 0
    data = section((tmp_path / "o2" / "report.md").read_text(), "Data")
    assert row(data, "ABS")[2] == "1" and f"ABS: other length, left out: `{tmp_path / 'ABS' / 'mini'}` (20 steps, " \
        "not 1,000)" in data
    assert report.main([*dirs, "--out", str(tmp_path / "o3"), "--total-timesteps", "5"]) == 1  # no run of 5 steps


def test_a_run_found_twice_keeps_the_newer_copy(tmp_path):
    write_run(tmp_path / "ABS" / "a", "Amidar-v5", 1, 100.0)
    write_run(tmp_path / "ABS" / "b", "Amidar-v5", 1, 300.0)
    older, newer = tmp_path / "ABS" / "b" / "eval_results.json", tmp_path / "ABS" / "a" / "eval_results.json"
    os.utime(older, (1_000_000, 1_000_000))  # "b" is the older copy, whatever the order of the directory walk
    data, _, notes = report.collect({"ABS": tmp_path / "ABS"}, None, {})
    assert data["ABS"]["Amidar"][1].score == 100.0
    assert notes == [f"ABS: Amidar seed 1 found twice; kept the newer `{newer.parent}`, ignored `{older.parent}`"]


GOOD = {"algo": "abs_pqn_atari", "env_id": "Amidar-v5", "seed": 1, "global_step": 1000, "total_timesteps": 1000,
        "eval": {"episodes": 2, "returns": [1.0, 3.0], "mean": 2.0}, "args": {"env_id": "Amidar-v5", "seed": 1}}


def with_(**changes):
    """GOOD with top-level keys changed (a value of `...` deletes the key)."""
    res = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if v is ...:
            del res[k]
        else:
            res[k] = v
    return json.dumps(res)


# (name, the file's text, what the reason names)
MALFORMED = [
    ("list", "[]", "holds a list, not a JSON object"),
    ("null", "null", "holds null, not a JSON object"),
    ("string", '"eval"', 'holds the string "eval", not a JSON object'),
    ("eval-string", with_(eval="x"), 'eval is the string "x", not an object'),
    ("eval-missing", with_(eval=...), "no eval"),
    ("env-id-number", with_(env_id=5), "env_id is the number 5, not an environment id"),
    ("env-id-missing", json.dumps({**json.loads(with_(env_id=...)), "args": {"seed": 1}}), "no env_id"),
    ("seed-string", with_(seed="abc"), 'seed is the string "abc", not an integer'),
    ("seed-bool", with_(seed=True), "seed is the boolean true, not an integer"),
    ("seed-missing", json.dumps({**json.loads(with_(seed=...)), "args": {}}), "no seed"),
    ("mean-string", with_(eval={"episodes": 2, "mean": "2"}), 'eval.mean is the string "2", not a number'),
    ("returns-string", with_(eval={"episodes": 2, "mean": None, "returns": "ab"}),
     'eval.returns is the string "ab", not a list of numbers'),
    ("args-list", with_(args=[]), "args is a list, not an object"),
    ("window-string", with_(args={"env_id": "Amidar-v5", "window": "10"}), 'args.window is the string "10"'),
    ("adapt-string", with_(args={"env_id": "Amidar-v5", "adapt": "false"}), 'args.adapt is the string "false"'),
    ("step-negative", with_(global_step=-5), "global_step is the number -5, not a step count"),
    ("step-string", with_(total_timesteps="1000"), 'total_timesteps is the string "1000", not a step count'),
    ("complete-string", with_(complete="no"), 'complete is the string "no", not a boolean'),
    ("stop-string", with_(args={"env_id": "Amidar-v5", "stop_at_step": "100"}),
     'args.stop_at_step is the string "100", not an integer or null'),
    ("seconds-string", with_(train_seconds="60"), 'train_seconds is the string "60", not a number >= 0'),
    ("seconds-negative", with_(train_seconds=-1), "train_seconds is the number -1, not a number >= 0"),
    ("capped-string", with_(eval={"episodes": 2, "mean": 1.0, "capped": "2"}),
     'eval.capped is the string "2", not an integer >= 0'),
    ("actions-negative", with_(eval={"episodes": 2, "mean": 1.0, "action_counts": [3, -1]}),
     "eval.action_counts is a list, not a list of integers >= 0"),
    ("actions-floats", with_(eval={"episodes": 2, "mean": 1.0, "action_counts": [3.5]}),
     "eval.action_counts is a list, not a list of integers >= 0"),
    ("invalid-json", '{"env_id": "Amidar-v5", ', "invalid JSON"),
    ("empty", "", "invalid JSON"),
]


@pytest.mark.parametrize("name,text,reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_read_run_names_what_is_malformed(tmp_path, name, text, reason):
    (tmp_path / "eval_results.json").write_text(text)
    with pytest.raises(runs.Malformed) as e:
        runs.read_run("A", tmp_path)
    assert reason in str(e.value)


def test_malformed_eval_results_are_listed_as_skipped_and_the_report_is_made(tmp_path):
    """Every malformed file is named in the Data section with its path and reason; the good runs are reported."""
    write_run(tmp_path / "A" / "good1", "Amidar-v5", 1, 200.0, lambda s: s / 10)
    write_run(tmp_path / "A" / "good2", "Amidar-v5", 2, 300.0, lambda s: s / 10)
    for name, text, _ in MALFORMED:
        (tmp_path / "A" / name).mkdir()
        (tmp_path / "A" / name / "eval_results.json").write_text(text)
    (tmp_path / "A" / "latin1").mkdir()
    (tmp_path / "A" / "latin1" / "eval_results.json").write_bytes(b'{"env_id": "Caf\xe9-v5"}')
    res = subprocess.run([*tool("report"), "--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "out"),
                          "--reps", "20"], capture_output=True, text=True, timeout=120, env=tool_env())
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    data = section((tmp_path / "out" / "report.md").read_text(), "Data")
    assert row(data, "A")[2] == "2"  # the two good runs
    for name, _, reason in MALFORMED:
        line = next(ln for ln in data.splitlines() if f"`{tmp_path / 'A' / name / 'eval_results.json'}`" in ln)
        assert line.startswith("- A: skipped ") and "malformed eval_results.json" in line and reason in line, line
    assert f"`{tmp_path / 'A' / 'latin1' / 'eval_results.json'}`: malformed eval_results.json (not UTF-8" in data


def test_read_run_knows_prefix_runs_and_runs_written_before_the_flag(tmp_path):
    write_prefix_run(tmp_path / "p", "Amidar-v5", 1, 10.0, stop=200, reached=208)
    r = runs.read_run("A", tmp_path / "p")
    assert (r.complete, r.total_steps, r.total_timesteps, r.window_steps, r.stop_step) == (False, 208, 1000, 1000, 200)
    assert runs.reached(r) == "200 of 1,000 steps"
    write_run(tmp_path / "old", "Amidar-v5", 1, 10.0)  # no "complete": it trained to its end
    r = runs.read_run("A", tmp_path / "old")
    assert (r.complete, r.window_steps, r.stop_step) == (True, 1000, 1000)
    assert runs.reached(r) == "the end of 1,000 steps"
