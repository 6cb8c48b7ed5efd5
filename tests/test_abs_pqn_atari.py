"""Tests of abs_pqn_atari.py: the ABS math by hand, delta and Q(lambda) against independent
computations, and end-to-end runs of the script on a real envpool game with tiny settings. What every script shares
(bad input, SIGTERM and resume, the non-finite stop, --help) is tested in tests/test_runs_all_scripts.py, with this
script's own BAD_INPUTS below."""
import copy
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abs_pqn_atari as pqn  # noqa: E402

SCRIPT = os.path.join(ROOT, "abs_pqn_atari.py")
TINY = [*SCRIPTS["abs_pqn_atari.py"].adaptive, *CPU]  # 8 envs, L in [4, 16] moving, 2 evaluation games
# One intra-op thread per run: on 2 shared cores, more threads spin against envpool's workers.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(args, tmp_path, timeout=600):
    return preloaded.run([sys.executable, SCRIPT, *args, "--output-dir", str(tmp_path)], capture_output=True,
                         text=True, timeout=timeout, cwd=tmp_path, env=ENV)


def scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ------------------------------------------------------------------ the schedule, by hand
@pytest.mark.parametrize("delta_bar, expected", [
    (0.95, 16.0), (1.0, 16.0),             # at or above delta_max: L_min
    (0.05, 64.0), (0.0, 64.0),             # at or below delta_min: L_max
    (math.sqrt(0.05 * 0.95), 40.0),        # geometric midpoint: alpha = 1/2
    (0.5, 64 - 48 * math.log(10) / math.log(19)),  # alpha = ln(0.5/0.05)/ln(0.95/0.05) = 0.78201
    (0.1, 64 - 48 * math.log(2) / math.log(19)),   # 52.700
])
def test_log_schedule_table(delta_bar, expected):
    assert pqn.divergence_to_length(delta_bar, 16, 64, 0.05, 0.95, "log") == pytest.approx(expected)


def test_log_schedule_known_decimals():
    assert pqn.divergence_to_length(0.5, 16, 64, 0.05, 0.95) == pytest.approx(26.4635, abs=1e-4)
    assert pqn.divergence_to_length(0.1, 16, 64, 0.05, 0.95) == pytest.approx(52.7004, abs=1e-4)


@pytest.mark.parametrize("delta_bar, expected", [(0.5, 40.0), (0.05, 64.0), (0.95, 16.0), (0.275, 52.0)])
def test_linear_schedule_table(delta_bar, expected):
    assert pqn.divergence_to_length(delta_bar, 16, 64, 0.05, 0.95, "linear") == pytest.approx(expected)


def test_burn_in_holds_L_min_then_ema_moves():
    s = pqn.ABSScheduler(16, 64, window=3, beta=0.1, delta_min=0.05, delta_max=0.95)
    assert s.update(0.0) == 16 and s.update(0.0) == 16 and s.L == 16.0  # fewer than W measurements
    assert s.update(0.0) == 21  # 0.9 * 16 + 0.1 * 64 = 20.8
    assert s.L == pytest.approx(20.8)
    assert s.update(0.0) == 25  # 0.9 * 20.8 + 6.4 = 25.12
    assert s.delta_bar == 0.0 and s.num_measurements == 4


def test_window_mean_drives_target():
    s = pqn.ABSScheduler(16, 64, window=2, beta=1.0, delta_min=0.05, delta_max=0.95)
    s.update(0.9)
    s.update(0.1)  # delta_bar = 0.5, beta = 1 jumps straight to the target
    assert s.L == pytest.approx(64 - 48 * math.log(10) / math.log(19))
    s.update(0.9)  # window keeps the last two: (0.1 + 0.9) / 2 = 0.5 again
    assert s.delta_bar == pytest.approx(0.5)


def test_ema_reaches_L_max_exactly():
    # After burn-in L = 64 - 48 * 0.9^k; it rounds to 64 once 48 * 0.9^k < 0.5, i.e. k = 44.
    s = pqn.ABSScheduler(16, 64, window=10, beta=0.1, delta_min=0.05, delta_max=0.95)
    for _ in range(9):
        s.update(0.01)
    for _ in range(43):
        s.update(0.01)
    assert s.num_steps == 63
    s.update(0.01)
    assert s.num_steps == 64 and s.L <= 64.0
    # (The public code's int() truncation stops below L_max: int(0.9 * 63 + 0.1 * 64) == 63 forever.)


def test_clamped_and_falls_back_to_L_min():
    s = pqn.ABSScheduler(16, 64, window=1, beta=0.5, delta_min=0.05, delta_max=0.95)
    for _ in range(100):
        s.update(0.0)
        assert 16 <= s.L <= 64
    for _ in range(100):
        s.update(1.0)
        assert 16 <= s.L <= 64
    assert s.num_steps == 16


