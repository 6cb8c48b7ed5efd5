"""Device checks (marker `cuda`): PQN, GNS, BTR and PPO-Atari end to end on the device; one PQN, one BTR and one
PPO-Atari update on the device against the same update on the CPU; the ABS divergence on both; rollout storage,
targets and updates on the device.

They run on the best device there is: CUDA when torch sees one (`bench/gpu/check.sh` on the GPU machine), else the
CPU, so every CI run exercises the same code paths at tiny sizes. Only what means something on a GPU alone is
checked there alone: peak CUDA memory and placement on `cuda` inside the tests, and the TF32 cases, which skip
without a GPU. `ABS_TEST_DEVICE=cuda` makes a missing GPU an error instead (the GPU call sets it), and
`ABS_TEST_DEVICE=cpu` keeps a GPU machine's tests on the CPU.

Tolerances, GPU against CPU: PyTorch runs cuDNN convolutions in TF32 by default
(`torch.backends.cudnn.allow_tf32`, left on by the scripts), a 10-bit mantissa, so with the scripts' settings a
loss agrees to 5e-3 relative and one update's weight change to 2e-2 (relative L2 norm); in strict float32 (TF32
off) to 1e-4 and 1e-3. The greedy action, and so the divergence, is identical in strict float32; with TF32 only
states whose top two Q-values lie within twice the measured GPU-CPU difference may change their action.
"""
import contextlib
import copy
import json
import os
import sys

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import SCRIPTS  # the scripts and their tiny runs (tests/scripts.py), here without --no-cuda

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abs_btr  # noqa: E402
import abs_ppo_atari as ppo_atari  # noqa: E402
import abs_pqn_atari as pqn  # noqa: E402

pytestmark = pytest.mark.cuda
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def device():
    """cuda when torch sees a GPU, else the CPU; ABS_TEST_DEVICE=cuda or cpu insists on one."""
    want = os.environ.get("ABS_TEST_DEVICE", "")
    if want not in ("", "cpu", "cuda"):
        pytest.fail(f"ABS_TEST_DEVICE={want!r}: use cpu or cuda")
    if want == "cuda" and not torch.cuda.is_available():
        pytest.fail("ABS_TEST_DEVICE=cuda but torch sees no CUDA device")
    return torch.device("cuda" if torch.cuda.is_available() and want != "cpu" else "cpu")


def tf32_needs_gpu(device, strict: bool):
    """The TF32 cases mean something on a GPU alone: on the CPU they are the strict float32 ones, so they skip."""
    if not strict and device.type != "cuda":
        pytest.skip("TF32 is a GPU setting; on the CPU this case is the strict-fp32 one")


