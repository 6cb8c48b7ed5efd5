"""play.py: a tiny run's saved model.pt and checkpoint.pt, played back, give the run's own evaluation (returns,
lengths, action counts) on its seed, for every script; the results (and videos) go to a new folder beside the file and
the run's own files stay as they were; a file of another game, script or network is one line, exit 2, nothing made."""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys

import pytest
import torch

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, ROOT, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

sys.path.insert(0, ROOT)
import abs_utils as U  # noqa: E402
import play  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# PPO-Atari's evaluation samples its policy unless --eval-greedy: a sampling evaluation is repeatable in play.py
# (seeded), not the run's own draws (docs/video.md)
GREEDY = {"abs_ppo_atari.py": ["--eval-greedy"]}
EVAL = ["--eval-episodes", "2"]


def train(script, tmp_path, *flags, name="r"):
    s = SCRIPTS[script]
    done = preloaded.run([sys.executable, s.path, *s.fixed, *CPU, "--torch-threads", "1", *EVAL,
                          *GREEDY.get(script, []), "--save-model", *flags, "--output-dir", str(tmp_path),
                          "--run-name", name], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    return tmp_path / name


def contents(folder) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        play.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_a_saved_model_and_checkpoint_play_back_the_runs_own_evaluation(script, tmp_path):
    run_dir = train(script, tmp_path)
    before = contents(run_dir)
    own = json.loads(before["eval_results.json"])["eval"]
    for saved in ("model.pt", "checkpoint.pt"):
        result = play.main([str(run_dir / saved), "--no-cuda", "--torch-threads", "1"])
        assert result["eval"] == own and result["eval_seed"] == 1 + 10_000, saved
        assert result["algo"] == SCRIPTS[script].name and result["run_name"] == "r"
        # the played file by name and SHA-256: no path of this machine in the record
        assert result["played"] == saved and result["played_sha256"] == hashlib.sha256(before[saved]).hexdigest()
        assert "path" not in result["play_args"] and "output_dir" not in result["play_args"]
    plays = sorted(p.name for p in run_dir.iterdir() if p.is_dir())
    assert len(plays) == 2 and all(p.startswith("play-") for p in plays)
    for p in plays:
        assert os.listdir(run_dir / p) == ["play_results.json"]
    assert contents(run_dir) == before  # the run's own files: only read


def test_play_with_video_episodes_seed_and_output_dir(tmp_path):
    run_dir = train("abs_pqn_minatar.py", tmp_path)
    before = contents(run_dir)
    result = play.main([str(run_dir / "model.pt"), "--no-cuda", "--episodes", "3", "--seed", "7", "--capture-video",
                        "--video-episodes", "1", "--output-dir", str(tmp_path)])
    folder = next(p for p in tmp_path.iterdir() if p.name.startswith("play-"))
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(before) and contents(run_dir) == before
    ev = json.loads((folder / "play_results.json").read_text())["eval"]
    assert ev == result["eval"] and ev["episodes"] == 3 and result["eval_seed"] == 7
    videos = os.listdir(folder / "videos")
    assert videos == [f"r__episode0__return{U.video.return_text(ev['returns'][0])}.mp4"]
    assert len(U.read_video(str(folder / "videos" / videos[0]))) == ev["lengths"][0] + 1


def test_a_checkpoint_plays_the_evaluation_flags_of_the_runs_own_evaluation(tmp_path, capsys):
    """A signal stops the evaluation; the resume that evaluates again takes another --eval-episodes and
    --eval-num-envs, which checkpoint.pt (written before the evaluation) does not hold: play.py takes them from the
    run's eval_results.json at the same step, says so, and plays the run's own evaluation again."""
    s = SCRIPTS["abs_pqn_minatar.py"]
    proc = preloaded.Popen([sys.executable, s.path, *s.fixed, *CPU, "--torch-threads", "1", "--eval-episodes", "1000",
                            "--output-dir", str(tmp_path), "--run-name", "r"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**ENV, "PYTHONUNBUFFERED": "1"})
    for line in proc.stdout:  # until the evaluation (1000 games) has begun
        if line.startswith("evaluating"):
            break
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    ckpt = tmp_path / "r" / "checkpoint.pt"
    done = preloaded.run([sys.executable, s.path, "--resume", str(ckpt), "--eval-episodes", "3", "--eval-num-envs",
                          "2"], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    assert torch.load(ckpt, weights_only=True)["args"]["eval_episodes"] == 1000
    own = json.loads((tmp_path / "r" / "eval_results.json").read_text())["eval"]
    capsys.readouterr()
    result = play.main([str(ckpt), "--no-cuda", "--torch-threads", "1"])
    assert result["eval"] == own and own["episodes"] == 3 and result["eval_flags_from"] == "eval_results.json"
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("evaluation flags"))
    assert "--eval-episodes 3 (the file's: 1000)" in line and "--eval-num-envs 2 (the file's: 1)" in line


def test_ctrl_c_while_playing_is_one_line_naming_the_unfinished_play(tmp_path):
    """A real SIGINT to `python play.py` during its games: one line of play.py's own (not the training scripts'
    'before training started'), exit 130, naming the play folder it leaves unfinished."""
    run_dir = train("abs_pqn_minatar.py", tmp_path)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "play.py"), str(run_dir / "model.pt"), "--no-cuda",
                             "--torch-threads", "1", "--episodes", "1000000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**ENV, "PYTHONUNBUFFERED": "1"})
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("playing "):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    (folder,) = [p for p in os.listdir(run_dir) if p.startswith("play-")]
    assert proc.returncode == 130 and "Traceback" not in err, "".join(lines) + out + err
    assert out.strip().splitlines()[-1] == (
        f"stopped by signal 2 while playing: the run's files are unchanged (play.py only reads them); "
        f"{run_dir / folder} holds an unfinished play (no play_results.json): remove it and play again")
    assert os.listdir(run_dir / folder) == []


