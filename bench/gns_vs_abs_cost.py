"""Cost of one GNS estimate (gns_pqn_atari.py) relative to one ABS divergence measurement
(abs_pqn_atari.py) at the paper's default batch: E = 128 envs x L = 32 steps = B = 4096 transitions.

- ABS: the block that abs_pqn_atari.py times as perf/adapt_seconds: draw M = 2048 of the B states,
  two no-grad forward passes (new and snapshot network), compare greedy actions, update the scheduler.
- GNS: the block that gns_pqn_atari.py times as perf/adapt_seconds (and logs as adapt/gns_seconds):
  split B into m = 8 micro-batches of 512, one forward + backward of the PQN loss each, flatten the
  gradients, gns_estimate, update the scheduler.

Both use the scripts' own functions, the default pqn network (4 actions, as Breakout) and random uint8
observations, in one process, alternating the two (the order flips every round) so that a change in
the machine's load hits both. Reported: the median of each, and the median of the per-round ratios.

Per run: each round also times one PQN update on the same batch (2 epochs x 4 minibatches, as at
L = 32). With a measurement every K iterations, the share of time it takes is at most
t_measure / (K * t_update + t_measure): an upper bound, because the iterations' environment steps
and acting are left out of the denominator.

    OMP_NUM_THREADS=1 python bench/gns_vs_abs_cost.py --repeats 5
"""
import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abs_pqn_atari as abs_pqn  # noqa: E402
import gns_pqn_atari as gns  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--ref-batch-size", type=int, default=2048, help="ABS: M states")
    p.add_argument("--micro-batches", type=int, default=8, help="GNS: m")
    p.add_argument("--network", default="pqn")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up of each)")
    p.add_argument("--adapt-freq", type=int, default=50, help="K of both methods, for the per-run share")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(a.device)
    B = a.num_envs * a.num_steps
    q = abs_pqn.QNetwork(4, a.network).to(device)
    snapshot = copy.deepcopy(q)
    with torch.no_grad():  # a slightly different snapshot, as after an update
        for p_ in snapshot.parameters():
            p_.add_(1e-3 * torch.randn_like(p_))
    obs = torch.randint(0, 256, (B, 4, 84, 84), dtype=torch.uint8, device=device)
    actions = torch.randint(0, 4, (B,), device=device)
    returns = torch.randn(B, device=device)
    valid = torch.ones(B, device=device)
    abs_sched = abs_pqn.ABSScheduler(16, 64, 10, 0.1, 0.05, 0.95)
    gns_sched = gns.GNSScheduler(16, 64, a.num_envs)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def abs_measure():  # abs_pqn_atari.py, the `if measure:` block after the update
        sync()
        t0 = time.perf_counter()
        ref = torch.randperm(B, device=device)[: a.ref_batch_size]
        delta = abs_pqn.behavioral_divergence(q, snapshot, obs[ref])
        abs_sched.update(delta)
        return time.perf_counter() - t0

    def gns_measure():  # gns_pqn_atari.py, the `if measure:` block before the update
        sync()
        t0 = time.perf_counter()
        micro_grads = gns.micro_batch_gradients(q, obs, actions, returns, valid, a.micro_batches,
                                                torch.randperm(B, device=device))
        tr_S, G2, _ = gns.gns_estimate(micro_grads, B)
        del micro_grads
        gns_sched.update(tr_S, G2)
        return time.perf_counter() - t0

    load0 = os.getloadavg()
    learner = copy.deepcopy(q)
    optimizer = torch.optim.RAdam(learner.parameters(), lr=2.5e-4)
    update_flags = abs_pqn.Args(num_minibatches=4, max_grad_norm=10.0)

    def update():  # abs_pqn_atari.py's pqn_update at L = 32: 2 epochs x 4 minibatches of B / 4
        sync()
        t0 = time.perf_counter()
        abs_pqn.pqn_update(learner, optimizer, (obs, actions, returns, valid), 2, update_flags)
        sync()
        return time.perf_counter() - t0

    abs_measure(), gns_measure(), update()  # warm-up
    t_abs, t_gns, t_update = [], [], []
    for r in range(a.repeats):
        if r % 2 == 0:
            t_abs.append(abs_measure())
            t_gns.append(gns_measure())
        else:
            t_gns.append(gns_measure())
            t_abs.append(abs_measure())
        t_update.append(update())
        print(f"round {r}: ABS {t_abs[-1]:.3f} s  GNS {t_gns[-1]:.3f} s  ratio {t_gns[-1] / t_abs[-1]:.2f}  "
              f"update {t_update[-1]:.3f} s", flush=True)
    K, upd = a.adapt_freq, statistics.median(t_update)
    res = {
        "batch": B, "abs_states": a.ref_batch_size, "gns_micro_batches": a.micro_batches, "network": a.network,
        "device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "loadavg_start": load0, "loadavg_end": os.getloadavg(),
        "abs_seconds": t_abs, "gns_seconds": t_gns,
        "abs_median_s": statistics.median(t_abs), "gns_median_s": statistics.median(t_gns),
        "ratio_of_medians": statistics.median(t_gns) / statistics.median(t_abs),
        "median_round_ratio": statistics.median(g / b for g, b in zip(t_gns, t_abs)),
        "update_seconds": t_update, "update_median_s": upd, "adapt_freq": K,
        "abs_run_share_max": statistics.median(t_abs) / (K * upd + statistics.median(t_abs)),
        "gns_run_share_max": statistics.median(t_gns) / (K * upd + statistics.median(t_gns)),
    }
    print(f"B = {B}: ABS (M = {a.ref_batch_size}) median {res['abs_median_s']:.3f} s, GNS (m = {a.micro_batches}) "
          f"median {res['gns_median_s']:.3f} s; GNS / ABS = {res['ratio_of_medians']:.2f} (median of per-round "
          f"ratios {res['median_round_ratio']:.2f}); {res['threads']} torch thread(s), load {load0[0]:.1f} -> "
          f"{res['loadavg_end'][0]:.1f}")
    print(f"per run at K = {K}: one update {upd:.3f} s; ABS takes at most {100 * res['abs_run_share_max']:.2f}% "
          f"of the time, GNS at most {100 * res['gns_run_share_max']:.2f}% (environment and acting time excluded)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
