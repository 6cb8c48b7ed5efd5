"""--capture-video: a tiny run writes its evaluation's first games as decodable MP4 files, one frame per step plus
the first, named by run, episode and return, and its evaluation's numbers are those of the same run without videos;
MinAtar's frames are the package's own colours; MuJoCo without a rendering backend is one line, exit 2, before the
run directory exists."""
import json
import os
import re
import signal
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, ROOT, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

sys.path.insert(0, ROOT)
import abs_utils as U  # noqa: E402
from test_docs import args_defaults, section, table_rows  # noqa: E402 (the docs' table readers)

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# 3 games on 2 envs, both recorded (the default --video-episodes is 2): the first two counted games are filmed
EVAL = ["--eval-episodes", "3", "--eval-num-envs", "2", "--eval-epsilon", "0.3"]
SHAPES = {"abs_pqn_atari.py": (210, 160, 3), "abs_pqn_minatar.py": (160, 160, 3), "abs_ppo_mujoco.py": (480, 480, 3)}


def run(script, flags, tmp_path, name, env=ENV):
    s = SCRIPTS[script]
    return preloaded.run([sys.executable, s.path, *s.fixed, *CPU, "--torch-threads", "1", *flags, "--output-dir",
                          str(tmp_path), "--run-name", name], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env=env)


def check_videos(run_dir, script) -> None:
    """The videos are the first two counted games (eval.returns[0] and [1]): name, frame count and size."""
    with open(run_dir / "eval_results.json") as f:
        ev = json.load(f)["eval"]
    files = sorted(os.listdir(run_dir / "videos"))
    assert files == [f"{run_dir.name}__episode{i}__return{U.video.return_text(ev['returns'][i])}.mp4" for i in range(2)]
    for i, name in enumerate(files):
        frames = U.read_video(str(run_dir / "videos" / name))
        assert frames.shape == (ev["lengths"][i] + 1, *SHAPES[script])  # the reset's frame, then one per step
        assert frames.std() > 0  # a picture, not a blank


@pytest.mark.parametrize("script", ["abs_pqn_atari.py", "abs_pqn_minatar.py"])
def test_capture_video_films_the_first_games_and_changes_no_number(script, tmp_path):
    """Run here for abs_pqn_atari.py and abs_pqn_minatar.py (abs_ppo_mujoco.py: below, where EGL renders).
    gns_pqn_atari.py, abs_ppo_atari.py and abs_btr.py are not run: they film through the same
    abs_utils.play_atari_games, called by an evaluate() that tests/test_copies.py pins to abs_pqn_atari.py's (the
    same, or with its listed differences)."""
    plain, filmed = run(script, EVAL, tmp_path, "plain"), run(script, [*EVAL, "--capture-video"], tmp_path, "filmed")
    assert plain.returncode == 0 and filmed.returncode == 0, plain.stderr + filmed.stderr
    results = [json.loads((tmp_path / name / "eval_results.json").read_text())["eval"] for name in ("plain", "filmed")]
    assert results[0] == results[1]  # returns, lengths, capped, action_counts
    check_videos(tmp_path / "filmed", script)
    assert not (tmp_path / "plain" / "videos").exists()
    assert not [f for f in os.listdir(tmp_path / "filmed" / "videos") if f.startswith(".")]  # no partial file left


def test_minatar_frames_are_the_packages_own_colours():
    """MinAtarEnvs.render against the colour map minatar.Environment.display_state builds (matplotlib's), cell by
    cell, on a game with objects on screen."""
    import seaborn
    from matplotlib import colors

    mn = SCRIPTS["abs_pqn_minatar.py"].module()
    envs = mn.MinAtarEnvs("Seaquest-MinAtar", 2, seed=3)
    envs.reset()
    for _ in range(30):
        envs.step(np.array([1, 2]))
    n = envs._states.shape[3]
    cmap = colors.ListedColormap([(0, 0, 0)] + list(seaborn.color_palette("cubehelix", n)))
    norm = colors.BoundaryNorm(list(range(n + 2)), n + 1)
    frames = envs.render([0, 1], cell=4)
    for i in range(2):
        state = envs.games[i].state()
        numerical = np.amax(state * np.reshape(np.arange(n) + 1, (1, 1, -1)), 2) + 0.5  # display_state's
        expected = np.round(cmap(norm(numerical))[..., :3] * 255).astype(np.uint8)
        assert len(np.unique(numerical)) > 2
        assert np.array_equal(frames[i][::4, ::4], expected) and frames[i].shape == (40, 40, 3)


