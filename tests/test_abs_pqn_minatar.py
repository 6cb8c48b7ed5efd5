"""Tests of abs_pqn_minatar.py: the MinAtar environments against the minatar package's own games stepped by hand,
the network against purejaxql's layer order and initialisation, the divergence against an independent computation,
and end-to-end runs of the script on every MinAtar game with tiny settings. The ABS schedule, the epoch rule and the
Q(lambda) targets are copies of abs_pqn_atari.py's (tests/test_copies.py pins them; tests/test_abs_pqn_atari.py
tests them by hand); what every script shares (bad input, SIGTERM and resume, the non-finite stop, --help) is in
tests/test_runs_all_scripts.py, with this script's own BAD_INPUTS below."""
import json
import math
import os
import sys

import minatar
import numpy as np
import pytest
import torch
import torch.nn as nn
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abs_pqn_minatar as mn  # noqa: E402

S = SCRIPTS["abs_pqn_minatar.py"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# The number of channels and minimal actions of each game, from the minatar package's documentation.
SHAPES = {"Asterix-MinAtar": (4, 5), "Breakout-MinAtar": (4, 3), "Freeway-MinAtar": (7, 3),
          "Seaquest-MinAtar": (10, 6), "SpaceInvaders-MinAtar": (6, 4)}

# (argv, the flag the one error line must name), run by tests/test_runs_all_scripts.py
BAD_INPUTS = [
    (["--env-id", "Breakout-v5"], "--env-id"),
    (["--env-id", "MinAtar/Breakout-v1"], "--env-id"),
    (["--sticky-action-prob", "1.5"], "--sticky-action-prob"),
    (["--max-episode-steps", "-1"], "--max-episode-steps"),
    (["--obs-divisor", "0"], "--obs-divisor"),
    (["--num-envs", "0"], "--num-envs"),
    (["--num-minibatches", "0"], "--num-minibatches"),
    (["--num-steps", "0"], "--num-steps"),
    (["--num-steps-min", "0"], "--num-steps-min"),
    (["--num-steps-max", "0"], "--num-steps-max"),
    (["--num-steps-min", "80", "--num-steps-max", "64"], "--num-steps-min"),
    (["--num-envs", "12", "--num-minibatches", "8"], "--num-minibatches"),
    (["--no-adapt", "--num-steps", "3", "--num-envs", "8", "--num-minibatches", "16"], "--num-minibatches"),
    (["--adapt-freq", "0"], "--adapt-freq"),
    (["--window", "0"], "--window"),
    (["--burn-in", "0"], "--burn-in"),
    (["--ref-batch-size", "0"], "--ref-batch-size"),
    (["--update-epochs", "0"], "--update-epochs"),
    (["--epochs-ref-steps", "0"], "--epochs-ref-steps"),
    (["--update-epochs", "1000", "--epochs-ref-steps", "1"], "--update-epochs"),
    (["--ema-beta", "0"], "--ema-beta"),
    (["--divergence-low", "0.5", "--divergence-high", "0.4"], "--divergence-low"),
    (["--learning-rate", "0"], "--learning-rate"),
    (["--max-grad-norm", "-1"], "--max-grad-norm"),
    (["--gamma", "1.5"], "--gamma"),
    (["--q-lambda", "-0.1"], "--q-lambda"),
    (["--start-e", "2"], "--start-e"),
    (["--end-e", "2"], "--end-e"),
    (["--exploration-fraction", "2"], "--exploration-fraction"),
    (["--eval-episodes", "-1"], "--eval-episodes"),
    (["--eval-epsilon", "2"], "--eval-epsilon"),
    (["--eval-num-envs", "0"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "0"], "--eval-max-episode-steps"),
    (["--total-timesteps", "0"], "--total-timesteps"),
    (["--checkpoint-every", "-1"], "--checkpoint-every"),
    (["--log-every-seconds", "-1"], "--log-every-seconds"),
]


def run(args, tmp_path, timeout=600):
    return preloaded.run([sys.executable, S.path, *args, "--output-dir", str(tmp_path)], capture_output=True,
                         text=True, timeout=timeout, cwd=tmp_path, env=ENV)


def scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ------------------------------------------------------------------ the environments against the package's games
@pytest.mark.parametrize("env_id", list(mn.GAMES))
def test_envs_are_the_packages_games_with_envpools_autoreset(env_id):
    """Each env is the minatar game of its seed, stepped by hand here with the same actions: observations (as uint8
    channels first), rewards and terminals agree; an ended game resets on the next step, which ignores its action and
    pays nothing; an episode's length counts its acted steps."""
    E, steps = 3, 400
    envs = mn.MinAtarEnvs(env_id, E, seed=7)
    games = [minatar.Environment(mn.GAMES[env_id]) for _ in range(E)]  # sticky 0.1 and ramping: the defaults
    for i, g in enumerate(games):
        g.seed(7 + i)
    obs, info = envs.reset()
    for g in games:
        g.reset()
    channels, num_actions = SHAPES[env_id]
    assert obs.dtype == np.uint8 and obs.shape == (E, channels, 10, 10) and envs.action_space.n == num_actions
    action_set = games[0].minimal_action_set()
    rng, ended, lengths, ends = np.random.default_rng(0), np.zeros(E, bool), np.zeros(E, int), 0
    for _ in range(steps):
        actions = rng.integers(0, num_actions, E)
        obs, reward, term, trunc, info = envs.step(actions)
        for i, g in enumerate(games):
            if ended[i]:
                g.reset()
                want_r, want_t, lengths[i] = 0.0, False, 0
            else:
                want_r, want_t = g.act(action_set[actions[i]])
                lengths[i] += 1
            assert reward[i] == want_r and term[i] == want_t
            np.testing.assert_array_equal(obs[i], g.state().transpose(2, 0, 1).astype(np.uint8))
        assert not trunc.any()
        np.testing.assert_array_equal(info["elapsed_step"], lengths)
        ended = term.copy()
        ends += int(term.sum())
    assert ends > 0 or env_id == "Freeway-MinAtar"  # Freeway's games last 2,500 steps


def test_max_episode_steps_truncates_and_the_next_step_resets():
    envs = mn.MinAtarEnvs("Freeway-MinAtar", 2, seed=0, sticky_action_prob=0.0, max_episode_steps=5)
    envs.reset()
    for t in range(1, 6):
        _, _, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))
        assert not term.any() and list(info["elapsed_step"]) == [t, t]
    assert trunc.all()  # the 5th step reached the cap: a time limit, not a terminal
    _, reward, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))  # the reset step
    assert not (term.any() or trunc.any()) and list(info["elapsed_step"]) == [0, 0] and not reward.any()