@contextlib.contextmanager
def strict_float32(on: bool):
    """TF32 off for convolutions and matrix products while on (PyTorch's defaults otherwise)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    if on:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def script_run(script, argv, tmp_path, device):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    flags = [] if device.type == "cuda" else ["--no-cuda"]
    return preloaded.run([sys.executable, os.path.join(ROOT, script), *argv, *flags, "--output-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)


def scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def param_bytes(net):
    return sum(p.numel() * p.element_size() for p in net.parameters())


def check_run(p, run_dir, device, algo, total, episodes, loss="losses/td_loss"):
    """The run finished on `device` with a complete eval_results.json and a finite `loss`; returns its scalars."""
    assert p.returncode == 0, p.stderr[-3000:]
    assert f" on {device.type}" in p.stdout  # the script's own report of where it runs: no silent CPU fallback
    res = json.loads((run_dir / "eval_results.json").read_text())
    assert res["algo"] == algo and res["global_step"] >= total and res["train_seconds"] > 0
    assert res["eval"]["episodes"] == episodes == len(res["eval"]["returns"])
    assert np.isfinite(res["eval"]["returns"]).all()
    tags = scalars(run_dir)
    assert np.isfinite([v for _, v in tags[loss]]).all()
    assert len(tags["charts/SPS"]) >= 2 and tags["charts/SPS"][-1][1] > 0
    if device.type == "cuda":
        assert "perf/cuda_peak_bytes" in tags
    else:
        assert "perf/cuda_peak_bytes" not in tags
    return tags


# ---------------------------------------------------------------- end to end
PQN_TINY = [*SCRIPTS["abs_pqn_atari.py"].adaptive, "--divergence-low", "0.01", "--divergence-high", "0.5",
            "--total-timesteps", "2000"]


def test_pqn_abs_end_to_end_on_device(device, tmp_path):
    """Also the CPU suite's PQN + ABS end-to-end run (tests/test_abs_pqn_atari.py has the fixed-L ones)."""
    p = script_run("abs_pqn_atari.py", [*PQN_TINY, "--run-name", "pqn", "--checkpoint-every", "500"], tmp_path, device)
    run_dir = tmp_path / "pqn"
    tags = check_run(p, run_dir, device, "abs_pqn_atari", 2000, 2)
    assert "step " in p.stdout and "| L " in p.stdout and "ETA" in p.stdout
    res = json.loads((run_dir / "eval_results.json").read_text())
    assert set(res) == {"algo", "env_id", "seed", "run_name", "global_step", "total_timesteps", "complete",
                        "train_seconds", "eval", "args"} and res["complete"] is True
    assert res["args"]["adapt"] is True and res["args"]["num_steps_max"] == 16
    for tag in ["charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon",
                "losses/td_loss", "losses/q_values", "adapt/divergence", "adapt/divergence_mean",
                "adapt/num_steps", "adapt/batch_size", "adapt/update_epochs", "perf/env_seconds",
                "perf/inference_seconds", "perf/update_seconds", "perf/adapt_seconds"]:
        assert tag in tags, tag
    Ls = [v for _, v in tags["adapt/num_steps"]]
    assert all(4 <= L <= 16 for L in Ls) and len(set(Ls)) > 1  # ABS moved L within its range
    assert all(0.0 <= d <= 1.0 for _, d in tags["adapt/divergence"])
    steps = [s for s, _ in tags["adapt/divergence"]]
    for tag in ["adapt/divergence_mean", "adapt/num_steps", "adapt/batch_size", "adapt/update_epochs"]:
        assert [s for s, _ in tags[tag]] == steps  # one row per measurement, paired by global step
    for (_, L), (_, B), (_, ep) in zip(tags["adapt/num_steps"], tags["adapt/batch_size"], tags["adapt/update_epochs"]):
        assert B == 8 * L and ep == pqn.update_epochs_for(int(L), 2, 32)
    # Each iteration advances the global step by E * L, where L is the one produced by the previous measurement.
    for (s0, L), (s1, _) in zip(tags["adapt/num_steps"], tags["adapt/num_steps"][1:]):
        assert s1 - s0 == 8 * L
    assert (run_dir / "checkpoint.pt").exists()
    # SPS stays a rate across checkpoints (it once divided all steps by the time since the last one).
    assert max(v for _, v in tags["charts/SPS"]) < 5 * res["global_step"] / res["train_seconds"]
    storage = tags["perf/storage_bytes"][0][1]
    assert storage == pqn.Rollout.allocate(16, 8, (4, 84, 84), "meta").nbytes
    if device.type == "cuda":  # rollout storage, weights and both RAdam moments were all allocated on the GPU
        assert tags["perf/cuda_peak_bytes"][-1][1] >= storage + 3 * param_bytes(pqn.QNetwork(4))


PPO_ATARI_TINY = [*SCRIPTS["abs_ppo_atari.py"].adaptive, "--total-timesteps", "640"]


def test_ppo_atari_abs_end_to_end_on_device(device, tmp_path):
    """PPO + ABS on Atari, the categorical KL moving L (tests/test_abs_ppo_atari.py holds the CPU suite's runs)."""
    p = script_run("abs_ppo_atari.py", [*PPO_ATARI_TINY, "--run-name", "ppo"], tmp_path, device)
    tags = check_run(p, tmp_path / "ppo", device, "abs_ppo_atari", 640, 2, loss="losses/policy_loss")
    kl, Ls = [v for _, v in tags["adapt/kl"]], [v for _, v in tags["adapt/num_steps"]]
    assert min(kl) >= 0 and max(kl) > 0 and len(set(Ls)) > 1 and all(4 <= L <= 16 for L in Ls)
    for (s0, L), (s1, _) in zip(tags["adapt/num_steps"], tags["adapt/num_steps"][1:]):
        assert s1 - s0 == 4 * L  # each iteration runs the L of the measurement before it
    storage = tags["perf/storage_bytes"][0][1]
    if device.type == "cuda":  # rollout storage, weights and both Adam moments were all allocated on the GPU
        assert tags["perf/cuda_peak_bytes"][-1][1] >= storage + 3 * param_bytes(ppo_atari.Agent(4))


