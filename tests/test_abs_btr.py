"""Tests of abs_btr.py: replay (sum tree, frame stacks, n-step), BTR targets and layers, the batch schedule, and
end-to-end runs of the script on a real envpool game with tiny settings (CPU, a few hundred env steps). What every
script shares (bad input, SIGTERM and resume, the non-finite stop, --help) is tested in tests/test_runs_all_scripts.py,
with this script's own BAD_INPUTS below."""
import copy
import json
import math
import os
import sys

import envpool
import numpy as np
import pytest
import torch

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abs_btr  # noqa: E402

SCRIPT = os.path.join(ROOT, "abs_btr.py")


# ---------------------------------------------------------------- sum tree
def test_sum_tree_sampling_frequencies_match_priorities():
    np.random.seed(0)
    tree = abs_btr.SumTree(1000)  # not a power of two
    priorities = np.random.gamma(0.5, size=1000)
    priorities[np.random.rand(1000) < 0.2] = 0.0
    tree.update(np.arange(1000), priorities)
    counts = np.zeros(1000)
    for _ in range(100):
        np.add.at(counts, tree.sample(2000), 1)
    assert counts[priorities == 0].sum() == 0
    p = priorities / priorities.sum()
    n = counts.sum()
    sigma = np.sqrt(n * p * (1 - p)) + 1.0
    assert np.all(np.abs(counts - n * p) < 5 * sigma)
    assert np.abs(counts - n * p).sum() / n < 0.03  # total variation distance


def test_sum_tree_updates_keep_the_total_right():
    rng = np.random.default_rng(1)
    tree = abs_btr.SumTree(777)
    leaves = np.zeros(777)
    for _ in range(200):
        idx = rng.integers(0, 777, size=rng.integers(1, 64))  # with repeats: the last value wins
        values = rng.random(len(idx)) * rng.choice([0.0, 1.0, 100.0])
        tree.update(idx, values)
        leaves[idx] = values
    assert math.isclose(tree.total(), leaves.sum(), rel_tol=1e-9)
    np.testing.assert_array_equal(tree.get(np.arange(777)), leaves)
    internal = np.arange(1, tree.size)
    np.testing.assert_allclose(tree.tree[internal], tree.tree[2 * internal] + tree.tree[2 * internal + 1])
    # values at or past the total (rounding) still land on a non-zero leaf
    assert leaves[tree.find(np.array([tree.total(), tree.total() * (1 + 1e-12), 0.0]))].min() > 0


# ---------------------------------------------------------------- n-step returns
def test_n_step_returns_match_a_plain_loop():
    rng = np.random.default_rng(2)
    for n in (1, 3, 5):
        rewards = rng.normal(size=(300, n)).astype(np.float32)
        ended = rng.random((300, n)) < 0.25
        terminated = ended & (rng.random((300, n)) < 0.6)
        returns, discounts, steps = abs_btr.n_step_returns(rewards, terminated, ended, 0.9)
        for b in range(300):
            g, k, done = 0.0, 0, False
            for j in range(n):
                g += 0.9**j * float(rewards[b, j])
                k += 1
                if ended[b, j]:
                    done = bool(terminated[b, j])
                    break
            assert math.isclose(returns[b], g, rel_tol=1e-6, abs_tol=1e-6)
            assert steps[b] == k
            assert math.isclose(discounts[b], 0.0 if done else 0.9**k, rel_tol=1e-9)