def test_record_keeps_the_window_mean_without_moving_L():
    # Fixed-batch baselines (--no-adapt --track-divergence) log the divergence's window mean; L never moves.
    s = pqn.ABSScheduler(32, 32, window=2, beta=0.1, delta_min=0.05, delta_max=0.95)
    for d in (0.9, 0.1, 0.3):
        s.record(d)
    assert s.L == 32.0 and s.num_steps == 32 and s.delta_bar == pytest.approx(0.2) and s.num_measurements == 3
    t = pqn.ABSScheduler(16, 64, window=2, beta=1.0, delta_min=0.05, delta_max=0.95)
    t.record(0.01)
    assert t.L == 16.0 and t.update(0.01) == 64  # a recorded measurement counts towards the window


def test_scheduler_state_roundtrip():
    s = pqn.ABSScheduler(16, 64, window=3, beta=0.1, delta_min=0.05, delta_max=0.95)
    for d in (0.3, 0.2, 0.1, 0.05):
        s.update(d)
    t = pqn.ABSScheduler(16, 64, window=3, beta=0.1, delta_min=0.05, delta_max=0.95)
    t.load_state_dict(copy.deepcopy(s.state_dict()))
    assert t.update(0.07) == s.update(0.07) and t.L == s.L and list(t.history) == list(s.history)


@pytest.mark.parametrize("L, epochs", [(16, 2), (24, 2), (32, 2), (40, 3), (48, 3), (56, 4), (64, 4), (128, 8)])
def test_epoch_rule(L, epochs):
    # max(2, round(2 * L / 32)), halves rounded up: 40 -> 2.5 -> 3, 24 -> 1.5 -> 2.
    assert pqn.update_epochs_for(L, 2, 32) == epochs


# ------------------------------------------------------------------ behavioral divergence
def linear_q(weight):
    net = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    net.weight.data.copy_(weight)
    return net


def test_divergence_known_argmax_changes():
    states = torch.eye(4).repeat(5, 1)  # 20 states, greedy action of the identity net = the one-hot index
    old = linear_q(torch.eye(4))
    swap = torch.eye(4)[[1, 0, 2, 3]]  # swaps actions 0 and 1: states 0 and 1 (half of them) change
    assert pqn.behavioral_divergence(linear_q(swap), old, states) == pytest.approx(0.5)
    cycle = torch.eye(4)[[1, 2, 3, 0]]  # every greedy action changes
    assert pqn.behavioral_divergence(linear_q(cycle), old, states) == 1.0
    assert pqn.behavioral_divergence(old, copy.deepcopy(old), states) == 0.0


def test_divergence_of_real_q_network_matches_numpy():
    torch.manual_seed(0)
    old = pqn.QNetwork(6)
    new = copy.deepcopy(old)
    with torch.no_grad():
        new.head.weight.add_(0.05 * torch.randn_like(new.head.weight))
    states = torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        a_old = old(states).numpy().argmax(1)
        a_new = new(states).numpy().argmax(1)
    expected = float(np.mean(a_old != a_new))
    assert 0.0 < expected < 1.0
    assert pqn.behavioral_divergence(new, old, states) == pytest.approx(expected)
    assert pqn.behavioral_divergence(old, copy.deepcopy(old), states) == 0.0


# ------------------------------------------------------------------ Q(lambda)
def forward_view_q_lambda(r, v, term, end, gamma, lam):
    """Textbook forward view: a (1-lam)-weighted mix of n-step returns up to the trace's cut."""
    L, E = r.shape
    out = np.zeros((L, E))
    for e in range(E):
        for t in range(L):
            k = t
            while k < L - 1 and not end[k, e]:
                k += 1
            N = k - t + 1

            def n_step(n):
                g = sum(gamma**i * r[t + i, e] for i in range(n))
                return g + gamma**n * (1 - term[t + n - 1, e]) * v[t + n - 1, e]

            out[t, e] = sum((1 - lam) * lam ** (n - 1) * n_step(n) for n in range(1, N)) + lam ** (N - 1) * n_step(N)
    return out


def test_q_lambda_matches_forward_view_with_episode_ends():
    rng = np.random.default_rng(0)
    L, E = 9, 4
    r, v = rng.normal(size=(L, E)), rng.normal(size=(L, E))
    term = np.zeros((L, E))
    trunc = np.zeros((L, E))
    term[2, 0] = term[5, 0] = 1  # two episodes end inside env 0's rollout
    term[8, 1] = 1  # the last step is terminal
    trunc[4, 2] = 1  # a time-limit end: the trace is cut but it still bootstraps
    end = np.maximum(term, trunc)
    expected = forward_view_q_lambda(r, v, term, end, 0.99, 0.65)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    got = pqn.q_lambda_returns(t(r), t(v), t(term), t(end), 0.99, 0.65).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    assert got[2, 0] == pytest.approx(r[2, 0])  # terminal: no bootstrap
    assert got[4, 2] == pytest.approx(r[4, 2] + 0.99 * v[4, 2])  # truncation: one-step bootstrap