def test_mujoco_without_a_rendering_backend_is_one_line_before_the_run(tmp_path):
    """No display, and MuJoCo's window-system backend (GLFW, its default): no context can be opened."""
    headless = {**{k: v for k, v in ENV.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}, "MUJOCO_GL": "glfw"}
    done = run("abs_ppo_mujoco.py", ["--capture-video"], tmp_path, "r", env=headless)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --capture-video needs MuJoCo's offscreen rendering")
    assert "MUJOCO_GL=egl" in lines[0] and "MUJOCO_GL=osmesa" in lines[0]
    assert os.listdir(tmp_path) == []
    # docs/video.md quotes the line as it reads with MUJOCO_GL unset, its cause cut short by ", ..."
    (quoted,) = [line.strip() for line in PAGE.read_text().splitlines() if "error: --capture-video needs" in line]
    start, end = quoted.replace("MUJOCO_GL=(unset)", "MUJOCO_GL=glfw").split(", ...")
    assert lines[0].startswith(start) and lines[0].endswith(end), (quoted, lines[0])


def test_mujoco_capture_video_with_egl(tmp_path):
    env = {**ENV, "MUJOCO_GL": "egl"}
    probe = preloaded.run([sys.executable, "-c", SCRIPTS["abs_ppo_mujoco.py"].module().RENDER_PROBE,
                           "InvertedPendulum-v5"], capture_output=True, text=True, env=env, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"no EGL rendering here: {probe.stderr.strip().splitlines()[-1:]}")
    flags = ["--env-id", "InvertedPendulum-v5", "--eval-episodes", "3"]
    plain, filmed = (run("abs_ppo_mujoco.py", [*flags, *more], tmp_path, name, env=env)
                     for name, more in (("plain", []), ("filmed", ["--capture-video"])))
    assert plain.returncode == 0 and filmed.returncode == 0, plain.stderr + filmed.stderr
    results = [json.loads((tmp_path / name / "eval_results.json").read_text())["eval"] for name in ("plain", "filmed")]
    assert results[0] == results[1]
    check_videos(tmp_path / "filmed", "abs_ppo_mujoco.py")


def test_a_resume_keeps_the_earlier_evaluations_videos(tmp_path):
    """A prefix run (--stop-at-step) filmed, then resumed to the end: the first evaluation's videos stay, beside its
    eval_results_at_<step>.json, as videos_at_<step>/."""
    first = run("abs_pqn_minatar.py", [*EVAL, "--capture-video", "--stop-at-step", "32"], tmp_path, "r")
    assert first.returncode == 0, first.stderr
    earlier = sorted(os.listdir(tmp_path / "r" / "videos"))
    s = SCRIPTS["abs_pqn_minatar.py"]
    done = preloaded.run([sys.executable, s.path, "--resume", str(tmp_path / "r" / "checkpoint.pt")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path / "r" / "videos_at_32")) == earlier and len(earlier) == 2
    assert (tmp_path / "r" / "eval_results_at_32.json").is_file()
    check_videos(tmp_path / "r", "abs_pqn_minatar.py")