def test_help_names_the_path_the_choices_and_each_default_once(capsys):
    with pytest.raises(SystemExit) as e:
        play.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "[-h] [OPTIONS] PATH" in out and "Play a saved agent again" in out
    assert "(default: None)" not in out and "(default: the run's --eval-episodes)" in out
    choices = re.search(r"--algo \{([^}]*)\}", re.sub(r"\s*│\s*", "", out)).group(1)
    assert sorted(c.strip() for c in choices.split(",")) == sorted(SCRIPTS[s].name for s in SCRIPTS)


def test_a_file_of_another_game_script_or_network_is_one_line(tmp_path, capsys):
    atari, minatar = train("abs_pqn_atari.py", tmp_path, name="a"), train("abs_pqn_minatar.py", tmp_path, name="m")
    model = str(atari / "model.pt")
    assert "is a file of Breakout-v5, not of Pong-v5" in refused([model, "--env-id", "Pong-v5"], capsys)
    assert "is a file of abs_pqn_atari.py, not of abs_btr.py" in refused([model, "--algo", "abs_btr"], capsys)
    saved = torch.load(model, weights_only=True)
    saved.pop("digest")  # the changed files below have none (a file whose digest differs: "is damaged")
    other = tmp_path / "other"
    other.mkdir()
    torch.save({**saved, "q_network": torch.load(minatar / "model.pt", weights_only=True)["q_network"]},
               other / "model.pt")  # MinAtar's weights under an Atari run's flags
    assert "'q_network' does not fit abs_pqn_atari.py's network" in refused([str(other / "model.pt")], capsys)
    torch.save({**saved, "algo": "abs_pqn_minatar"}, other / "model.pt")  # an Atari run's flags, MinAtar's script
    assert "abs_pqn_minatar.py cannot build its network for Breakout-v5" in refused([str(other / "model.pt")], capsys)
    torch.save({**saved, "digest": "0" * 64}, other / "model.pt")
    assert "is damaged" in refused([str(other / "model.pt")], capsys)
    torch.save({**saved, "args": {**saved["args"], "num_envs": "x"}}, other / "model.pt")
    assert "holds --num-envs = 'x', which is not a int; it is damaged" in refused([str(other / "model.pt")], capsys)
    torch.save({**saved, "algo": "ppo"}, other / "model.pt")
    assert "is not a model.pt or checkpoint.pt of these scripts" in refused([str(other / "model.pt")], capsys)
    assert "no such file" in refused([str(other / "none.pt")], capsys)
    assert refused([model, "--episodes", "0"], capsys).startswith("error: --episodes must be")
    torch.save({**saved, "args": {**saved["args"], "eval_episodes": 0}}, other / "model.pt")
    assert "the run evaluated no games (--eval-episodes 0)" in refused([str(other / "model.pt")], capsys)
    assert os.listdir(other) == ["model.pt"] and not [p for p in os.listdir(atari) if p.startswith("play-")]


def test_the_committed_videos_are_the_published_runs_own_evaluation():
    """results/minatar-batches/videos/: play.py of the study's checkpoints (docs/video.md) gave the published runs'
    own evaluation, with every game filmed (--video-episodes 100 over its 20 environments); the one video kept of each
    is chosen by the page's rule, the game whose return is closest to the run's median (the first such game), and
    is the game its name and play_results.json say. Together they stay small."""
    here = ROOT + "/results/minatar-batches"
    played, size = sorted(os.listdir(f"{here}/videos")), 0
    assert played
    for folder in played:
        label, run = folder.split("-", 1)
        with open(f"{here}/videos/{folder}/play_results.json") as f:
            result = json.load(f)
        with open(f"{here}/runs/minatar-batches/{label}/{run}/eval_results.json") as f:
            ev = json.load(f)["eval"]
        assert result["eval"] == ev and result["eval_flags_from"] == "eval_results.json"
        assert result["play_args"]["video_episodes"] >= max(ev["episodes"], result["args"]["eval_num_envs"])
        chosen = min(range(ev["episodes"]), key=lambda i: (abs(ev["returns"][i] - ev["median"]), i))
        (video,) = os.listdir(f"{here}/videos/{folder}/videos")
        assert video == f"{run}__episode{chosen}__return{U.video.return_text(ev['returns'][chosen])}.mp4"
        frames = U.read_video(f"{here}/videos/{folder}/videos/{video}")
        assert len(frames) == ev["lengths"][chosen] + 1
        size += os.path.getsize(f"{here}/videos/{folder}/videos/{video}")
    assert size < 400_000


def test_play_knows_every_script_of_the_table_and_its_network_key():
    """play.py's --algo choices and network keys are the scripts of tests/scripts.py, the one table of them: a new
    script that play.py does not know fails here."""
    assert set(play.SCRIPTS) == {s.name for s in SCRIPTS.values()}
    assert all(play.NETWORK_KEY.get(s.name, "q_network") == s.network for s in SCRIPTS.values())