def test_q_lambda_lambda_zero_is_one_step_and_one_is_monte_carlo():
    rng = np.random.default_rng(1)
    r, v = torch.tensor(rng.normal(size=(5, 2))), torch.tensor(rng.normal(size=(5, 2)))
    z = torch.zeros(5, 2, dtype=torch.float64)
    one_step = pqn.q_lambda_returns(r, v, z, z, 0.9, 0.0)
    torch.testing.assert_close(one_step, r + 0.9 * v)
    mc = pqn.q_lambda_returns(r, v, z, z, 0.9, 1.0)
    expected = sum(0.9**i * r[i] for i in range(5)) + 0.9**5 * v[4]
    torch.testing.assert_close(mc[0], expected)


# ------------------------------------------------------------------ networks and storage
@pytest.mark.parametrize("network, linears", [("pqn", 2), ("pqn-l", 2 + 10), ("pqn-xl", 2 + 20)])
def test_networks(network, linears):
    net = pqn.QNetwork(9, network)
    out = net(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert out.shape == (3, 9)
    assert sum(isinstance(m, nn.Linear) for m in net.modules()) == linears
    # 3 conv LNs + projection LN + 2 per block
    assert sum(isinstance(m, nn.LayerNorm) for m in net.modules()) == 4 + (linears - 2)


class AuthorsMultiSkipQNetwork(nn.Module):
    """PQN-L / PQN-XL written out the way the authors' code builds it (AtariCNN + MultiSkipResidualMLP):
    conv-LN-ReLU x3, Linear(6272 -> 512) + LN with no activation = the global skip p, then per block
    h <- relu(h + Linear-LN-ReLU-Linear-LN(h)) + p, then the output Linear (their trailing LayerNorm over the
    Q-values is left out, as the README says)."""

    def __init__(self, num_actions, num_blocks):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(4, 64, 8, stride=4), nn.LayerNorm([64, 20, 20]), nn.ReLU(),
                                 nn.Conv2d(64, 128, 4, stride=2), nn.LayerNorm([128, 9, 9]), nn.ReLU(),
                                 nn.Conv2d(128, 128, 3, stride=1), nn.LayerNorm([128, 7, 7]), nn.ReLU(), nn.Flatten())
        self.inp = nn.Linear(128 * 7 * 7, 512)
        self.inp_ln = nn.LayerNorm(512)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(512, 512), nn.LayerNorm(512), nn.ReLU(),
                                                  nn.Linear(512, 512), nn.LayerNorm(512)) for _ in range(num_blocks))
        self.out = nn.Linear(512, num_actions)

    def forward(self, x):
        skip = self.inp_ln(self.inp(self.cnn(x.float() / 255.0)))
        h = skip
        for block in self.blocks:
            h = torch.relu(h + block(h))
            h = h + skip
        return self.out(h)