def test_gns_end_to_end_on_device(device, tmp_path):
    argv = [*SCRIPTS["gns_pqn_atari.py"].adaptive, "--total-timesteps", "600", "--run-name", "gns"]
    p = script_run("gns_pqn_atari.py", argv, tmp_path, device)
    tags = check_run(p, tmp_path / "gns", device, "gns_pqn_atari", 600, 2)
    Ls = [v for _, v in tags["adapt/num_steps"]]
    assert len(Ls) >= 5 and all(1 <= L <= 8 for L in Ls)
    estimates = [v for _, v in tags["adapt/gns"]]
    assert len(estimates) == len(Ls) and all(np.isnan(b) or b > 0 for b in estimates)
    if device.type == "cuda":
        storage = tags["perf/storage_bytes"][0][1]
        assert tags["perf/cuda_peak_bytes"][-1][1] >= storage + 3 * param_bytes(pqn.QNetwork(4))


BTR_TINY = [*SCRIPTS["abs_btr.py"].adaptive, "--model-size", "0.25", "--hidden-size", "32"]  # the IMPALA network


def test_btr_abs_end_to_end_on_device(device, tmp_path):
    """The IMPALA network (spectral norm, max-pool), noisy dueling IQN heads, Munchausen targets and PER."""
    p = script_run("abs_btr.py", [*BTR_TINY, "--total-timesteps", "720", "--run-name", "btr"], tmp_path, device)
    tags = check_run(p, tmp_path / "btr", device, "abs_btr", 720, 1)
    batches = [v for _, v in tags["adapt/batch_size"]]
    assert len(batches) >= 10 and all(b in (32, 64) for b in batches)
    if device.type == "cuda":  # online and target networks and both Adam moments on the GPU
        net = abs_btr.BTRNetwork(4, abs_btr.Args(model_size=0.25, hidden_size=32, num_cosines=16))
        assert tags["perf/cuda_peak_bytes"][-1][1] >= 4 * param_bytes(net)


# ---------------------------------------------------------------- one update, GPU against CPU
def pqn_batch(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g)
    actions = torch.randint(0, 6, (n,), generator=g)
    returns = torch.randn(n, generator=g)
    valid = (torch.rand(n, generator=g) > 0.1).float()
    return obs, actions, returns, valid


def pqn_step(net, dev, batch):
    q = copy.deepcopy(net).to(dev)
    opt = torch.optim.RAdam(q.parameters(), lr=2.5e-4)  # the first RAdam step moves by lr times the gradient
    start = [p.detach().clone() for p in q.parameters()]
    # one minibatch: the update's random permutation (drawn on each device) only reorders a sum
    loss, mean_q = pqn.pqn_update(q, opt, tuple(t.to(dev) for t in batch), 1,
                                  pqn.Args(num_minibatches=1, max_grad_norm=10.0))
    for p in q.parameters():
        assert p.device.type == dev.type and p.grad.device.type == dev.type
        assert opt.state[p]["exp_avg"].device.type == dev.type
    delta = torch.cat([(p.detach() - s).flatten() for p, s in zip(q.parameters(), start)]).cpu()
    return delta, loss, mean_q


@pytest.mark.parametrize("strict", [False, True], ids=["tf32-default", "strict-fp32"])
def test_pqn_update_on_device_matches_cpu(device, strict):
    tf32_needs_gpu(device, strict)
    torch.manual_seed(0)
    net = pqn.QNetwork(6)
    batch = pqn_batch()
    with strict_float32(strict):
        d_dev, loss_dev, q_dev = pqn_step(net, device, batch)
    d_cpu, loss_cpu, q_cpu = pqn_step(net, CPU, batch)
    assert d_cpu.abs().max() > 1e-5  # the weights moved
    loss_tol, delta_tol = (1e-4, 1e-3) if strict else (5e-3, 2e-2)
    assert loss_dev == pytest.approx(loss_cpu, rel=loss_tol) and q_dev == pytest.approx(q_cpu, rel=loss_tol)
    assert rel(d_dev, d_cpu) < delta_tol


def ppo_atari_step(agent, dev, batch):
    a = copy.deepcopy(agent).to(dev)
    sgd = torch.optim.SGD(a.parameters(), lr=1e-3)  # the weight change is the (clipped) gradient itself
    start = [p.detach().clone() for p in a.parameters()]
    # one epoch of one minibatch: the update's random permutation (drawn on each device) only reorders the means
    stats = ppo_atari.ppo_update(a, sgd, *(t.to(dev) for t in batch), 1, ppo_atari.Args(num_minibatches=1))
    for p in a.parameters():
        assert p.device.type == dev.type and p.grad.device.type == dev.type
    delta = torch.cat([(p.detach() - s).flatten() for p, s in zip(a.parameters(), start)]).cpu()
    return delta, stats