# ---------------------------------------------------------------- frame stacks from the real environment
def test_stacks_rebuild_envpool_observations_across_episode_ends_and_wrap_around():
    """Drive Breakout (life loss, game over, a short time limit) into a tiny buffer that wraps many times; every
    sampleable transition's state, next state, n-step return and discount must match what envpool produced."""
    E, T, n, gamma = 2, 24, 3, 0.9
    envs = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=E, seed=7, episodic_life=True,
                        reward_clip=True, max_episode_steps=40)
    replay = abs_btr.ReplayBuffer(E * T, E, n, gamma, alpha=0.2)
    history = [[] for _ in range(E)]  # per env, per step: (acted-on observation, reward, terminated, ended)
    where = np.zeros((T, E), dtype=np.int64)  # row -> index into history
    rng = np.random.default_rng(0)
    obs, _ = envs.reset()
    checked, crossing_life, game_starts = 0, 0, 0
    for step in range(400):
        actions = rng.integers(0, envs.action_space.n, E)
        next_obs, reward, term, trunc, info = envs.step(actions)
        for e in range(E):
            where[replay.pos, e] = len(history[e])
            history[e].append((obs[e], float(reward[e]), bool(term[e]), bool(term[e] | trunc[e])))
        replay.add(obs[:, -1], actions, reward, term, trunc, info["terminated"].astype(bool))
        obs = next_obs
        idx = np.flatnonzero(replay.tree.get(np.arange(T * E)) > 0)
        if step < 5 or not len(idx):
            continue
        states, acts, returns, discounts, next_states, steps = replay.transitions(idx)
        for i, leaf in enumerate(idx):
            row, e = divmod(int(leaf), E)
            h = where[row, e]
            np.testing.assert_array_equal(states[i], history[e][h][0])
            g, k, done = 0.0, 0, False
            for j in range(n):
                _, r, te, end = history[e][h + j]
                g += gamma**j * r
                k += 1
                if end:
                    done = te
                    break
            np.testing.assert_array_equal(next_states[i], history[e][h + k][0])
            assert math.isclose(returns[i], g, abs_tol=1e-6) and steps[i] == k
            assert math.isclose(discounts[i], 0.0 if done else gamma**k)
            # the stack reaches into a previous life / starts with a repeated first frame of a game
            crossing_life += any(history[e][h - j][2] for j in range(1, 4) if h - j >= 0)
            game_starts += bool((states[i][0] == states[i][3]).all() and h >= 2 and history[e][h - 2][3])
            checked += 1
        # never sampleable: envpool's reset steps and the oldest rows, whose stacks would reach past the write position
        rows = idx // E
        assert replay.valid[rows, idx % E].all()
        if replay.rows_written >= T:
            assert not np.isin((rows - replay.pos) % T, np.arange(abs_btr.FRAME_STACK - 1)).any()
    envs.close()
    assert replay.rows_written > 10 * T and checked > 1000
    assert crossing_life > 0 and game_starts > 0


# ---------------------------------------------------------------- Munchausen-IQN target and loss
def test_munchausen_iqn_target_matches_a_loop():
    torch.manual_seed(0)
    B, N, A, alpha, tau, l0 = 5, 4, 3, 0.9, 0.03, -1.0
    next_q = torch.randn(B, N, A, dtype=torch.float64)
    # small and large action gaps: some scaled log-policies lie inside [l0, 0], some are clipped at l0
    gaps = torch.tensor([0.02, 3.0, 0.02, 3.0, 3.0], dtype=torch.float64)[:, None]
    q_online = torch.randn(B, A, dtype=torch.float64) * gaps
    actions = torch.tensor([0, 1, 2, 1, 0])
    returns = torch.randn(B, dtype=torch.float64)
    discounts = torch.tensor([0.99, 0.0, 0.97, 0.99, 0.5], dtype=torch.float64)
    got = abs_btr.munchausen_iqn_target(next_q, q_online, actions, returns, discounts, alpha, tau, l0)
    clipped = 0
    for b in range(B):
        mean_next = [sum(next_q[b, j, a].item() for j in range(N)) / N for a in range(A)]
        m = max(mean_next)
        z = sum(math.exp((q - m) / tau) for q in mean_next)
        pi = [math.exp((q - m) / tau) / z for q in mean_next]
        tau_log_pi = [q - m - tau * math.log(z) for q in mean_next]
        qs = q_online[b].tolist()
        m_s = max(qs)
        tau_log_pi_s = qs[actions[b]] - m_s - tau * math.log(sum(math.exp((q - m_s) / tau) for q in qs))
        clipped += tau_log_pi_s < l0
        bonus = alpha * min(max(tau_log_pi_s, l0), 0.0)
        for j in range(N):
            soft = sum(pi[a] * (next_q[b, j, a].item() - tau_log_pi[a]) for a in range(A))
            want = returns[b].item() + bonus + discounts[b].item() * soft
            assert math.isclose(got[b, j].item(), want, rel_tol=1e-9, abs_tol=1e-9)
    assert 0 < clipped < B


def test_quantile_huber_loss_matches_a_loop():
    torch.manual_seed(1)
    B, N, M, kappa = 3, 4, 5, 1.0
    q, taus, target = torch.randn(B, N) * 2, torch.rand(B, N), torch.randn(B, M) * 2
    loss, td_abs = abs_btr.quantile_huber_loss(q, taus, target, kappa)
    for b in range(B):
        total, abs_sum = 0.0, 0.0
        for i in range(N):
            for j in range(M):
                d = (target[b, j] - q[b, i]).item()
                h = 0.5 * d * d if abs(d) <= kappa else kappa * (abs(d) - 0.5 * kappa)
                total += abs(taus[b, i].item() - (d < 0)) * h / kappa / M
                abs_sum += abs(d) / (N * M)
        assert math.isclose(loss[b].item(), total, rel_tol=1e-5)
        assert math.isclose(td_abs[b].item(), abs_sum, rel_tol=1e-5)