@pytest.mark.parametrize("network, num_blocks", [("pqn-l", 5), ("pqn-xl", 10)])
def test_multi_skip_head_is_the_authors_layer_order(network, num_blocks):
    torch.manual_seed(0)
    net = pqn.QNetwork(6, network)
    ref = AuthorsMultiSkipQNetwork(6, num_blocks)
    ours, theirs = list(net.parameters()), list(ref.parameters())
    assert [p.shape for p in ours] == [p.shape for p in theirs]  # same layers, in the same order
    with torch.no_grad():
        for a, b in zip(theirs, ours):
            a.copy_(b)
        # LayerNorm's default affine parameters (1, 0) would hide a misplaced LN: perturb them in both nets.
        for a, b in zip(theirs, ours):
            if a.dim() == 1:
                noise = 0.1 * torch.randn_like(a)
                a.add_(noise)
                b.add_(noise)
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        out, expected = net(x), ref(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    # The projection has no activation: the head sees negative features (a ReLU there would zero them).
    assert (net.projection(net.encoder(x.float() / 255.0)) < 0).any()


def test_pqn_head_keeps_the_relu_after_its_dense_layer():
    net = pqn.QNetwork(6, "pqn")
    assert [type(m) for m in net.projection] == [nn.Linear, nn.LayerNorm, nn.ReLU] and len(net.blocks) == 0


def test_learning_rate_is_constant_unless_annealed():
    assert pqn.Args().anneal_lr is False  # the paper's PQN: no annealing
    assert pqn.learning_rate_at(2.5e-4, 300, 1200, False) == 2.5e-4
    assert pqn.learning_rate_at(2.5e-4, 300, 1200, True) == pytest.approx(2.5e-4 * 0.75, rel=1e-12)


def test_rollout_storage_at_L_max_128_under_half_a_gigabyte():
    rollout = pqn.Rollout.allocate(128, 128, (4, 84, 84), "meta")
    assert rollout.obs.dtype == torch.uint8 and rollout.obs.shape == (128, 128, 4, 84, 84)
    total = rollout.nbytes
    assert total == 128 * 128 * (4 * 84 * 84 + 8 + 5 * 4)
    assert total < 0.5e9


def test_epsilon_greedy():
    q = torch.tensor([[0.0, 2.0, 1.0]] * 1000)
    actions, values = pqn.select_actions(q, 0.0)
    assert (actions == 1).all() and (values == 2.0).all()
    actions, _ = pqn.select_actions(q, 1.0)
    assert set(actions.tolist()) == {0, 1, 2}


# ------------------------------------------------------------------ flags
def test_defaults_are_valid_and_the_papers():
    args, checkpoint = pqn.parse_args([])
    assert checkpoint is None
    assert (args.num_envs, args.num_steps_min, args.num_steps_max, args.adapt_freq, args.window) == (
        128, 16, 64, 50, 10)
    assert (args.divergence_low, args.divergence_high, args.ref_batch_size, args.ema_beta) == (0.05, 0.95, 2048, 0.1)
    assert (args.update_epochs, args.epochs_ref_steps, args.num_minibatches, args.end_e) == (2, 32, 4, 0.001)


def test_compile_without_a_compiler_is_a_one_line_error(tmp_path):
    out = tmp_path / "out"
    env = {**ENV, "PATH": str(tmp_path), "CXX": "no-such-compiler"}  # nothing on PATH: no g++, no clang++
    p = preloaded.run([sys.executable, SCRIPT, "--compile", "--output-dir", str(out)], capture_output=True, text=True,
                      timeout=120, cwd=tmp_path, env=env)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "error: --compile needs a C++ compiler on PATH (g++ or clang++, or $CXX) to build its kernels; none found"]
    assert not out.exists()
    args, _ = pqn.parse_args(["--compile"])  # this machine has one
    assert args.compile


# ------------------------------------------------------------------ end to end on envpool
def check_eval_json(path, args_expected, total):
    res = json.loads(path.read_text())
    assert set(res) == {"algo", "env_id", "seed", "run_name", "global_step", "total_timesteps", "complete",
                        "train_seconds", "eval", "args"}
    assert res["algo"] == "abs_pqn_atari" and res["env_id"] == "Breakout-v5"
    assert res["total_timesteps"] == total and res["global_step"] >= total
    assert res["train_seconds"] > 0
    ev = res["eval"]
    assert ev["episodes"] == 2 == len(ev["returns"]) == len(ev["lengths"])
    assert ev["mean"] == pytest.approx(np.mean(ev["returns"])) and ev["min"] <= ev["median"] <= ev["max"]
    assert all(0 < n <= 150 for n in ev["lengths"])
    assert ev["capped"] == sum(n == 150 for n in ev["lengths"])  # the step cap bounds an idle agent
    # Breakout's 4 actions, chosen on every step of every evaluation env (at least the counted games' steps)
    assert len(ev["action_counts"]) == 4 and sum(ev["action_counts"]) >= sum(ev["lengths"])
    for k, v in args_expected.items():
        assert res["args"][k] == v
    return res


# PQN + ABS end to end (L moves within its range, every tag, rows paired by step, checkpoints): the CPU run of
# tests/test_cuda.py::test_pqn_abs_end_to_end_on_device, which the GPU call runs on the device.


# ------------------------------------------------------------------ evaluation: whole games (shared with GNS)
def never_fires(num_actions):
    """A Q-network stand-in whose greedy action is always NOOP (index 0)."""
    return lambda obs: torch.eye(num_actions)[0].expand(len(obs), -1)


def eval_args(env_id, episodes, epsilon, num_envs, cap, fire=True, protocol="quota"):
    """The evaluation flags evaluate() reads."""
    return pqn.Args(env_id=env_id, eval_episodes=episodes, eval_epsilon=epsilon, eval_num_envs=num_envs,
                    eval_max_episode_steps=cap, eval_fire_after_life_loss=fire, eval_protocol=protocol)


def test_evaluation_presses_fire_after_a_lost_life_so_whole_games_end():
    cpu = torch.device("cpu")
    args = eval_args("Breakout-v5", episodes=3, epsilon=0.0, num_envs=2, cap=1000)
    returns, lengths, capped, actions = pqn.evaluate(never_fires(4), args, 5, cpu)
    assert len(returns) == len(lengths) == 3 and capped == 0 and max(lengths) < 300  # every lost ball relaunched
    # The policy's own choices are counted (NOOP on every step of both envs), not the FIRE pressed for it.
    assert actions[1:] == [0, 0, 0] and actions[0] >= sum(lengths)
    # The paper's protocol (--no-eval-fire-after-life-loss): after the first lost life the game stalls to the cap.
    args.eval_fire_after_life_loss = False
    _, lengths, capped, actions = pqn.evaluate(never_fires(4), args, 5, cpu)
    # Env 0 plays 2 games (1000 steps, envpool's reset step, 1000 steps) and env 1 along: 2 x 2001 NOOPs.
    assert capped == 3 and lengths == [1000] * 3 and actions == [4002, 0, 0, 0]


