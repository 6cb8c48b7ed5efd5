"""Tests of gns_pqn_atari.py: the GNS estimator against exact per-sample gradients of linear least
squares, the schedule (including the undefined case), micro-batch gradients against autograd,
validation, and end-to-end runs of the script on a real envpool game with tiny settings. What every script shares
is tested in tests/test_runs_all_scripts.py, with this script's own BAD_INPUTS below; the code it shares with
abs_pqn_atari.py in tests/test_copies.py."""
import copy
import io
import json
import math
import os
import shutil
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
import abs_pqn_atari as abs_pqn  # noqa: E402
import gns_pqn_atari as gns  # noqa: E402

SCRIPT = os.path.join(ROOT, "gns_pqn_atari.py")
# The tiny settings of test_abs_pqn_atari.py (8 envs, 2 minibatches, 2 short evaluation games), except for the
# controller: L in [1, 8], an estimate every iteration from 2 micro-batches (tests/scripts.py says why).
TINY = [*SCRIPTS["gns_pqn_atari.py"].adaptive, *CPU]
ADAPT_TAGS = ["adapt/gns", "adapt/gns_noise", "adapt/gns_signal", "adapt/num_steps", "adapt/batch_size",
              "adapt/update_epochs", "adapt/gns_seconds", "adapt/gns_undefined"]

# One intra-op thread per run: on 2 shared cores, more threads spin against envpool's workers.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(args, tmp_path, timeout=600):
    return preloaded.run([sys.executable, SCRIPT, *args, "--output-dir", str(tmp_path)], capture_output=True,
                         text=True, timeout=timeout, cwd=tmp_path, env=ENV)


def scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ------------------------------------------------------------------ the estimator against ground truth
def least_squares_population(n=4000, d=6, sigma=1.0, seed=0):
    """Linear least squares, loss_j(w) = 0.5 * (x_j.w - y_j)^2 with y = sigma * eps, at a unit-norm w.
    Per-sample gradients are exact: (x_j.w - y_j) x_j. The noise eps is projected orthogonal to the
    columns of X, so the true gradient G = X^T X w / n does not depend on sigma while tr(S) grows with it.
    Returns X, y, w, the per-sample gradients [n, d], the true |G|^2 and the true tr(S)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(d, generator=gen, dtype=torch.float64)
    w /= w.norm()
    eps = torch.randn(n, generator=gen, dtype=torch.float64)
    y = sigma * (eps - X @ torch.linalg.solve(X.T @ X, X.T @ eps))
    per_sample = (X @ w - y)[:, None] * X
    G = per_sample.mean(0)
    tr_S = (per_sample - G).pow(2).sum(1).mean().item()  # trace of the per-sample covariance
    return X, y, w, per_sample, G.pow(2).sum().item(), tr_S


def draws(per_sample, m, b, num_draws, seed=1):
    """num_draws independent batches of m micro-batches of b samples (drawn with replacement, i.i.d.);
    row i of a draw is the micro-batch's mean-loss gradient. Returns the estimates of each draw."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(per_sample.shape[0], (num_draws, m, b), generator=gen)
    micro = per_sample[idx].mean(2)  # [draws, m, d]
    return np.array([gns.gns_estimate(micro[k], m * b) for k in range(num_draws)])  # [draws, 3]


def test_per_sample_gradients_are_the_autograd_gradients():
    X, y, w, per_sample, _, _ = least_squares_population(n=50, sigma=2.0)
    w = w.clone().requires_grad_()
    for j in (0, 17):
        (grad,) = torch.autograd.grad(0.5 * (X[j] @ w - y[j]).pow(2), w)
        torch.testing.assert_close(grad, per_sample[j])
    (grad,) = torch.autograd.grad(0.5 * (X[:7] @ w - y[:7]).pow(2).mean(), w)  # a micro-batch: the mean
    torch.testing.assert_close(grad, per_sample[:7].mean(0))