# ---------------------------------------------------------------- network: noisy layers, greedy Q
def tiny_args(**kw):
    return abs_btr.Args(**{"model_size": 0.25, "hidden_size": 16, "num_tau": 4, "num_cosines": 8, **kw})


@pytest.mark.parametrize("buffer_size, num_envs", [(64, 8), (100, 4), (4096, 8), (1000, 1)])
def test_replay_bytes_needed_is_the_allocated_buffer(buffer_size, num_envs):
    replay = abs_btr.ReplayBuffer(buffer_size, num_envs, 3, 0.99, alpha=0.2)
    assert abs_btr.ReplayBuffer.bytes_needed(buffer_size) == replay.nbytes


@pytest.mark.parametrize("kw", [{}, {"impala": False}, {"iqn": False}, {"model_size": 1.0, "maxpool_size": 6}])
def test_training_bytes_counts_five_copies_of_the_real_parameters_plus_the_batch(kw):
    args = tiny_args(**kw)
    network = abs_btr.BTRNetwork(18, args)
    params = sum(p.numel() for p in network.parameters()) * 4
    assert abs_btr.training_bytes(args, 0) == 5 * params  # built on the meta device: the same shapes
    features = network.cos_embedding.out_features if args.iqn else 0
    assert abs_btr.training_bytes(args, 10) - 5 * params == 10 * (2 * 4 * 84 * 84 + 3 * args.num_tau * features * 4)


def test_noisy_layers_noise_off_is_deterministic_and_resampling_changes_outputs():
    torch.manual_seed(0)
    layer = abs_btr.NoisyLinear(6, 3)
    x = torch.randn(5, 6)
    y1 = layer(x)
    layer.reset_noise()
    assert not torch.allclose(y1, layer(x))  # resampling changes outputs
    abs_btr.set_noise(layer, False)
    y_off = layer(x)
    layer.reset_noise()
    torch.testing.assert_close(y_off, layer(x))  # noise off: independent of the noise sample
    torch.testing.assert_close(y_off, torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu))

    net = abs_btr.BTRNetwork(4, tiny_args()).eval()
    states = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    greedy = abs_btr.GreedyQ(net, chunk=4)  # chunks must not change anything
    q1 = greedy(states)
    abs_btr.reset_noise(net)
    net.train()
    torch.testing.assert_close(greedy(states), q1, rtol=0, atol=0)  # noise off, fixed quantile fractions
    assert net.training and all(m.noise_on for m in net.modules() if isinstance(m, abs_btr.NoisyLinear))
    taus = torch.full((6, 4), 0.5)
    with torch.no_grad():
        a = net.eval()(states, taus)
        abs_btr.reset_noise(net)
        b = net(states, taus)
    assert not torch.allclose(a, b)  # noise on: resampling changes the quantiles
    other = abs_btr.BTRNetwork(4, tiny_args())
    assert abs_btr.behavioral_divergence(greedy, abs_btr.GreedyQ(copy.deepcopy(net)), states) == 0.0
    assert 0.0 < abs_btr.behavioral_divergence(greedy, abs_btr.GreedyQ(other), states) <= 1.0


@pytest.mark.parametrize("flags", [{}, {"impala": False, "dueling": False, "noisy": False, "iqn": False,
                                        "layer_norm": False, "maxpool_size": 0, "spectral_norm": False}])
def test_btr_network_shapes_and_ablations(flags):
    net = abs_btr.BTRNetwork(5, tiny_args(**flags))
    out = net(torch.zeros(3, 4, 84, 84, dtype=torch.uint8), net.sample_taus(3, "cpu"))
    assert out.shape == (3, 4 if flags.get("iqn", True) else 1, 5)
    assert net.q_values(torch.zeros(3, 4, 84, 84, dtype=torch.uint8)).shape == (3, 5)