def test_sticky_actions_and_ramping_reach_the_games():
    envs = mn.MinAtarEnvs("Asterix-MinAtar", 2, seed=0, sticky_action_prob=0.0, difficulty_ramping=False)
    assert all(g.sticky_action_prob == 0.0 and g.env.ramping is False for g in envs.games)
    envs = mn.MinAtarEnvs("Asterix-MinAtar", 2, seed=0)
    assert all(g.sticky_action_prob == 0.1 and g.env.ramping is True for g in envs.games)


# ------------------------------------------------------------------ the network
def test_network_is_purejaxqls_layers_and_init():
    torch.manual_seed(0)
    net = mn.QNetwork(6, 4)
    assert net.conv.weight.shape == (16, 6, 3, 3) and net.dense[0].weight.shape == (128, 16 * 8 * 8)
    assert net.head.weight.shape == (4, 128) and net.conv_norm.normalized_shape == (16,)
    assert all(m.eps == 1e-6 for m in net.modules() if isinstance(m, nn.LayerNorm))  # Flax's epsilon
    # he_normal (variance 2 / fan_in) and lecun_normal (1 / fan_in), truncated at 2 std: the variance comes back
    for layer, scale in ((net.conv, 2.0), (net.dense[0], 2.0), (net.head, 1.0)):
        w = layer.weight.detach()
        fan_in = w[0].numel()
        assert w.var().item() == pytest.approx(scale / fan_in, rel=0.15)
        assert w.abs().max().item() <= 2 * math.sqrt(scale / fan_in) / 0.87962566103423978 + 1e-6
        assert not layer.bias.any()


def test_forward_is_the_layers_by_hand():
    """The conv's LayerNorm normalises each grid cell's 16 channels (Flax's last axis), not the whole map."""
    torch.manual_seed(1)
    net = mn.QNetwork(4, 3, obs_divisor=255.0)
    x = (torch.rand(5, 4, 10, 10) < 0.3).to(torch.uint8)
    with torch.no_grad():
        h = nn.functional.conv2d(x.float() / 255.0, net.conv.weight, net.conv.bias)  # [5, 16, 8, 8]
        mean, var = h.mean(dim=1, keepdim=True), h.var(dim=1, unbiased=False, keepdim=True)
        h = (h - mean) / torch.sqrt(var + 1e-6)
        h = torch.relu(h * net.conv_norm.weight[:, None, None] + net.conv_norm.bias[:, None, None])
        h = h.permute(0, 2, 3, 1).reshape(5, -1)  # channels last, as Flax flattens
        h = torch.relu(nn.functional.layer_norm(net.dense[0](h), (128,), eps=1e-6))
        expected = net.head(h)
        torch.testing.assert_close(net(x), expected, rtol=1e-5, atol=1e-5)


def test_divergence_of_the_network_matches_numpy():
    torch.manual_seed(2)
    a, b = mn.QNetwork(4, 3), mn.QNetwork(4, 3)
    states = (torch.rand(300, 4, 10, 10) < 0.2).to(torch.uint8)
    with torch.no_grad():
        qa, qb = a(states).numpy(), b(states).numpy()
    expected = float(np.mean(np.argmax(qa, axis=1) != np.argmax(qb, axis=1)))
    assert 0 < expected < 1
    assert mn.behavioral_divergence(a, b, states) == pytest.approx(expected)
    assert mn.behavioral_divergence(a, a, states) == 0.0