@pytest.mark.parametrize("env_id, num_actions", [("MsPacman-v5", 9), ("KungFuMaster-v5", 14)])
def test_evaluation_of_a_game_without_fire_is_the_same_with_and_without_the_flag(env_id, num_actions):
    results = []
    for fire in (True, False):
        torch.manual_seed(0)  # the same epsilon-greedy draws
        args = eval_args(env_id, episodes=2, epsilon=0.5, num_envs=2, cap=3000, fire=fire)
        results.append(pqn.evaluate(never_fires(num_actions), args, 5, torch.device("cpu")))
    (returns, lengths, capped, actions), other = results
    assert capped == 0 and max(lengths) < 3000  # the games ended: every life was lost, each a chance to differ
    assert (returns, lengths, capped, actions) == other and len(set(lengths)) == 2
    assert len(actions) == num_actions and min(actions) > 0  # epsilon 0.5 tries every action


# Runs a script as __main__ with envpool.make wrapped: every step of the training envs (episodic_life=True)
# records envpool's own game-over signals, so a test can count the games independently of the script.
ENVPOOL_SPY = """
import json, os, runpy, sys
import envpool
out, sys.argv = sys.argv[1], sys.argv[2:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # as `python SCRIPT` does: the script imports abs_utils beside it
make, steps = envpool.make, []
class Spy:
    def __init__(self, env):
        self.env = env
    def __getattr__(self, name):
        return getattr(self.env, name)
    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        steps.append({"game_over": (info["terminated"].astype(bool) | trunc).tolist(), "trunc": trunc.tolist(),
                      "reward": info["reward"].tolist(), "lives": info["lives"].tolist(),
                      "elapsed": info["elapsed_step"].tolist()})
        return obs, reward, term, trunc, info
envpool.make = lambda *a, **k: Spy(make(*a, **k)) if k.get("episodic_life") else make(*a, **k)
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    with open(out, "w") as f:
        json.dump(steps, f)
"""