def test_bf16_autocast_keeps_greedy_actions_and_the_gradient():
    """--bf16 on the full BTR network (IMPALA, spectral norm, noisy, IQN): same greedy actions, same update
    direction."""
    torch.manual_seed(1)
    args = tiny_args(model_size=0.5, hidden_size=64)
    net = abs_btr.BTRNetwork(6, args)
    rng = np.random.default_rng(1)
    n = 64
    states = rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)
    greedy = abs_btr.GreedyQ(net)
    q32 = greedy(torch.from_numpy(states))
    encoded = []
    hook = net.encoder.register_forward_hook(lambda module, inputs, output: encoded.append(output.dtype))
    with abs_btr.autocast(torch.device("cpu"), True):
        q16 = greedy(torch.from_numpy(states))
    hook.remove()
    assert encoded[-1] == torch.bfloat16 and q16.dtype == torch.float32  # the encoder ran in bf16, not the head
    assert (q16.float() - q32).abs().max() < 0.03 * q32.abs().max()  # measured 0.4-1.9% (seeds 1-3)
    assert (q16.float().argmax(1) == q32.argmax(1)).float().mean() >= 0.95
    batch = (np.arange(n), states, rng.integers(0, 6, n), rng.normal(size=n).astype(np.float32),
             np.full(n, 0.97, np.float32), rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), np.ones(n, np.float32))

    def one_step(bf16):
        torch.manual_seed(10)  # the same noise and quantile fractions in both runs
        q, target = copy.deepcopy(net), copy.deepcopy(net)
        start = [p.detach().clone() for p in q.parameters()]
        sgd = torch.optim.SGD(q.parameters(), lr=1e-3)  # SGD: the weight change is the (clipped) gradient itself
        loss, _, td = abs_btr.btr_update(q, target, sgd, batch, abs_btr.Args(**{**vars(args), "bf16": bf16}),
                                         torch.device("cpu"))
        return torch.cat([(p.detach() - s).flatten() for p, s in zip(q.parameters(), start)]), loss, td

    delta32, loss32, td32 = one_step(False)
    delta16, loss16, td16 = one_step(True)
    assert loss16 == pytest.approx(loss32, rel=0.02)
    assert torch.nn.functional.cosine_similarity(delta32, delta16, dim=0) > 0.99  # measured 0.998-0.9998
    assert np.corrcoef(td32, td16)[0, 1] > 0.999  # the replay priorities


def test_munchausen_bonus_under_bf16_at_trained_scale_q():
    """At |Q| = 40 a bfloat16 Q-value is rounded to 0.25, which the Munchausen log-softmax (temperature 0.03) turns
    into large bonus errors: with the whole network under autocast this test measured a mean bonus error of 6.3% of
    the mean bonus, 30% in single states, and target errors up to 0.49. With the head in float32: 0.3%, 1.3%, 0.023."""
    torch.manual_seed(2)
    args = tiny_args(model_size=0.5, hidden_size=64)
    net = abs_btr.BTRNetwork(4, args)
    with torch.no_grad():
        net.value[-1].bias_mu += 40.0  # a trained agent's state value: |Q| about 40, action gaps as before
    rng = np.random.default_rng(2)
    n = 64
    states = torch.from_numpy(rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8))
    next_states = torch.from_numpy(rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8))
    actions = torch.from_numpy(rng.integers(0, 4, n))
    taus, next_taus = torch.rand(n, args.num_tau), torch.rand(n, args.num_tau)

    def bonus_and_target(bf16):
        with torch.no_grad(), abs_btr.autocast(torch.device("cpu"), bf16):
            encoded = net.encoder(states.float() / 255.0)
            q, next_q = net(states, taus).float().mean(dim=1), net(next_states, next_taus).float()
        target = abs_btr.munchausen_iqn_target(next_q, q, actions, torch.zeros(n), torch.full((n,), 0.99), 0.9, 0.03,
                                               -1.0)
        bonus = abs_btr.munchausen_iqn_target(next_q, q, actions, torch.zeros(n), torch.zeros(n), 0.9, 0.03, -1.0)
        return encoded.dtype, q, bonus[:, 0], target

    dtype32, q32, bonus32, target32 = bonus_and_target(False)
    dtype16, q16, bonus16, target16 = bonus_and_target(True)
    assert dtype32 == torch.float32 and dtype16 == torch.bfloat16  # the encoder really ran in bf16
    assert 35 < q32.abs().mean() < 45
    assert bonus32.abs().mean() > 0.1  # a bonus of a useful size (its clip is at -0.9)
    assert (bonus16 - bonus32).abs().mean() < 0.01 * bonus32.abs().mean()
    assert (bonus16 - bonus32).abs().max() < 0.05 * bonus32.abs().mean()
    assert (target16 - target32).abs().max() < 0.05