@pytest.mark.parametrize("m, b", [(2, 16), (8, 64), (8, 512)])
def test_estimates_are_unbiased_for_the_true_tr_S_and_G2(m, b):
    *_, per_sample, G2_true, trS_true = least_squares_population(sigma=1.0)
    est = draws(per_sample, m, b, num_draws=600)
    for col, truth in [(0, trS_true), (1, G2_true)]:
        mean, se = est[:, col].mean(), est[:, col].std(ddof=1) / math.sqrt(len(est))
        assert abs(mean - truth) < 4 * se, (col, mean, truth, se)  # within sampling tolerance
    assert est[:, 0].mean() == pytest.approx(trS_true, rel=0.12)  # a missing factor b in tr(S) is off by 16x+


def test_b_simple_follows_the_noise_up_and_down():
    m, b = 8, 512  # the paper's default batch: B = 128 x 32 = 4096 in 8 micro-batches
    truth, estimate, medians = [], [], []
    for sigma in (0.25, 1.0, 4.0):
        *_, per_sample, G2_true, trS_true = least_squares_population(sigma=sigma)
        est = draws(per_sample, m, b, num_draws=300, seed=2)
        truth.append(trS_true / G2_true)
        estimate.append(est[:, 0].mean() / est[:, 1].mean())
        medians.append(np.nanmedian(est[:, 2]))
        assert estimate[-1] == pytest.approx(truth[-1], rel=0.1)
        assert medians[-1] == pytest.approx(truth[-1], rel=0.25)
    assert truth[0] < truth[1] < truth[2] and truth[2] > 10 * truth[0]  # more noise: a larger B_simple
    assert estimate[0] < estimate[1] < estimate[2] and medians[0] < medians[1] < medians[2]
    for k in (0, 1):  # it scales by the true factor, up and down
        assert estimate[k + 1] / estimate[k] == pytest.approx(truth[k + 1] / truth[k], rel=0.15)


def test_gns_estimate_by_hand():
    # g = [3, 1], [1, 1]; B = 8 so b = 4: g_bar = [2, 1], sum ||g_i - g_bar||^2 = 2,
    # tr(S) = 4 / 1 * 2 = 8, |G|^2 = 5 - 8 / 8 = 4, B_simple = 2.
    tr_S, G2, b_simple = gns.gns_estimate(torch.tensor([[3.0, 1.0], [1.0, 1.0]]), 8)
    assert (tr_S, G2, b_simple) == pytest.approx((8.0, 4.0, 2.0))
    # Identical micro-batch gradients: no noise, B_simple = 0.
    assert gns.gns_estimate(torch.ones(4, 3), 16) == pytest.approx((0.0, 3.0, 0.0))
    # [1, 0], [0, 1] with B = 4: |G|^2 = 0.5 - 2 / 4 = 0, undefined.
    tr_S, G2, b_simple = gns.gns_estimate(torch.eye(2), 4)
    assert (tr_S, G2) == pytest.approx((2.0, 0.0)) and math.isnan(b_simple)
    with pytest.raises(ValueError):
        gns.gns_estimate(torch.ones(1, 3), 4)


# ------------------------------------------------------------------ the schedule
@pytest.mark.parametrize("b_simple, L", [(0.0, 16), (128 * 10, 16), (128 * 40, 40), (128 * 40.5, 41),
                                         (128 * 40.49, 40), (128 * 64, 64), (1e12, 64)])
def test_schedule_rounds_half_up_and_clips(b_simple, L):
    s = gns.GNSScheduler(16, 64, 128)
    assert s.update(b_simple, 1.0) == L == s.num_steps
    assert s.b_simple == pytest.approx(b_simple)


@pytest.mark.parametrize("tr_S, G2", [(5.0, 0.0), (5.0, -1e-3), (float("nan"), float("nan")), (0.0, 0.0)])
def test_undefined_estimate_keeps_L_and_is_counted(tr_S, G2):
    s = gns.GNSScheduler(16, 64, 128)
    assert s.update(128 * 40, 1.0) == 40
    assert s.update(tr_S, G2) == 40 and s.num_steps == 40  # the public code would drop to L_min (16)
    assert math.isnan(s.b_simple) and (s.num_estimates, s.num_undefined) == (2, 1)
    assert s.update(128 * 20, 1.0) == 20 and (s.num_estimates, s.num_undefined) == (3, 1)