def test_one_event_per_finished_game_at_its_step(tmp_path):
    """8 Breakout envs: each finished game (not life) is its own charts/episodic_return and charts/episodic_length
    event at the global step where it ended, as counted from envpool's own signals; several may share a step."""
    p = subprocess.run([sys.executable, "-c", ENVPOOL_SPY, str(tmp_path / "spy.json"), SCRIPT, *TINY,
                        "--total-timesteps", "2560", "--run-name", "games", "--no-adapt", "--num-steps", "8",
                        "--eval-episodes", "0", "--output-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)
    assert p.returncode == 0, p.stderr[-2000:]
    steps = json.loads((tmp_path / "spy.json").read_text())
    assert len(steps) == 2560 // 8  # 40 iterations of 8 envs x 8 steps
    expected, ep_return = [], np.zeros(8)
    for t, s in enumerate(steps):
        ep_return += s["reward"]
        for env in np.flatnonzero(s["game_over"]):
            assert s["lives"][env] == 0 or s["trunc"][env]  # a whole game ended, not a life
            expected.append(((t + 1) * 8, ep_return[env], s["elapsed"][env]))
            ep_return[env] = 0.0
    assert len(expected) >= 5  # an untrained agent loses several games of Breakout in 320 steps per env
    tags = scalars(tmp_path / "games")
    events = sorted(zip(tags["charts/episodic_return"], tags["charts/episodic_length"]))
    assert len(events) == len(expected)  # one event per game, none merged
    assert [(s, r) for (s, r), _ in events] == sorted((s, r) for s, r, _ in expected)
    assert sorted((s, n) for _, (s, n) in events) == sorted((s, n) for s, _, n in expected)


def test_end_to_end_fixed_baseline_and_pqn_l(tmp_path):
    p = run([*TINY, "--total-timesteps", "1000", "--run-name", "fixed", "--no-adapt", "--num-steps", "8",
             "--network", "pqn-l", "--save-model"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = tmp_path / "fixed"
    res = check_eval_json(run_dir / "eval_results.json", {"adapt": False, "num_steps": 8, "network": "pqn-l"}, 1000)
    assert res["global_step"] == 1024  # 16 iterations of 8 envs x 8 steps
    tags = scalars(run_dir)
    assert not any(t.startswith("adapt/") for t in tags)
    model = torch.load(run_dir / "model.pt", weights_only=False)
    assert any(k.startswith("blocks.4.") for k in model["q_network"])


def test_measurements_span_the_kth_2kth_iterations_as_the_authors_code():
    """Counted from 0, iterations K-1, 2K-1, ... (the authors' code counts from 1: K, 2K, ...); never the first one,
    whose update is RAdam's un-adapted first steps."""
    assert [i for i in range(12) if pqn.measures_in(i, 4)] == [3, 7, 11]
    assert [i for i in range(3) if pqn.measures_in(i, 1)] == [0, 1, 2]
    assert not pqn.measures_in(0, 50) and pqn.measures_in(49, 50) and pqn.measures_in(99, 50)


def test_end_to_end_fixed_with_track_divergence(tmp_path):
    p = run([*TINY, "--total-timesteps", "512", "--run-name", "track", "--no-adapt", "--num-steps", "8",
             "--track-divergence", "--eval-episodes", "0"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    tags = scalars(tmp_path / "track")
    assert [v for _, v in tags["adapt/num_steps"]] == [8] * 8  # measured every iteration (K = 1), never adapted
    divergences = [v for _, v in tags["adapt/divergence"]]
    assert len(divergences) == 8 and all(0 <= d <= 1 for d in divergences)
    ckpt = torch.load(tmp_path / "track" / "checkpoint.pt", weights_only=False)
    assert ckpt["scheduler"]["num_measurements"] == 8 and ckpt["scheduler"]["L"] == 8.0
    assert ckpt["scheduler"]["history"] == pytest.approx(divergences[-2:])  # the window W = 2


def test_resume_continues_step_count_and_run_dir(tmp_path):
    p = run([*TINY, "--total-timesteps", "1200", "--run-name", "r", "--eval-episodes", "0"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    ckpt = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)
    first_step = ckpt["global_step"]
    assert first_step >= 1200 and ckpt["scheduler"]["num_measurements"] == ckpt["iteration"]
    p = run(["--resume", str(tmp_path / "r" / "checkpoint.pt"), "--total-timesteps", "2400", "--extend-schedules",
             "--eval-episodes", "2", "--eval-max-episode-steps", "150", "--no-cuda"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "resumed" in p.stdout and f"global_step {first_step}" in p.stdout
    res = check_eval_json(tmp_path / "r" / "eval_results.json", {"num_envs": 8, "window": 2}, 2400)
    ckpt2 = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)
    assert ckpt2["global_step"] == res["global_step"] >= 2400
    assert ckpt2["scheduler"]["num_measurements"] == ckpt2["iteration"] > ckpt["iteration"]
    assert os.listdir(tmp_path) == ["r"]  # no second run directory
    steps = [s for s, _ in scalars(tmp_path / "r")["adapt/num_steps"]]
    assert steps == sorted(steps) and steps[-1] > first_step
    assert first_step in steps  # the rows of the checkpoint's own step survive the resume's purge
    # The perf/* sums continue from the checkpoint's instead of restarting at 0.
    assert set(ckpt["perf"]) == {"env", "inference", "update", "adapt"} and ckpt["perf"]["update"] > 0
    assert all(ckpt2["perf"][k] > v for k, v in ckpt["perf"].items())
    for tag in ("perf/env_seconds", "perf/update_seconds", "perf/adapt_seconds"):
        sums = [v for _, v in scalars(tmp_path / "r")[tag]]
        assert sums == sorted(sums) and sums[-1] == pytest.approx(ckpt2["perf"][tag.split("/")[1].split("_")[0]]), tag


# ------------------------------------------------------------------ speed flags: same numbers, faster
def _update_batch(num_actions=4, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g)
    actions = torch.randint(0, num_actions, (n,), generator=g)
    returns = torch.randn(n, generator=g)
    valid = (torch.rand(n, generator=g) > 0.1).float()
    return obs, actions, returns, valid


def _param_change(net, bf16=False, compiled=False, lr=1e-3):
    """Run one pqn_update from a fixed start; the flat vector of how far the weights moved."""
    torch.manual_seed(0)
    start = [p.detach().clone() for p in net.parameters()]
    forward = torch.compile(net) if compiled else net
    opt = torch.optim.RAdam(net.parameters(), lr=lr)
    obs, actions, returns, valid = _update_batch()
    args = pqn.Args(num_minibatches=2, max_grad_norm=10.0, bf16=bf16)
    loss, _ = pqn.pqn_update(net, opt, (obs, actions, returns, valid), 1, args, forward=forward)
    return torch.cat([(p.detach() - s).flatten() for p, s in zip(net.parameters(), start)]), loss


def test_bf16_autocast_keeps_q_values_actions_and_update_direction():
    torch.manual_seed(3)
    net = pqn.QNetwork(4, "pqn")
    obs = _update_batch(n=256)[0]
    with torch.no_grad():
        q32 = net(obs)
        with pqn.autocast(torch.device("cpu"), True):
            q16 = net(obs)
    assert q16.dtype == torch.bfloat16  # autocast really ran the network in bf16
    scale = q32.abs().max().item()
    assert (q16.float() - q32).abs().max().item() < 0.03 * scale  # measured 0.6-1.3%
    assert (q16.float().argmax(1) == q32.argmax(1)).float().mean().item() >= 0.95
    delta32, loss32 = _param_change(copy.deepcopy(net))
    delta16, loss16 = _param_change(copy.deepcopy(net), bf16=True)
    assert loss16 == pytest.approx(loss32, rel=0.01)
    assert nn.functional.cosine_similarity(delta32, delta16, dim=0).item() > 0.99  # measured 0.9985-0.9997


def test_compiled_q_network_gives_the_eager_update():
    torch.manual_seed(4)
    net = pqn.QNetwork(4, "pqn")
    delta_eager, loss_eager = _param_change(copy.deepcopy(net), lr=1e-2)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    delta_compiled, loss_compiled = _param_change(copy.deepcopy(net), compiled=True, lr=1e-2)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # the update really ran compiled
    assert loss_compiled == pytest.approx(loss_eager, rel=1e-4)
    # Not element by element: a ReLU input within float32 rounding of 0 takes either side in two correct kernels,
    # and that one unit moves the update of every layer below it (measured: 0.5% of its norm with four threads on
    # two cores, 0.3% of the first layer's entries in one CI run; rounding alone 3e-6). A real fault is far
    # larger: the second minibatch's gradient taken at the weights before the first step moves it 74-84% at this
    # learning rate (such a fault grows with the step size, the flipped unit does not).
    assert (delta_compiled - delta_eager).norm() < 0.05 * delta_eager.norm()
    assert delta_eager.abs().max().item() > 1e-4  # the weights did move


def test_end_to_end_bf16_compile(tmp_path):
    # 400 steps: L moves from 4 to about 8 by then; on the CPU every step under bf16 is slow at these tiny shapes.
    p = run([*TINY, "--total-timesteps", "400", "--run-name", "fast", "--bf16", "--compile"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    res = check_eval_json(tmp_path / "fast" / "eval_results.json", {"bf16": True, "compile": True}, 400)
    tags = scalars(tmp_path / "fast")
    assert np.isfinite([v for _, v in tags["losses/td_loss"]]).all()
    Ls = [v for _, v in tags["adapt/num_steps"]]
    assert len(set(Ls)) > 1  # L changed, so the compiled network met new minibatch shapes
    # The checkpoint holds the plain module's weights (no torch.compile prefix), loadable without compiling.
    ckpt = torch.load(tmp_path / "fast" / "checkpoint.pt", weights_only=False)
    pqn.QNetwork(4, "pqn").load_state_dict(ckpt["q_network"])
    assert res["global_step"] >= 400


# ------------------------------------------------------------------ bad input
# This script's own flag checks (flag_problems): (argv, what the one error line must name), each run by
# tests/test_runs_all_scripts.py on a valid run of 8 steps; it also runs what abs_utils checks for every script (the
# seed, the run name, NaN and infinity, every integer flag at 2^63).
BAD_INPUTS = [
    (["--checkpoint-every", "-1"], "--checkpoint-every"),
    (["--log-every-seconds", "-1"], "--log-every-seconds"), (["--total-timesteps", "0"], "--total-timesteps"),
    (["--learning-rate", "-1"], "--learning-rate"), (["--learning-rate", "0"], "--learning-rate"),
    (["--num-envs", "0"], "--num-envs"), (["--num-minibatches", "0"], "--num-minibatches"),
    (["--num-envs", "6"], "--num-minibatches"),
    (["--no-adapt", "--num-steps", "3", "--num-envs", "1"], "--num-minibatches"),
    (["--gamma", "1.5"], "--gamma"), (["--gamma", "0"], "--gamma"), (["--q-lambda", "-0.1"], "--q-lambda"),
    (["--q-lambda", "1.1"], "--q-lambda"), (["--max-grad-norm", "0"], "--max-grad-norm"),
    (["--start-e", "1.5"], "--start-e"), (["--end-e", "-0.1"], "--end-e"),
    (["--exploration-fraction", "2"], "--exploration-fraction"), (["--num-steps", "0"], "--num-steps"),
    (["--num-steps-min", "0"], "--num-steps-min"), (["--num-steps-max", "0"], "--num-steps-max"),
    (["--num-steps-min", "80"], "--num-steps-min"), (["--adapt-freq", "0"], "--adapt-freq"),
    (["--window", "0"], "--window"), (["--burn-in", "0"], "--burn-in"), (["--ema-beta", "0"], "--ema-beta"),
    (["--ema-beta", "1.5"], "--ema-beta"),
    (["--divergence-low", "0"], "--divergence-low"), (["--divergence-high", "1.5"], "--divergence-high"),
    (["--divergence-low", "0.5", "--divergence-high", "0.2"], "--divergence-low"),
    (["--ref-batch-size", "0"], "--ref-batch-size"), (["--update-epochs", "0"], "--update-epochs"),
    (["--epochs-ref-steps", "0"], "--epochs-ref-steps"), (["--eval-episodes", "-1"], "--eval-episodes"),
    (["--eval-epsilon", "1.5"], "--eval-epsilon"), (["--eval-num-envs", "0"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "0"], "--eval-max-episode-steps"),
    (["--network", "resnet"], "--network"), (["--schedule", "cubic"], "--schedule"),
    (["--env-id", "HalfCheetah-v5"], "--env-id"), (["--env-id", "NotAGame-v5"], "--env-id"),
    # Past envpool's int32, storage larger than any machine's memory
    (["--num-envs", "3000000000"], "--num-envs"), (["--eval-num-envs", "3000000000"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "3000000000"], "--eval-max-episode-steps"),
    (["--num-steps-max", "1000000000"], "--num-steps-max"),
    (["--no-adapt", "--num-steps", "1000000000"], "--num-steps"),
    (["--update-epochs", "1001"], "--update-epochs"),  # the longest update's epochs above 1000
    (["--update-epochs", "20", "--epochs-ref-steps", "1"], "--epochs-ref-steps"),  # 20 x 64 / 1 = 1280 epochs
]


def test_burn_in_separate_from_the_window_by_hand():
    """--window 20 --burn-in 10 (the authors' code). Linear schedule, beta 1, delta in [0.1, 0.9], L in [16, 64]:
    target = 64 - (d - 0.1) / 0.8 * 48 = 70 - 60 d. Measurements: five 0.8, five 0.5, then 0.2.
    - measurements 1-9: fewer than 10 exist, L stays L_min = 16;
    - the 10th: mean of the 10 = 0.65, target 70 - 39 = 31;
    - the 25th: the last 20 are m6..m25 = five 0.5 and fifteen 0.2, mean 5.5 / 20 = 0.275, target 70 - 16.5 = 53.5,
      rounded half up to 54 (a window of 10 would give 58, the mean of all 25 gives 50.8)."""
    s = pqn.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear", burn_in=10)
    deltas = [0.8] * 5 + [0.5] * 5 + [0.2] * 15
    Ls = [s.update(d) for d in deltas]
    assert Ls[:9] == [16] * 9 and s.history.maxlen == 20
    assert Ls[9] == 31
    assert s.L == pytest.approx(53.5) and Ls[24] == 54
    default = pqn.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear")  # default: burn-in until W measurements exist
    assert [default.update(d) for d in deltas][:19] == [16] * 19 and default.burn_in == 20
    s2 = pqn.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear", burn_in=10)
    for d in deltas[:12]:
        s2.update(d)
    restored = pqn.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear", burn_in=10)
    restored.load_state_dict(s2.state_dict())
    assert [restored.update(d) for d in deltas[12:]] == Ls[12:]  # the burn-in count survives a checkpoint


# ------------------------------------------------------------------ the authors' evaluation order (first-finished)
def test_first_finished_evaluation_favours_short_games_on_real_games():
    """Breakout, no FIRE after a lost life: envs 0 and 1 never press FIRE and stall to the 400-step cap after their
    first lost ball; envs 2 and 3 press FIRE every step and lose all five balls in 121 steps. With quotas each env
    plays one game; the authors' order counts the first four games to end, all short, so the mean length drops."""
    q = torch.zeros(4, 4)
    q[:2, 0], q[2:, 1] = 1.0, 1.0  # greedy NOOP on envs 0 and 1, greedy FIRE on envs 2 and 3
    results = {protocol: pqn.evaluate(lambda obs: q[: len(obs)], eval_args("Breakout-v5", episodes=4, epsilon=0.0,
                                      num_envs=4, cap=400, fire=False, protocol=protocol), 5, torch.device("cpu"))
               for protocol in ("quota", "first-finished")}
    _, lengths, capped, _ = results["quota"]
    assert sorted(lengths) == [121, 121, 400, 400] and capped == 2
    _, lengths, capped, _ = results["first-finished"]
    assert lengths == [121] * 4 and capped == 0


def test_end_to_end_first_finished_is_recorded_in_the_results(tmp_path):
    p = run([*TINY, "--total-timesteps", "256", "--run-name", "authors-eval", "--no-adapt", "--num-steps", "8",
             "--eval-protocol", "first-finished"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "evaluating 2 episodes (first-finished," in p.stdout
    check_eval_json(tmp_path / "authors-eval" / "eval_results.json",
                    {"eval_protocol": "first-finished", "eval_num_envs": 2}, 256)