def test_a_resume_after_a_stopped_filmed_evaluation_keeps_none_of_its_videos(tmp_path):
    """SIGTERM during a filmed evaluation, after its first video: a resume with --no-capture-video (and another
    --eval-episodes) evaluates again and removes that video, which is of no game of the new evaluation."""
    s = SCRIPTS["abs_pqn_minatar.py"]
    proc = preloaded.Popen([sys.executable, s.path, *s.fixed, *CPU, "--torch-threads", "1", "--eval-episodes", "1000",
                            "--eval-num-envs", "2", "--capture-video", "--output-dir", str(tmp_path), "--run-name",
                            "r"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           env={**ENV, "PYTHONUNBUFFERED": "1"})
    lines = []
    for line in proc.stdout:  # until the first game is filmed (1000 games to go: seconds)
        lines.append(line)
        if line.startswith("video: "):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, "".join(lines)[-1000:] + out[-1000:] + err[-1000:]
    assert "stopped by signal 15 during the evaluation" in out
    stale = [n for n in os.listdir(tmp_path / "r" / "videos") if n.endswith(".mp4")]
    assert stale and not (tmp_path / "r" / "eval_results.json").exists()

    done = preloaded.run([sys.executable, s.path, "--resume", str(tmp_path / "r" / "checkpoint.pt"), "--eval-episodes",
                          "3", "--no-capture-video"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env=ENV)
    assert done.returncode == 0, done.stderr
    assert f"removed {len(stale)} video(s) from {tmp_path / 'r' / 'videos'}" in done.stdout
    assert json.loads((tmp_path / "r" / "eval_results.json").read_text())["eval"]["episodes"] == 3
    assert not (tmp_path / "r" / "videos").exists() and not [n for n in os.listdir(tmp_path / "r") if "videos" in n]


def test_an_evaluation_without_video_never_imports_the_video_library():
    code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import abs_pqn_minatar as mn; "
            "args = mn.Args(eval_episodes=2, eval_num_envs=2, eval_max_episode_steps=20); "
            "mn.evaluate(mn.QNetwork(4, 3), args, 1, torch.device('cpu'), run_dir=sys.argv[2]); "
            "assert 'imageio_ffmpeg' not in sys.modules, 'imported'; print('ok')")
    done = subprocess.run([sys.executable, "-c", code, ROOT, "/nonexistent"], capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_return_in_a_video_name_has_no_exponent():
    assert [U.video.return_text(r) for r in (1234500.0, -21.0, 12.5, 3124.56789, 0.00125, -0.0)] == [
        "1234500", "-21", "12.5", "3124.57", "0.00125", "0"]
    assert U.video.video_name("r", 3, 1234500.0) == "r__episode3__return1234500.mp4"


def test_the_kept_videos_folder_is_named_in_the_run_directory_whatever_its_parents_are_called(tmp_path):
    """keep_earlier_result renames videos/ beside eval_results_at_<step>.json by the file's own name: a parent folder
    named like it (here eval_results_at_old/) is left as it is."""
    run_dir = tmp_path / "eval_results_at_old" / "r"
    (run_dir / "videos").mkdir(parents=True)
    (run_dir / "videos" / "r__episode0__return1.mp4").write_bytes(b"")
    (run_dir / "eval_results.json").write_text(json.dumps({"global_step": 32}))
    U.keep_earlier_result(str(run_dir), 64)
    assert sorted(os.listdir(run_dir)) == ["eval_results_at_32.json", "videos_at_32"]
    assert os.listdir(run_dir / "videos_at_32") == ["r__episode0__return1.mp4"]


# ---------------------------------------------------------------- docs/video.md restates the code: kept equal to it
PAGE = Path(ROOT) / "docs" / "video.md"


def play_default(field) -> str:
    """play.py's default of a flag as docs/video.md writes it: on/off, a number, or what None stands for (the text
    --help shows, tyro.conf.arg's help_behavior_hint)."""
    import play

    if field.default is None:
        (hint,) = [m.help_behavior_hint for m in typing.get_type_hints(play.PlayArgs, include_extras=True)[
            field.name].__metadata__ if hasattr(m, "help_behavior_hint")]
        return hint[len("(default: "):-1]
    if isinstance(field.default, bool):
        return "on" if field.default else "off"
    return str(field.default)


def doc_defaults(heading) -> dict:
    """--flag -> its default as the page's `| flag | default | what |` table in that section writes it."""
    found = {}
    for flags, values, _ in table_rows(section("video.md", heading), "flag"):
        names = re.findall(r"`(--[a-z-]+)`", flags)
        quoted = [values] if len(names) == 1 else [v.strip() for v in values.split(",")]
        assert len(names) == len(quoted), f"{flags} | {values}"
        found.update({name: value.replace("`", "") for name, value in zip(names, quoted)})
    return found


def test_the_pages_flag_tables_are_the_scripts_and_play_pys_defaults():
    import dataclasses

    import play

    table = doc_defaults("## `--capture-video`")
    for script in SCRIPTS:  # every script's Args, the same defaults
        defaults = args_defaults(script)
        assert {"--capture-video": "on" if defaults["capture_video"] else "off",
                "--video-episodes": str(defaults["video_episodes"])} == table, script
    rows = {flags: what for flags, _, what in table_rows(section("video.md", "## `--capture-video`"), "flag")}
    assert "`--eval-episodes`" in rows["`--capture-video`"] and "--eval-episodes" not in rows["`--video-episodes`"]
    problems = list(U.common_problems(SCRIPTS["abs_pqn_minatar.py"].module().Args(capture_video=True,
                                                                                    eval_episodes=0)))
    assert any(not ok and message.startswith("--capture-video") and "--eval-episodes" in message
               for ok, message in problems)
    fields = {"--" + f.name.replace("_", "-"): play_default(f) for f in dataclasses.fields(play.PlayArgs)
              if f.name != "path"}
    assert doc_defaults("## `play.py`") == fields


def test_the_pages_frame_sizes_and_rates_are_the_scripts():
    """Size: what tests/test_video.py's videos have (SHAPES); rate: each script's fps (MuJoCo: the task's)."""
    rows = table_rows(section("video.md", "## `--capture-video`"), "scripts")
    assert len(rows) == 3
    for scripts, _, size in rows:
        files = re.findall(r"`([a-z_]+\.py)`", scripts)
        (shape,) = {SHAPES[f] for f in files if f in SHAPES}
        assert re.match(r"(\d+) x (\d+)", size).groups() == (str(shape[0]), str(shape[1])), size
        for f in files:
            source = (Path(ROOT) / f).read_text()
            fps = re.findall(r"videos_of\(args, run[_.]dir, fps=(\d+)\)", source)
            if "render_fps" in size:
                assert fps == ["0"] and 'fps=env.metadata["render_fps"]' in source, f
            else:
                assert fps == [re.search(r"(\d+) per second", size).group(1)], f


def test_the_pages_video_library_is_the_pinned_one():
    pin = re.search(r"^imageio-ffmpeg==([\d.]+)", (Path(ROOT) / "requirements.txt").read_text(), re.M).group(1)
    quoted = re.search(r"\[imageio-ffmpeg\]\([^)]*\) ([\d.]+) \(`requirements.txt`\)", PAGE.read_text()).group(1)
    assert quoted == pin