def test_undefined_from_the_estimator_keeps_L():
    g = torch.randn(4, 10, generator=torch.Generator().manual_seed(0))
    tr_S, G2, b_simple = gns.gns_estimate(torch.cat([g, -g]), 64)  # g_bar = 0: |G|^2 = -tr(S) / B < 0
    assert tr_S > 0 and G2 == pytest.approx(-tr_S / 64) and math.isnan(b_simple)
    s = gns.GNSScheduler(1, 8, 4)
    s.L = 5
    assert s.update(tr_S, G2) == 5 and s.num_undefined == 1


def test_starts_at_L_min_and_state_roundtrip():
    s = gns.GNSScheduler(16, 64, 128)
    assert s.num_steps == 16 and s.num_estimates == 0 and math.isnan(s.b_simple)
    for tr_S, G2 in [(128 * 30.0, 1.0), (1.0, -1.0), (128 * 50.0, 1.0)]:
        s.update(tr_S, G2)
    t = gns.GNSScheduler(16, 64, 128)
    buf = io.BytesIO()
    torch.save(s.state_dict(), buf)  # as in checkpoint.pt
    buf.seek(0)
    t.load_state_dict(torch.load(buf, weights_only=False))
    assert (t.L, t.b_simple, t.num_estimates, t.num_undefined) == (50, 128 * 50.0, 3, 1)
    assert t.update(-1.0, -1.0) == s.update(-1.0, -1.0) == 50


@pytest.mark.parametrize("L, epochs", [(16, 2), (24, 2), (40, 3), (64, 4)])
def test_epoch_rule_is_abs_pqn_atari_s(L, epochs):
    assert gns.update_epochs_for(L, 2, 32) == epochs == abs_pqn.update_epochs_for(L, 2, 32)


# ------------------------------------------------------------------ micro-batch gradients
def test_micro_batch_gradients_match_autograd_per_micro_batch():
    torch.manual_seed(0)
    net = gns.QNetwork(3)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    n, m = 16, 4
    obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 3, (n,))
    returns = torch.randn(n)
    valid = torch.ones(n)
    perm = torch.randperm(n)
    valid[perm[[1, 6, 7]]] = 0.0  # reset transitions inside micro-batches 0 and 1
    valid[perm[12:]] = 0.0  # micro-batch 3 is all reset transitions: zero gradient
    got = gns.micro_batch_gradients(net, obs, actions, returns, valid, m, perm)

    params = list(net.parameters())
    P = sum(p.numel() for p in params)
    assert got.shape == (m, P)
    assert all(p.grad is None for p in params)  # .grad (and so the optimizer) untouched
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())
    ref = copy.deepcopy(net)
    for i in range(m):
        idx = perm[i * 4 : (i + 1) * 4]
        keep = idx[valid[idx] > 0]  # the mean over the micro-batch's valid transitions
        ref.zero_grad()
        if len(keep):
            q = ref(obs[keep])[torch.arange(len(keep)), actions[keep]]
            nn.functional.mse_loss(q, returns[keep]).backward()
            expected = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
        else:
            expected = torch.zeros(P)
        torch.testing.assert_close(got[i], expected, rtol=1e-4, atol=1e-5)
    assert got[3].abs().sum() == 0 and got[0].abs().sum() > 0


def test_micro_batch_gradients_average_to_the_batch_gradient():
    torch.manual_seed(1)
    net = gns.QNetwork(4)
    obs = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    actions, returns, valid = torch.randint(0, 4, (8,)), torch.randn(8), torch.ones(8)
    got = gns.micro_batch_gradients(net, obs, actions, returns, valid, 2)  # default order: as stored
    loss = (net(obs).gather(1, actions[:, None]).squeeze(1) - returns).pow(2).mean()
    full = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(net.parameters()))])
    torch.testing.assert_close(got.mean(0), full, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError):
        gns.micro_batch_gradients(net, obs, actions, returns, valid, 3)


# ------------------------------------------------------------------ the authors' GNS protocol (flags), by hand
def hand_gns(net, obs, actions, returns, valid, blocks):
    """tr(S), |G|^2 of McCandlish et al. written out: one autograd gradient of the masked mean squared error
    per micro-batch (index tensor in `blocks`), then b/(m-1) sum ||g_i - g_bar||^2 and ||g_bar||^2 - tr(S)/B."""
    params = list(net.parameters())
    g = []
    for idx in blocks:
        q = net(obs[idx]).gather(1, actions[idx][:, None]).squeeze(1)
        loss = (valid[idx] * (q - returns[idx]) ** 2).sum() / valid[idx].sum()
        g.append(torch.cat([x.reshape(-1) for x in torch.autograd.grad(loss, params)]).double().numpy())
    g = np.stack(g)
    m, B = len(blocks), obs.shape[0]
    b = B // m
    g_bar = g.mean(0)
    tr_S = b / (m - 1) * ((g - g_bar) ** 2).sum()
    return tr_S, (g_bar**2).sum() - tr_S / B