def test_defaults_are_purejaxqls_and_the_papers():
    a = mn.Args()
    assert (a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs, a.total_timesteps) == (128, 32, 32, 2, 10**7)
    assert (a.learning_rate, a.anneal_lr, a.max_grad_norm, a.gamma, a.q_lambda) == (5e-4, True, 10.0, 0.99, 0.65)
    assert (a.start_e, a.end_e, a.exploration_fraction) == (1.0, 0.05, 0.1)
    assert (a.num_steps_min, a.num_steps_max, a.adapt_freq, a.window, a.ema_beta) == (16, 64, 50, 10, 0.1)
    assert (a.divergence_low, a.divergence_high, a.ref_batch_size) == (0.05, 0.95, 2048)
    assert (a.sticky_action_prob, a.difficulty_ramping, a.max_episode_steps) == (0.1, True, 0)
    assert [mn.update_epochs_for(L, 2, 32) for L in (16, 32, 64)] == [2, 2, 4]


def test_rollout_storage_is_uint8_at_L_max():
    r = mn.Rollout.allocate(64, 128, (10, 10, 10), "cpu")
    assert r.obs.dtype == torch.uint8 and r.obs.shape == (64, 128, 10, 10, 10)
    assert r.nbytes < 10 * 2**20


# ------------------------------------------------------------------ the script end to end
@pytest.mark.parametrize("env_id", list(mn.GAMES))
def test_end_to_end_every_game_with_abs(env_id, tmp_path):
    """ABS moves L within a tiny run on each game; one event per finished game; eval_results.json with the cap."""
    p = run([*S.adaptive, *CPU, "--env-id", env_id, "--total-timesteps", "1500", "--run-name", "r"], tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((tmp_path / "r" / "eval_results.json").read_text())
    assert res["algo"] == "abs_pqn_minatar" and res["env_id"] == env_id and res["complete"]
    assert res["global_step"] >= 1500 and res["args"]["eval_max_episode_steps"] == 150
    ev = res["eval"]
    assert ev["episodes"] == 2 and all(0 < n <= 150 for n in ev["lengths"])
    assert len(ev["action_counts"]) == SHAPES[env_id][1] and sum(ev["action_counts"]) > 0
    tags = scalars(tmp_path / "r")
    L = [v for _, v in tags["adapt/num_steps"]]
    assert L[0] == 4 and max(L) > 4 and all(4 <= x <= 16 for x in L)
    assert {"adapt/divergence", "charts/epsilon", "losses/td_loss", "perf/env_seconds"} <= set(tags)
    assert tags["eval/mean_return"][0][1] == pytest.approx(ev["mean"])


def test_end_to_end_fixed_baseline_keeps_L_and_gymnax_conditions_cut_episodes(tmp_path):
    """--no-adapt with --track-divergence measures delta and keeps L; --max-episode-steps cuts every training
    episode (one event each, length at most the cap); no sticky actions with --sticky-action-prob 0."""
    p = run([*S.fixed, *CPU, "--total-timesteps", "640", "--track-divergence", "--adapt-freq", "2",
             "--env-id", "Freeway-MinAtar", "--sticky-action-prob", "0", "--max-episode-steps", "12",
             "--eval-max-episode-steps", "12", "--eval-episodes", "3", "--run-name", "f"], tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    tags = scalars(tmp_path / "f")
    assert {v for _, v in tags["adapt/num_steps"]} == {4.0} and len(tags["adapt/divergence"]) >= 5
    lengths = [v for _, v in tags["charts/episodic_length"]]
    assert lengths and all(n == 12 for n in lengths)  # Freeway never ends by itself this early: every cut is the cap
    ev = json.loads((tmp_path / "f" / "eval_results.json").read_text())["eval"]
    assert ev["lengths"] == [12, 12, 12] and ev["capped"] == 3


def test_save_model_loads_into_the_network(tmp_path):
    p = run([*S.fixed, *CPU, "--save-model", "--eval-episodes", "0", "--run-name", "m"], tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    state = torch.load(tmp_path / "m" / "model.pt", weights_only=True)
    net = mn.QNetwork(4, 3)
    net.load_state_dict(state["q_network"])


# ------------------------------------------------------------------ learning (pytest -m learning)
@pytest.mark.learning
def test_learns_breakout(tmp_path):
    """500k steps of PQN + ABS on Breakout (purejaxql's settings, scaled schedules) reach well above a random
    policy's 0.42 (reproduce/minatar_random.csv): the greedy evaluation of 20 games."""
    p = run(["--env-id", "Breakout-MinAtar", *CPU, "--torch-threads", "1", "--total-timesteps", "500000",
             "--eval-episodes", "20", "--run-name", "l"], tmp_path, timeout=3600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    ev = json.loads((tmp_path / "l" / "eval_results.json").read_text())["eval"]
    assert ev["mean"] > 3.0, ev