# ---------------------------------------------------------------- the batch-size schedule
def test_batch_schedule_range_rounding_burn_in_and_ema():
    assert [abs_btr.round_to_multiple(x, 32) for x in (128.0, 143.9, 144.0, 160.0, 511.9)] == [128, 128, 160, 160, 512]
    s = abs_btr.ABSScheduler(128, 512, window=3, beta=0.1, delta_min=0.05, delta_max=0.95)
    for _ in range(2):  # burn-in: fewer than W measurements keep B_min
        s.update(0.01)
        assert s.L == 128.0
    s.update(0.01)  # a low divergence targets B_max
    assert math.isclose(s.L, 128 + 0.1 * (512 - 128)) and abs_btr.round_to_multiple(s.L, 32) == 160
    L = s.L
    for _ in range(200):
        s.update(0.01)
        L = 0.9 * L + 0.1 * 512
        assert math.isclose(s.L, L)
        b = abs_btr.round_to_multiple(s.L, 32)
        assert b % 32 == 0 and 128 <= b <= 512
    assert abs_btr.round_to_multiple(s.L, 32) == 512  # the float state reaches the top (no int() truncation)
    s.update(0.95)  # window mean (0.01 + 0.01 + 0.95) / 3
    target = 512 - 384 * math.log((0.97 / 3) / 0.05) / math.log(0.95 / 0.05)  # the log mapping, by hand
    assert target == pytest.approx(268.56, abs=0.01)
    assert math.isclose(s.L, 0.9 * L + 0.1 * target)
    for _ in range(200):
        s.update(1.0)
    assert abs_btr.round_to_multiple(s.L, 32) == 128


def test_epsilon_decays_geometrically_per_stored_transition_and_switches_off_at_half_training():
    # BTR's rule, applied once per stored transition: eps <- eps - (eps - 0.01) / 2e6; a plain loop as reference.
    eps, values = 1.0, {}
    for t in range(1, 6_000_001):
        eps -= (eps - 0.01) / 2_000_000
        if t % 2_000_000 == 0:
            values[t] = eps
    for t, ref in zip((2_000_000, 4_000_000, 6_000_000), (0.37, 0.14, 0.06)):
        got = abs_btr.exploration_epsilon(t, "geometric", 1.0, 0.01, 2_000_000)
        assert got == pytest.approx(values[t], rel=1e-9) and got == pytest.approx(ref, abs=0.005)
    assert abs_btr.exploration_epsilon(0, "geometric", 1.0, 0.01, 2_000_000) == 1.0
    # the linear schedule stays available: halfway at 1M, the floor from 2M on
    assert abs_btr.exploration_epsilon(1_000_000, "linear", 1.0, 0.01, 2_000_000) == pytest.approx(0.505)
    assert abs_btr.exploration_epsilon(3_000_000, "linear", 1.0, 0.01, 2_000_000) == 0.01
    # switched off at half of training with noisy nets (BTR: 100M of 200M frames), never before learning starts,
    # never without noisy nets
    off = abs_btr.epsilon_off_step(20_000_000, 0.5, 200_000, noisy=True)
    assert off == 10_000_000
    assert abs_btr.exploration_epsilon(off - 64, "geometric", 1.0, 0.01, 2_000_000, off) == pytest.approx(
        0.01 + 0.99 * (1 - 1 / 2e6) ** (off - 64))
    assert abs_btr.exploration_epsilon(off, "geometric", 1.0, 0.01, 2_000_000, off) == 0.0
    assert abs_btr.epsilon_off_step(300_000, 0.5, 200_000, noisy=True) == 200_000
    assert abs_btr.epsilon_off_step(20_000_000, 0.5, 200_000, noisy=False) is None
    assert abs_btr.epsilon_off_step(20_000_000, 1.0, 200_000, noisy=True) == 20_000_000  # 1: never within the run


def test_divergence_measurements_start_mid_way_between_target_copies():
    args = abs_btr.Args()
    K, P, span = args.adapt_freq, args.target_network_frequency, args.divergence_span
    assert K == P == 500  # BTR's target period and the measurement period coincide
    offset = abs_btr.measurement_offset(args.divergence_offset, P)
    starts = [g for g in range(20_000) if abs_btr.measurement_starts(g, K, offset)]
    assert starts == list(range(250, 20_000, 500))  # mid-way through every target cycle
    copies = set(range(0, 20_000 + P, P))  # the target is copied before the gradient steps that are multiples of P
    assert all(not copies & set(range(s, s + span)) for s in starts)  # no copy inside a measured span
    assert all(min(abs(s - c) for c in copies) == 250 for s in starts)
    # at offset 0 (the old phase) every span would begin with a copy
    assert all(s in copies for s in range(20_000) if abs_btr.measurement_starts(s, K, 0))
    assert abs_btr.measurement_offset(100, P) == 100 and abs_btr.measurement_offset(None, 10) == 5
    assert not abs_btr.measurement_starts(99, 10, 100) and abs_btr.measurement_starts(110, 10, 100)