def tiny_time_major_batch(L=4, E=4, num_actions=3, seed=0):
    """A [L, E] rollout flattened time-major as the script does (row t * E + e), with one reset transition."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (L, E, 4, 84, 84), dtype=torch.uint8, generator=gen)
    actions = torch.randint(0, num_actions, (L, E), generator=gen)
    returns = torch.randn(L, E, generator=gen)
    valid = torch.ones(L, E)
    valid[1, 2] = 0.0
    return obs.reshape(L * E, 4, 84, 84), actions.reshape(-1), returns.reshape(-1), valid.reshape(-1)


def test_learning_rate_annealing_by_hand():
    assert gns.learning_rate_at(2.5e-4, 0, 1000, True) == 2.5e-4
    assert gns.learning_rate_at(2.5e-4, 250, 1000, True) == pytest.approx(1.875e-4, rel=1e-12)
    assert gns.learning_rate_at(2.5e-4, 1000, 1000, True) == 0.0
    assert gns.learning_rate_at(2.5e-4, 1100, 1000, True) == 0.0  # the last rollout overshoots: never negative
    assert gns.learning_rate_at(2.5e-4, 250, 1000, False) == 2.5e-4  # the paper's PQN: constant


def test_estimate_timing_by_iteration():
    # The authors' code counts iterations from 1 and estimates after the update when the count is a multiple of
    # K: after the K-th, 2K-th, ... update. 0-based here: after iterations K-1, 2K-1, ...; the default estimates
    # before the update of iterations 0, K, 2K, ...
    assert [i for i in range(10) if gns.gns_estimates_in(i, 3, "before")] == [0, 3, 6, 9]
    assert [i for i in range(10) if gns.gns_estimates_in(i, 3, "after")] == [2, 5, 8]
    assert [i for i in range(200) if gns.gns_estimates_in(i, 50, "after")] == [49, 99, 149, 199]


@pytest.mark.parametrize("L, fixed, epochs", [(16, True, 2), (64, True, 2), (16, False, 2), (64, False, 4),
                                              (40, False, 3)])
def test_fixed_epochs_by_hand(L, fixed, epochs):
    assert gns.gns_update_epochs(L, 2, 32, fixed) == epochs


def test_contiguous_micro_batches_are_blocks_of_consecutive_steps():
    L, E, m = 4, 4, 2
    assert torch.equal(gns.micro_batch_order(L * E, "contiguous", "cpu"), torch.arange(L * E))
    torch.manual_seed(3)
    order = gns.micro_batch_order(L * E, "shuffled", "cpu")
    assert sorted(order.tolist()) == list(range(L * E)) and not torch.equal(order, torch.arange(L * E))
    torch.manual_seed(0)
    net = gns.QNetwork(3)
    obs, actions, returns, valid = tiny_time_major_batch(L, E)
    order = gns.micro_batch_order(L * E, "contiguous", "cpu")
    got = gns.micro_batch_gradients(net, obs, actions, returns, valid, m, order)
    steps = torch.arange(L * E) // E  # the time step of each row of the time-major batch
    blocks = [torch.nonzero(steps < 2).squeeze(1), torch.nonzero(steps >= 2).squeeze(1)]  # steps 0-1, steps 2-3
    tr_S, G2 = hand_gns(net, obs, actions, returns, valid, blocks)
    est = gns.gns_estimate(got, L * E)
    assert est[0] == pytest.approx(tr_S, rel=1e-6) and est[1] == pytest.approx(G2, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("micro_batching", ["contiguous", "shuffled"])
def test_authors_timing_estimates_after_the_update_on_the_batch_just_fitted(micro_batching):
    L, E, m = 4, 4, 2
    obs, actions, returns, valid = tiny_time_major_batch(L, E, seed=1)
    torch.manual_seed(0)
    net = gns.QNetwork(3)
    ref = copy.deepcopy(net)
    opt = torch.optim.RAdam(net.parameters(), lr=1e-3)
    ref_opt = torch.optim.RAdam(ref.parameters(), lr=1e-3)
    torch.manual_seed(7)
    args = gns.Args(num_minibatches=2, max_grad_norm=10.0, gns_timing="after", gns_micro_batches=m,
                    gns_micro_batching=micro_batching)
    _, _, est, seconds = gns.learn_with_gns(net, opt, (obs, actions, returns, valid), 2, args, None, True)
    # By hand: the same update (same random minibatches), then the order of the micro-batches, then the estimate.
    torch.manual_seed(7)
    before = copy.deepcopy(ref)
    gns.pqn_update(ref, ref_opt, (obs, actions, returns, valid), 2, args)
    order = torch.randperm(L * E) if micro_batching == "shuffled" else torch.arange(L * E)
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), ref.parameters()))
    tr_S, G2 = hand_gns(ref, obs, actions, returns, valid, [order[:8], order[8:]])
    assert est[0] == pytest.approx(tr_S, rel=1e-6) and est[1] == pytest.approx(G2, rel=1e-6, abs=1e-9) and seconds > 0
    # ... and not the estimate at the weights before the update (what the default timing measures).
    tr_S0, _ = hand_gns(before, obs, actions, returns, valid, [order[:8], order[8:]])
    assert est[0] != pytest.approx(tr_S0, rel=1e-3)


def test_default_timing_estimates_before_the_update():
    L, E, m = 4, 4, 2
    obs, actions, returns, valid = tiny_time_major_batch(L, E, seed=2)
    torch.manual_seed(0)
    net = gns.QNetwork(3)
    ref = copy.deepcopy(net)
    opt = torch.optim.RAdam(net.parameters(), lr=1e-3)
    ref_opt = torch.optim.RAdam(ref.parameters(), lr=1e-3)
    torch.manual_seed(5)
    args = gns.Args(num_minibatches=2, max_grad_norm=10.0, gns_timing="before", gns_micro_batches=m,
                    gns_micro_batching="shuffled")
    _, _, est, _ = gns.learn_with_gns(net, opt, (obs, actions, returns, valid), 2, args, None, True)
    torch.manual_seed(5)
    order = torch.randperm(L * E)  # drawn first, then the update's minibatches
    tr_S, G2 = hand_gns(ref, obs, actions, returns, valid, [order[:8], order[8:]])
    gns.pqn_update(ref, ref_opt, (obs, actions, returns, valid), 2, args)
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), ref.parameters()))
    assert est[0] == pytest.approx(tr_S, rel=1e-6) and est[1] == pytest.approx(G2, rel=1e-6, abs=1e-9)
    # Without an estimate this is pqn_update alone.
    torch.manual_seed(5)
    args.gns_timing = "after"
    assert gns.learn_with_gns(net, opt, (obs, actions, returns, valid), 1, args, None, False)[2:] == (None, 0.0)


# ------------------------------------------------------------------ flags (the code shared with PQN: test_copies.py)
@pytest.mark.parametrize("flag", ["--window", "--ema-beta", "--divergence-low", "--divergence-high", "--schedule",
                                  "--ref-batch-size", "--adapt-freq", "--burn-in"])
def test_abs_only_flags_are_gone(flag, capsys):
    with pytest.raises(SystemExit) as e:
        gns.parse_args([flag, "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"Unrecognized options: {flag}" in err[0]  # tyro: unknown flag
    with pytest.raises(SystemExit):
        gns.parse_args(["--track-divergence"])
    assert "Unrecognized options: --track-divergence" in capsys.readouterr().err


def test_defaults_are_valid_and_the_papers():
    args, checkpoint = gns.parse_args([])
    assert checkpoint is None
    assert (args.num_envs, args.num_steps_min, args.num_steps_max, args.gns_freq, args.gns_micro_batches) == (
        128, 16, 64, 50, 8)
    assert (args.update_epochs, args.epochs_ref_steps, args.num_minibatches, args.adapt) == (2, 32, 4, True)
    # The principled estimator is the default; the authors' protocol is opt-in.
    assert (args.gns_timing, args.gns_micro_batching, args.gns_start_steps, args.gns_fixed_epochs, args.anneal_lr) == (
        "before", "shuffled", 0, False, False)
    # Fixed batch: the micro-batch rule does not apply.
    args, _ = gns.parse_args(["--no-adapt", "--num-envs", "12", "--num-steps", "32"])
    assert args.num_envs == 12


# ------------------------------------------------------------------ end to end on envpool
def check_eval_json(path, args_expected, total, episodes=2):
    res = json.loads(path.read_text())
    assert set(res) == {"algo", "env_id", "seed", "run_name", "global_step", "total_timesteps", "complete",
                        "train_seconds", "eval", "args"}
    assert res["algo"] == "gns_pqn_atari" and res["env_id"] == "Breakout-v5"
    assert res["total_timesteps"] == total and res["global_step"] >= total
    assert res["train_seconds"] > 0
    ev = res["eval"]
    assert ev["episodes"] == episodes == len(ev["returns"]) == len(ev["lengths"])
    if episodes:
        assert ev["mean"] == pytest.approx(np.mean(ev["returns"])) and ev["min"] <= ev["median"] <= ev["max"]
        assert all(0 < n <= 150 for n in ev["lengths"])
        assert ev["capped"] == sum(n == 150 for n in ev["lengths"])
        assert len(ev["action_counts"]) == 4 and sum(ev["action_counts"]) >= sum(ev["lengths"])  # Breakout's 4
    assert set(res["args"]) == set(vars(gns.Args()))
    for k, v in args_expected.items():
        assert res["args"][k] == v
    return res


@pytest.fixture(scope="module")
def gns_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gns")
    p = run([*TINY, "--total-timesteps", "400", "--run-name", "gns"], tmp_path)
    return p, tmp_path / "gns"


def test_end_to_end_gns_moves_L_within_range(gns_run):
    p, run_dir = gns_run
    assert p.returncode == 0, p.stderr[-2000:]
    check_eval_json(run_dir / "eval_results.json", {"adapt": True, "gns_freq": 1, "gns_micro_batches": 2,
                                                    "num_steps_min": 1, "num_steps_max": 8}, 400)
    assert "step 4" in p.stdout and "| L " in p.stdout and "| B_simple " in p.stdout and "ETA" in p.stdout
    tags = scalars(run_dir)
    for tag in ["charts/SPS", "charts/epsilon", "losses/td_loss", "losses/q_values",
                "perf/env_seconds", "perf/inference_seconds", "perf/update_seconds", "perf/adapt_seconds",
                *ADAPT_TAGS]:
        assert tag in tags, tag
    assert not any(t.startswith("adapt/divergence") for t in tags)
    steps = [s for s, _ in tags["adapt/num_steps"]]
    for tag in ADAPT_TAGS:
        assert [s for s, _ in tags[tag]] == steps  # one row per estimate, all at the same global step
    val = {tag: [v for _, v in tags[tag]] for tag in ADAPT_TAGS}
    Ls = val["adapt/num_steps"]
    assert all(1 <= L <= 8 for L in Ls) and len(set(Ls)) > 1  # L moved and stayed in range
    assert [v for _, v in tags["charts/learning_rate"]] == pytest.approx([2.5e-4] * len(tags["charts/SPS"]))  # constant
    prev_L, undefined = 1, 0  # the run starts at L_min
    rows = zip(*(val[t] for t in ADAPT_TAGS if t != "adapt/gns_seconds"))
    for b_simple, noise, signal, L, B, ep, undefined_now in rows:
        assert noise >= 0 and B == 8 * L and ep == gns.update_epochs_for(int(L), 2, 32)
        if signal > 0:
            assert b_simple == pytest.approx(noise / signal, rel=1e-3, abs=1e-6)
            assert L == gns.round_half_up(min(max(b_simple / 8, 1), 8))
        else:  # undefined: L is kept and the counter goes up
            undefined += 1
            assert math.isnan(b_simple) and L == prev_L
        assert undefined_now == undefined
        prev_L = L
    # Each iteration advances the global step by E * L, where L is the one produced by the previous estimate.
    for (s0, L), (s1, _) in zip(tags["adapt/num_steps"], tags["adapt/num_steps"][1:]):
        assert s1 - s0 == 8 * L
    # adapt/gns_seconds is per estimate; perf/adapt_seconds is their running sum.
    assert all(t > 0 for t in val["adapt/gns_seconds"])
    assert tags["perf/adapt_seconds"][-1][1] == pytest.approx(sum(val["adapt/gns_seconds"]), rel=1e-3)
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert ckpt["scheduler"]["num_estimates"] == ckpt["iteration"] == len(steps)
    assert ckpt["scheduler"]["num_undefined"] == undefined and ckpt["scheduler"]["L"] == Ls[-1]


def test_end_to_end_authors_protocol(tmp_path):
    # The grid's GNS label: estimate after the update, contiguous micro-batches, start at L = 4 (the authors'
    # 32, scaled to this range), fixed epochs, annealed learning rate. --epochs-ref-steps 2 makes the epoch rule
    # ask for L epochs, so the fixed 2 show; an estimate every 3 iterations.
    total = 400
    p = run([*TINY, "--total-timesteps", str(total), "--run-name", "authors", "--eval-episodes", "0", "--gns-freq", "3",
             "--gns-timing", "after", "--gns-micro-batching", "contiguous", "--gns-start-steps", "4",
             "--gns-fixed-epochs", "--anneal-lr", "--epochs-ref-steps", "2"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = tmp_path / "authors"
    check_eval_json(run_dir / "eval_results.json", {"gns_timing": "after", "gns_micro_batching": "contiguous",
                                                    "gns_start_steps": 4, "gns_fixed_epochs": True, "anneal_lr": True},
                    total, episodes=0)
    tags = scalars(run_dir)
    steps = [s for s, _ in tags["charts/SPS"]]  # one row per iteration, at its global step
    assert steps[:3] == [32, 64, 96]  # iterations 1-3 at the start length 4 (8 envs x 4 steps)
    est_steps = [s for s, _ in tags["adapt/num_steps"]]
    assert est_steps == steps[2::3]  # after the 3rd, 6th, ... update, at that iteration's step
    Ls = [int(v) for _, v in tags["adapt/num_steps"]]
    for (s0, L), s1 in zip(zip(est_steps, Ls), [steps[steps.index(s) + 1] for s in est_steps[:-1]]):
        assert s1 - s0 == 8 * L  # the estimate sets the next iteration's L
    assert all(v == 2 for _, v in tags["adapt/update_epochs"])  # the rule would ask for L epochs
    lrs = tags["charts/learning_rate"]
    for (s_prev, _), (_, lr) in zip([(0, None)] + lrs[:-1], lrs):  # the rate of an iteration is set at its start
        assert lr == pytest.approx(2.5e-4 * (1 - s_prev / total), rel=1e-5)
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert ckpt["optimizer"]["param_groups"][0]["lr"] == pytest.approx(lrs[-1][1], rel=1e-6)
    assert ckpt["scheduler"]["num_estimates"] == len(est_steps) == ckpt["iteration"] // 3


def test_end_to_end_bf16_compile(tmp_path):
    p = run([*TINY, "--total-timesteps", "300", "--run-name", "fast", "--bf16", "--compile", "--eval-episodes", "0"],
            tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    res = check_eval_json(tmp_path / "fast" / "eval_results.json", {"bf16": True, "compile": True}, 300, episodes=0)
    tags = scalars(tmp_path / "fast")
    assert np.isfinite([v for _, v in tags["losses/td_loss"]]).all()
    assert len({v for _, v in tags["adapt/num_steps"]}) > 1 and res["global_step"] >= 300


def test_end_to_end_fixed_baseline(tmp_path):
    p = run([*TINY, "--total-timesteps", "200", "--run-name", "fixed", "--no-adapt", "--num-steps", "2",
             "--eval-episodes", "0"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = tmp_path / "fixed"
    res = check_eval_json(run_dir / "eval_results.json", {"adapt": False, "num_steps": 2}, 200, episodes=0)
    assert res["global_step"] == 208  # 13 iterations of 8 envs x 2 steps
    tags = scalars(run_dir)
    assert not any(t.startswith("adapt/") for t in tags)
    assert tags["perf/adapt_seconds"][-1][1] == 0.0
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert ckpt["scheduler"]["num_estimates"] == 0 and ckpt["scheduler"]["L"] == 2


def test_resume_continues_step_count_L_and_run_dir(gns_run, tmp_path):
    p, src = gns_run
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = tmp_path / "gns"
    shutil.copytree(src, run_dir)
    (run_dir / "eval_results.json").unlink()
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    first_step, first_L = ckpt["global_step"], ckpt["scheduler"]["L"]
    p = run(["--resume", str(run_dir / "checkpoint.pt"), "--total-timesteps", "560", "--extend-schedules",
             "--eval-episodes", "0", "--no-cuda"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "resumed" in p.stdout and f"global_step {first_step}" in p.stdout
    res = check_eval_json(run_dir / "eval_results.json", {"num_envs": 8, "gns_micro_batches": 2, "num_steps_max": 8},
                          560, episodes=0)
    ckpt2 = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert ckpt2["global_step"] == res["global_step"] >= 560
    assert ckpt2["scheduler"]["num_estimates"] == ckpt2["iteration"] > ckpt["iteration"]
    assert ckpt2["scheduler"]["num_undefined"] >= ckpt["scheduler"]["num_undefined"]
    assert os.listdir(tmp_path) == ["gns"]  # no second run directory
    rows = scalars(run_dir)["adapt/num_steps"]
    steps = [s for s, _ in rows]
    assert steps == sorted(steps)
    # Every iteration has its row, the checkpoint's own step included (the resume purges only later rows).
    assert sum(s < first_step for s in steps) == ckpt["iteration"] - 1 and first_step in steps
    assert sum(s > first_step for s in steps) == ckpt2["iteration"] - ckpt["iteration"]
    after = [s for s in steps if s > first_step]
    assert after[0] == first_step + 8 * first_L  # the first resumed iteration used the checkpoint's L
    sums = [v for _, v in scalars(run_dir)["perf/adapt_seconds"]]  # carried across the resume, not restarted at 0
    assert sums == sorted(sums) and sums[-1] == pytest.approx(ckpt2["perf"]["adapt"])
    assert ckpt2["perf"]["adapt"] > ckpt["perf"]["adapt"] > 0


# ------------------------------------------------------------------ bad input
# This script's own flag checks (flag_problems): (argv, what the one error line must name), each run by
# tests/test_runs_all_scripts.py on a valid run of 8 steps.
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
    (["--num-steps-min", "80"], "--num-steps-min"), (["--gns-freq", "0"], "--gns-freq"),
    (["--gns-micro-batches", "1"], "--gns-micro-batches"), (["--gns-micro-batches", "3"], "--gns-micro-batches"),
    (["--num-envs", "12"], "--gns-micro-batches"),  # 12 % 4 minibatches is fine, 12 % 8 micro-batches is not
    (["--num-envs", "16", "--gns-micro-batches", "32"], "--gns-micro-batches"),
    (["--gns-start-steps", "-1"], "--gns-start-steps"), (["--gns-start-steps", "80"], "--gns-start-steps"),
    (["--gns-start-steps", "8"], "--gns-start-steps"),  # below L_min
    (["--gns-timing", "during"], "--gns-timing"), (["--gns-micro-batching", "strided"], "--gns-micro-batching"),
    (["--update-epochs", "0"], "--update-epochs"),
    (["--epochs-ref-steps", "0"], "--epochs-ref-steps"), (["--eval-episodes", "-1"], "--eval-episodes"),
    (["--eval-epsilon", "1.5"], "--eval-epsilon"), (["--eval-num-envs", "0"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "0"], "--eval-max-episode-steps"),
    (["--network", "resnet"], "--network"), (["--env-id", "HalfCheetah-v5"], "--env-id"),
    # Past envpool's int32, storage larger than any machine's memory
    (["--num-envs", "3000000000"], "--num-envs"), (["--eval-num-envs", "3000000000"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "3000000000"], "--eval-max-episode-steps"),
    (["--num-steps-max", "1000000000"], "--num-steps-max"),
    (["--no-adapt", "--num-steps", "1000000000"], "--num-steps"),
    (["--update-epochs", "1001"], "--update-epochs"),  # the longest update's epochs above 1000
    (["--update-epochs", "20", "--epochs-ref-steps", "1"], "--epochs-ref-steps"),  # 20 x 64 / 1 = 1280 epochs
]