@pytest.mark.parametrize("strict", [False, True], ids=["tf32-default", "strict-fp32"])
def test_ppo_atari_update_on_device_matches_cpu(device, strict):
    tf32_needs_gpu(device, strict)
    torch.manual_seed(3)
    agent, n = ppo_atari.Agent(6), 64
    g = torch.Generator().manual_seed(3)
    obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    batch = (obs, actions, logprobs - 0.2 * torch.rand(n, generator=g), torch.randn(n, generator=g),
             values + torch.randn(n, generator=g), values)  # logprobs moved, so that some ratios clip
    with strict_float32(strict):
        d_dev, s_dev = ppo_atari_step(agent, device, batch)
    d_cpu, s_cpu = ppo_atari_step(agent, CPU, batch)
    assert d_cpu.abs().max() > 1e-6 and s_cpu["clipfrac"] > 0
    loss_tol, delta_tol = (1e-4, 1e-3) if strict else (5e-3, 2e-2)
    for key in ("value_loss", "policy_loss", "entropy"):
        assert s_dev[key] == pytest.approx(s_cpu[key], rel=loss_tol, abs=1e-6), key
    assert rel(d_dev, d_cpu) < delta_tol


def btr_step(net, dev, batch, taus, monkeypatch):
    args = abs_btr.Args(model_size=0.5, hidden_size=64)
    q, target = copy.deepcopy(net).to(dev), copy.deepcopy(net).to(dev)
    # The same quantile fractions and noise on both devices (each device draws its own random numbers):
    # fixed fractions, and the target keeps the noise it was copied with.
    q.sample_taus = lambda b, d: taus[0][:b].to(d)
    target.sample_taus = lambda b, d: taus[1][:b].to(d)
    monkeypatch.setattr(abs_btr, "reset_noise", lambda network: None)
    start = [p.detach().clone() for p in q.parameters()]
    sgd = torch.optim.SGD(q.parameters(), lr=1e-3)  # the weight change is the (clipped) gradient itself
    loss, mean_q, td = abs_btr.btr_update(q, target, sgd, batch, args, dev)
    assert all(p.device.type == dev.type for p in q.parameters())
    delta = torch.cat([(p.detach() - s).flatten() for p, s in zip(q.parameters(), start)]).cpu()
    return delta, loss, mean_q, td


@pytest.mark.parametrize("strict", [False, True], ids=["tf32-default", "strict-fp32"])
def test_btr_update_on_device_matches_cpu(device, strict, monkeypatch):
    tf32_needs_gpu(device, strict)
    torch.manual_seed(1)
    net = abs_btr.BTRNetwork(6, abs_btr.Args(model_size=0.5, hidden_size=64))
    rng = np.random.default_rng(1)
    n = 32
    batch = (np.arange(n), rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), rng.integers(0, 6, n),
             rng.normal(size=n).astype(np.float32), np.full(n, 0.97, np.float32),
             rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), rng.uniform(0.5, 1.0, n).astype(np.float32))
    taus = torch.rand(n, net.num_tau), torch.rand(n, net.num_tau)
    with strict_float32(strict):
        d_dev, loss_dev, q_dev, td_dev = btr_step(net, device, batch, taus, monkeypatch)
    d_cpu, loss_cpu, q_cpu, td_cpu = btr_step(net, CPU, batch, taus, monkeypatch)
    assert d_cpu.abs().max() > 1e-6
    loss_tol, delta_tol = (1e-4, 1e-3) if strict else (5e-3, 2e-2)
    assert loss_dev == pytest.approx(loss_cpu, rel=loss_tol) and q_dev == pytest.approx(q_cpu, rel=loss_tol, abs=1e-4)
    assert rel(d_dev, d_cpu) < delta_tol
    assert rel(torch.from_numpy(td_dev), torch.from_numpy(td_cpu)) < loss_tol  # the replay priorities


# ---------------------------------------------------------------- the divergence
@pytest.fixture(scope="module")
def divergence_on_cpu(device):
    """Two networks whose greedy actions differ on some states, M random states (2048 on a GPU, 512 on the CPU),
    delta and Q on the CPU."""
    torch.manual_seed(2)
    old = pqn.QNetwork(6)
    new = copy.deepcopy(old)
    with torch.no_grad():  # a changed policy: some greedy actions move, most stay
        for p in new.parameters():
            p.add_(0.05 * p.std().nan_to_num(0.0) * torch.randn_like(p))
        states = torch.randint(0, 256, (2048 if device.type == "cuda" else 512, 4, 84, 84), dtype=torch.uint8)
        q_cpu = [net(states) for net in (new, old)]
    return new, old, states, pqn.behavioral_divergence(new, old, states), q_cpu