# ---------------------------------------------------------------- end-to-end runs (subprocesses)
# Run-control flags are not taken from a checkpoint: a resume passes them again.
CONTROL = ["--eval-episodes", "1", "--eval-num-envs", "1", "--eval-max-episode-steps", "50", *CPU,
           "--scalar-every", "5", "--log-every-seconds", "0", "--checkpoint-every", "0"]
TINY = [*SCRIPTS["abs_btr.py"].adaptive, *CPU]  # the batch in [32, 64] moving, learning from step 400


def run(argv, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return preloaded.run([sys.executable, SCRIPT, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)


def scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_abs_run_then_resume_with_buffer(tmp_path):
    p = run([*TINY, "--no-impala", "--total-timesteps", "720", "--checkpoint-buffer", "--output-dir", "runs",
             "--run-name", "abs"], tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    run_dir = tmp_path / "runs" / "abs"
    result = json.loads((run_dir / "eval_results.json").read_text())
    assert result["algo"] == "abs_btr" and result["env_id"] == "Breakout-v5" and result["global_step"] == 720
    assert result["eval"]["episodes"] == 1 and len(result["eval"]["returns"]) == 1 and result["args"]["adapt"] is True
    assert {"mean", "std", "median", "min", "max", "capped"} <= set(result["eval"]) and result["train_seconds"] > 0
    actions = result["eval"]["action_counts"]
    assert len(actions) == 4 and sum(actions) >= result["eval"]["lengths"][0]  # Breakout's 4, chosen every step
    tags = scalars(run_dir)
    for tag in ("adapt/divergence", "adapt/divergence_mean", "adapt/batch_size", "losses/td_loss", "losses/q_values",
                "charts/SPS", "charts/epsilon", "charts/per_beta", "perf/env_seconds", "perf/inference_seconds",
                "perf/update_seconds", "perf/adapt_seconds"):
        assert tag in tags, tag
    batches = [v for _, v in tags["adapt/batch_size"]]
    assert len(batches) >= 10 and len(set(batches)) > 1  # the batch moved
    assert all(32 <= b <= 64 and b % 32 == 0 for b in batches)
    assert all(0.0 <= v <= 1.0 for _, v in tags["adapt/divergence"])
    assert min(s for s, _ in tags["losses/td_loss"]) >= 400  # no learning before --learning-starts
    beta = [v for _, v in tags["charts/per_beta"]]
    assert beta[0] == pytest.approx(0.45) and beta == sorted(beta) and beta[-1] <= 1.0

    # Resume with the buffer in the checkpoint: learning continues at once.
    p = run(["--resume", str(run_dir / "checkpoint.pt"), "--total-timesteps", "880", "--extend-schedules", *CONTROL],
            tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "replay buffer restored" in p.stdout
    tags = scalars(run_dir)
    after = [s for s, _ in tags["losses/td_loss"] if s > 720]
    assert after and min(after) <= 720 + 5 * 8
    assert json.loads((run_dir / "eval_results.json").read_text())["global_step"] == 880
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert "replay" in ckpt  # --checkpoint-buffer is kept
    sums = [v for _, v in tags["perf/update_seconds"]]  # carried across the resume, not restarted at 0
    assert sums == sorted(sums) and sums[-1] == pytest.approx(ckpt["perf"]["update"])


def test_no_adapt_impala_run_then_resume_without_buffer_refills(tmp_path):
    p = run([*TINY, "--no-adapt", "--batch-size", "32", "--model-size", "0.125", "--total-timesteps", "560",
             "--output-dir", "runs", "--run-name", "fixed"], tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    run_dir = tmp_path / "runs" / "fixed"
    result = json.loads((run_dir / "eval_results.json").read_text())
    assert result["args"]["adapt"] is False and result["args"]["batch_size"] == 32
    tags = scalars(run_dir)
    assert not [t for t in tags if t.startswith("adapt/")] and "losses/td_loss" in tags

    p = run(["--resume", str(run_dir / "checkpoint.pt"), "--total-timesteps", "1040", "--extend-schedules", *CONTROL],
            tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "refilling 400 transitions" in p.stdout
    after = [s for s, _ in scalars(run_dir)["losses/td_loss"] if s > 560]
    assert after and min(after) >= 560 + 400  # nothing learned until the buffer holds --learning-starts again


def test_no_adapt_with_track_divergence_logs_delta_and_keeps_the_batch(tmp_path):
    # K = target period = 10 as in BTR (500 each): measurements span gradient steps 5-6, 15-16, 25-26, 35-36
    p = run([*TINY, "--no-impala", "--no-adapt", "--batch-size", "32", "--track-divergence", "--total-timesteps", "720",
             "--adapt-freq", "10", "--divergence-span", "2", "--output-dir", "runs", "--run-name", "track"], tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    tags = scalars(tmp_path / "runs" / "track")
    divergences = [v for _, v in tags["adapt/divergence"]]
    assert len(divergences) == 4 and all(0 <= d <= 1 for d in divergences)
    # 8 envs, the first gradient step at global step 400: a delta logged at step s ends gradient step (s - 400) / 8
    starts = [(s - 400) // 8 + 1 - 2 for s, _ in tags["adapt/divergence"]]
    assert starts == [5, 15, 25, 35]  # mid-way between the target copies before gradient steps 0, 10, 20, ...
    # epsilon: geometric decay over the stored transitions before each step, off from step 400 (half of 720 is 360,
    # but not before learning starts); logged after the step, so the epsilon of step s - 8
    for step, value in tags["charts/epsilon"]:
        expected = 0.01 + 0.99 * (1 - 1 / 400) ** (step - 8) if step - 8 < 400 else 0.0
        assert value == pytest.approx(expected, abs=1e-6), step
    assert {v for _, v in tags["adapt/batch_size"]} == {32}  # measured, never adapted
    ckpt = torch.load(tmp_path / "runs" / "track" / "checkpoint.pt", weights_only=False)
    assert ckpt["scheduler"]["num_measurements"] == len(divergences) and ckpt["scheduler"]["L"] == 32.0


def test_bf16_run(tmp_path):
    p = run([*TINY, "--no-impala", "--bf16", "--total-timesteps", "560", "--output-dir", "runs", "--run-name", "bf16"],
            tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads((tmp_path / "runs" / "bf16" / "eval_results.json").read_text())
    assert result["args"]["bf16"] is True and result["global_step"] == 560 and result["eval"]["episodes"] == 1
    tags = scalars(tmp_path / "runs" / "bf16")
    assert np.isfinite([v for _, v in tags["losses/td_loss"]]).all() and "adapt/batch_size" in tags


def test_evaluation_presses_fire_after_a_lost_life_so_whole_games_end():
    noop = lambda obs: torch.eye(4)[0].expand(len(obs), -1)  # noqa: E731  a greedy policy that never fires
    cpu = torch.device("cpu")
    args = abs_btr.Args(env_id="Breakout-v5", eval_episodes=2, eval_epsilon=0.0, eval_num_envs=2,
                        eval_max_episode_steps=600)
    _, lengths, capped, actions = abs_btr.evaluate(noop, args, 3, cpu)
    assert capped == 0 and max(lengths) < 300 and actions[1:] == [0, 0, 0]
    args.eval_fire_after_life_loss = False
    _, lengths, capped, _ = abs_btr.evaluate(noop, args, 3, cpu)
    assert capped == 2 and lengths == [600, 600]  # the paper's protocol: stalled after the first lost ball


# ---------------------------------------------------------------- bad input
# This script's own flag checks (flag_problems): (argv, what the one error line must name), each run by
# tests/test_runs_all_scripts.py on a valid run of 8 steps (--no-impala, a buffer of 4096).
BAD_INPUTS = [
    (["--checkpoint-every", "-1"], "--checkpoint-every"),
    (["--log-every-seconds", "-1"], "--log-every-seconds"), (["--scalar-every", "0"], "--scalar-every"),
    (["--total-timesteps", "0"], "--total-timesteps"), (["--learning-rate", "-1"], "--learning-rate"),
    (["--learning-rate", "0"], "--learning-rate"), (["--adam-eps", "0"], "--adam-eps"),
    (["--num-envs", "0"], "--num-envs"),
    (["--buffer-size", "0"], "--buffer-size"), (["--buffer-size", "4100"], "--buffer-size"),
    (["--buffer-size", "64"], "--buffer-size"), (["--buffer-size", "1000", "--num-envs", "64"], "--buffer-size"),
    (["--learning-starts", "-1"], "--learning-starts"),
    (["--learning-starts", "5000"], "--learning-starts"), (["--gamma", "1.5"], "--gamma"),
    (["--gamma", "0"], "--gamma"),
    (["--n-step", "0"], "--n-step"), (["--max-grad-norm", "0"], "--max-grad-norm"),
    (["--target-network-frequency", "0"], "--target-network-frequency"), (["--start-e", "1.5"], "--start-e"),
    (["--end-e", "-0.1"], "--end-e"), (["--exploration-steps", "-1"], "--exploration-steps"),
    (["--epsilon-off-fraction", "1.5"], "--epsilon-off-fraction"),
    (["--epsilon-schedule", "cosine"], "--epsilon-schedule"), (["--divergence-offset", "-1"], "--divergence-offset"),
    (["--model-size", "0"], "--model-size"), (["--impala", "--model-size", "0.05"], "--model-size"),
    (["--maxpool-size", "-1"], "--maxpool-size"), (["--hidden-size", "0"], "--hidden-size"),
    (["--noisy-sigma0", "-0.5"], "--noisy-sigma0"), (["--num-tau", "0"], "--num-tau"),
    (["--num-cosines", "0"], "--num-cosines"), (["--kappa", "0"], "--kappa"),
    (["--munchausen-alpha", "1.5"], "--munchausen-alpha"), (["--munchausen-tau", "0"], "--munchausen-tau"),
    (["--munchausen-clip", "1"], "--munchausen-clip"), (["--per-alpha", "-0.2"], "--per-alpha"),
    (["--per-beta", "1.5"], "--per-beta"), (["--batch-size", "0"], "--batch-size"),
    (["--batch-size-min", "0"], "--batch-size-min"), (["--batch-size-max", "0"], "--batch-size-max"),
    (["--batch-size-min", "100"], "--batch-size-min"), (["--batch-size-max", "70"], "--batch-size-max"),
    (["--batch-size-min", "640"], "--batch-size-min"), (["--batch-size-multiple", "0"], "--batch-size-multiple"),
    (["--adapt-freq", "0"], "--adapt-freq"), (["--divergence-span", "0"], "--divergence-span"),
    (["--divergence-span", "9", "--adapt-freq", "8"], "--divergence-span"), (["--window", "0"], "--window"),
    (["--burn-in", "0"], "--burn-in"), (["--ema-beta", "0"], "--ema-beta"), (["--ema-beta", "1.5"], "--ema-beta"),
    (["--divergence-low", "0"], "--divergence-low"), (["--divergence-high", "1.5"], "--divergence-high"),
    (["--divergence-low", "0.5", "--divergence-high", "0.2"], "--divergence-low"),
    (["--ref-batch-size", "0"], "--ref-batch-size"), (["--eval-episodes", "-1"], "--eval-episodes"),
    (["--eval-epsilon", "1.5"], "--eval-epsilon"), (["--eval-num-envs", "0"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "0"], "--eval-max-episode-steps"),
    (["--schedule", "cubic"], "--schedule"), (["--env-id", "HalfCheetah-v5"], "--env-id"),
    # Past envpool's int32, a rate whose Adam step overflows float32, storage larger than any memory
    (["--num-envs", "3000000000"], "--num-envs"), (["--eval-num-envs", "3000000000"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "3000000000"], "--eval-max-episode-steps"),
    (["--learning-rate", "1e38"], "--learning-rate"), (["--learning-rate", "2e37"], "--learning-rate"),
    (["--per-alpha", "1e38"], "--per-alpha"), (["--per-alpha", "1.5"], "--per-alpha"),
    (["--buffer-size", str(10**11)], "--buffer-size"), (["--num-tau", "1000000000"], "--num-tau"),
    (["--impala", "--model-size", "1e38"], "--model-size"), (["--impala", "--model-size", "1000"], "--model-size"),
    (["--batch-size-max", "1048576"], "--batch-size-max"),
    (["--no-adapt", "--batch-size", "8192"], "--batch-size"),  # the 8-step run's buffer holds 4096
    # Below the 10^12 bound, a network or batch too large for memory is refused naming the flag with its value.
    (["--hidden-size", str(10**9)], f"--hidden-size {10**9}"),
    (["--num-cosines", str(10**9)], f"--num-cosines {10**9}"),
    (["--impala", "--maxpool-size", str(10**5)], f"--maxpool-size {10**5}"),
    (["--impala", "--model-size", "1e5"], "--model-size 100000.0"), (["--num-tau", str(10**9)], f"--num-tau {10**9}"),
]
