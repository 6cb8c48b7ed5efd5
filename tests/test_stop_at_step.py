"""--stop-at-step in every script: a prefix of a longer protocol. A run stopped at step S and resumed (with
--resume alone) follows, step by step, the schedules (epsilon, the annealed learning rate, PER's beta) of a run that
never stopped, because every schedule is computed from --total-timesteps; the prefix's result is kept beside the
final one, and the resumed environments are seeded with seed + S (abs_utils.env_seed). Real tiny runs on real
environments; fixed batches, so that both runs log at the same steps."""
import json
import os
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, GENERIC, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
COMMON = [*CPU, "--log-every-seconds", "0", "--checkpoint-every", "0", "--eval-episodes", "1"]
TOTAL, STOP = 640, 320  # a stop mid-way
SCHEDULES = ("charts/epsilon", "charts/learning_rate", "charts/per_beta")


def run(script, argv, out):
    p = preloaded.run([sys.executable, SCRIPTS[script].path, *argv], capture_output=True, text=True,
                      timeout=600, cwd=out, env=ENV)
    assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
    return p


def schedules(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in SCHEDULES if tag in acc.Tags()["scalars"]}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_stopped_and_resumed_run_follows_the_schedules_of_an_unstopped_one(script, tmp_path):
    total, stop = TOTAL, STOP
    base = [*SCRIPTS[script].fixed, *SCRIPTS[script].moving, *COMMON, "--total-timesteps", str(total), "--output-dir",
            str(tmp_path)]
    run(script, [*base, "--run-name", "straight"], tmp_path)
    p = run(script, [*base, "--run-name", "prefix", "--stop-at-step", str(stop)], tmp_path)
    assert f"(stop at {stop})" in p.stdout
    prefix = json.loads((tmp_path / "prefix" / "eval_results.json").read_text())
    assert stop <= prefix["global_step"] < total and prefix["total_timesteps"] == total
    assert prefix["complete"] is False and prefix["args"]["stop_at_step"] == stop
    assert prefix["eval"]["episodes"] == 1  # the prefix is evaluated at its stop

    p = run(script, ["--resume", str(tmp_path / "prefix" / "checkpoint.pt")], tmp_path)  # no stop: to the end
    # One rule in every script: the environments restart from a reset seeded with seed + global_step.
    assert f"seeded with {1 + prefix['global_step']}" in p.stdout
    final = json.loads((tmp_path / "prefix" / "eval_results.json").read_text())
    assert final["global_step"] >= total and final["complete"] is True and final["args"]["stop_at_step"] is None
    kept = tmp_path / "prefix" / f"eval_results_at_{prefix['global_step']}.json"
    assert json.loads(kept.read_text()) == prefix  # the prefix's result is never overwritten

    straight, resumed = schedules(tmp_path / "straight"), schedules(tmp_path / "prefix")
    assert straight and set(straight) == set(resumed)
    for tag, values in straight.items():
        assert resumed[tag].keys() == values.keys(), tag
        after = [s for s in values if s > prefix["global_step"]]
        assert after and len(set(values.values())) > 2, tag  # the schedule moves, also after the stop
        assert all(resumed[tag][s] == pytest.approx(v, rel=1e-6, abs=1e-9) for s, v in values.items()), tag


def test_stop_at_step_checks(tmp_path):
    """Outside [1, --total-timesteps]: one line, exit 2, nothing created. On --resume, a stop at or below the
    checkpoint's step is refused (the run is there already); the checkpoint's own stop is not inherited."""
    script, flags = GENERIC, [*SCRIPTS[GENERIC].fixed, *SCRIPTS[GENERIC].moving]
    for bad in ("0", "-5", "1000"):
        p = preloaded.run([sys.executable, SCRIPTS[script].path, *flags, *COMMON, "--total-timesteps", "640",
                           "--stop-at-step", bad, "--output-dir", str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=ENV)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--stop-at-step must be in [1, " in p.stderr
        assert not (tmp_path / "runs").exists()
    run(script, [*flags, *COMMON, "--total-timesteps", "640", "--stop-at-step", "64", "--eval-episodes", "0",
                 "--output-dir", str(tmp_path), "--run-name", "r"], tmp_path)
    ckpt = str(tmp_path / "r" / "checkpoint.pt")
    p = preloaded.run([sys.executable, SCRIPTS[script].path, "--resume", ckpt, "--stop-at-step", "64"],
                      capture_output=True, text=True, timeout=120, cwd=tmp_path, env=ENV)
    assert p.returncode == 2 and "--stop-at-step (64) must be above the checkpoint's global_step" in p.stderr
    p = run(script, ["--resume", ckpt, "--stop-at-step", "160", "--eval-episodes", "0"], tmp_path)  # a later stop
    result = json.loads((tmp_path / "r" / "eval_results.json").read_text())
    assert 160 <= result["global_step"] < 640 and result["args"]["stop_at_step"] == 160
    assert sorted(os.listdir(tmp_path / "r")).count("eval_results_at_64.json") == 1