@pytest.mark.parametrize("strict", [False, True], ids=["tf32-default", "strict-fp32"])
def test_divergence_on_device_equals_cpu(device, strict, divergence_on_cpu):
    tf32_needs_gpu(device, strict)
    new, old, states, delta_cpu, q_cpu = divergence_on_cpu
    assert 0.02 < delta_cpu < 0.98
    new_dev, old_dev = copy.deepcopy(new).to(device), copy.deepcopy(old).to(device)
    with strict_float32(strict), torch.no_grad():
        delta_dev = pqn.behavioral_divergence(new_dev, old_dev, states.to(device))
        q_dev = [net(states.to(device)).cpu() for net in (new_dev, old_dev)]
    if strict:
        assert delta_dev == delta_cpu
    for qd, qc in zip(q_dev, q_cpu):
        err = (qd - qc).abs().max().item()
        assert err <= (1e-4 if strict else 1e-2) * qc.abs().max().item()
        top2 = qc.topk(2, dim=1).values
        changed = qd.argmax(1) != qc.argmax(1)
        assert ((top2[:, 0] - top2[:, 1])[changed] <= 2 * err).all()  # only near ties may change their action
    flips = sum((qd.argmax(1) != qc.argmax(1)).sum().item() for qd, qc in zip(q_dev, q_cpu))
    assert abs(delta_dev - delta_cpu) <= flips / len(states)


# ---------------------------------------------------------------- where the tensors live
def test_storage_targets_and_update_stay_on_the_device(device):
    L, E = 16, 8
    rollout = pqn.Rollout.allocate(L, E, (4, 84, 84), device)
    assert all(t.device.type == device.type for t in vars(rollout).values()) and rollout.obs.dtype == torch.uint8
    g = torch.Generator().manual_seed(3)
    rewards, values = torch.randn(L, E, generator=g), torch.randn(L, E, generator=g)
    terminals = (torch.rand(L, E, generator=g) < 0.1).float()
    ends = torch.maximum(terminals, (torch.rand(L, E, generator=g) < 0.05).float())
    for name, t in (("rewards", rewards), ("values", values), ("terminals", terminals), ("ends", ends)):
        getattr(rollout, name).copy_(t)
    returns = pqn.q_lambda_returns(rollout.rewards, rollout.values, rollout.terminals, rollout.ends, 0.99, 0.65)
    assert returns.device.type == device.type  # the Q(lambda) targets are computed where the rollout lives
    assert torch.allclose(returns.cpu(), pqn.q_lambda_returns(rewards, values, terminals, ends, 0.99, 0.65), atol=1e-5)
    net = pqn.QNetwork(4).to(device)
    opt = torch.optim.RAdam(net.parameters(), lr=2.5e-4)
    rollout.obs.copy_(torch.randint(0, 256, rollout.obs.shape, dtype=torch.uint8, generator=g))
    rollout.actions.copy_(torch.randint(0, 4, (L, E), generator=g))
    rollout.valid.fill_(1.0)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    batch = (rollout.obs.reshape(L * E, 4, 84, 84), rollout.actions.reshape(-1), returns.reshape(-1),
             rollout.valid.reshape(-1))
    loss, _ = pqn.pqn_update(net, opt, batch, 2, pqn.Args(num_minibatches=2, max_grad_norm=10.0))
    assert np.isfinite(loss)
    assert all(opt.state[p]["exp_avg_sq"].device.type == device.type for p in net.parameters())
    if device.type == "cuda":  # the update's activations and optimiser state were allocated on the GPU
        assert torch.cuda.max_memory_allocated() > before + 2 * param_bytes(net)


# ---------------------------------------------------------------- last: compilation takes the longest
def test_pqn_bf16_compile_end_to_end_on_device(device, tmp_path):
    # --compile on the GPU only: on a small CPU, torch.compile's C++ builds take minutes (the CPU test suite
    # checks --compile in tests/test_abs_pqn_atari.py), so the rehearsal runs this with --bf16 alone and a fixed L
    # (on the CPU every new batch shape under bf16 costs a slow kernel build; on the GPU L moves, and the compiled
    # network meets new shapes).
    fast = ["--bf16", "--compile"] if device.type == "cuda" else ["--bf16", "--no-adapt", "--num-steps", "8"]
    argv = [*PQN_TINY, "--total-timesteps", "600", "--eval-episodes", "1", "--eval-max-episode-steps", "100", *fast,
            "--run-name", "fast"]
    p = script_run("abs_pqn_atari.py", argv, tmp_path, device)
    res = json.loads((tmp_path / "fast" / "eval_results.json").read_text()) if p.returncode == 0 else {}
    check_run(p, tmp_path / "fast", device, "abs_pqn_atari", 600, 1)
    assert res["args"]["bf16"] is True and res["args"]["compile"] is (device.type == "cuda")
