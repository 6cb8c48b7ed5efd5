#!/usr/bin/env python
"""purejaxql's own PQN on gymnax's MinAtar, timed: the anchor that abs_pqn_minatar.py is set beside.

Runs with a Python that has JAX, flax, optax, chex, gymnax, hydra-core, omegaconf and wandb (not this project's
dependencies: a separate virtual environment, docs/minatar.md) and a checkout of github.com/mttga/purejaxql:

    /path/to/jax-venv/bin/python bench/minatar/purejaxql_run.py --purejaxql /path/to/purejaxql \\
        --env Breakout-MinAtar --total-timesteps 10000000 --seeds 1 2 3 --out anchor/breakout.json

The configuration is purejaxql's `config/alg/pqn_minatar.yaml` with ENV_NAME, TOTAL_TIMESTEPS (and its decay length)
and SEED replaced; its `make_train` is compiled ahead of time (jax.jit(...).lower().compile()), so that the
compilation's seconds are apart from the training's. Seeds run one after another (each its own PRNGKey(seed)), not
vmapped, so that each run's seconds are its own; a seed already in --out (same configuration) is skipped, so that a
stopped job started again goes on. Writes one JSON: per seed, the compile and run seconds and the
metrics purejaxql logs per update (env_step, the training episodes' returned_episode_returns, and its greedy test
returns every 5% of the updates, test/returned_episode_returns)."""
import argparse
import json
import os
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--purejaxql", required=True, help="a checkout of github.com/mttga/purejaxql")
    p.add_argument("--env", default="Breakout-MinAtar", help="gymnax's MinAtar id (default Breakout-MinAtar)")
    p.add_argument("--total-timesteps", type=int, default=10_000_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--no-test", action="store_true", help="TEST_DURING_TRAINING off (the speed measurement)")
    p.add_argument("--out", required=True, help="the JSON to write")
    a = p.parse_args()
    sys.path.insert(0, os.path.abspath(a.purejaxql))
    import jax
    import numpy as np
    from omegaconf import OmegaConf
    from purejaxql.pqn_minatar import make_train

    alg = OmegaConf.to_container(OmegaConf.load(os.path.join(a.purejaxql, "purejaxql/config/alg/pqn_minatar.yaml")))
    config = {**alg, "ENV_NAME": a.env, "TOTAL_TIMESTEPS": a.total_timesteps,
              "TOTAL_TIMESTEPS_DECAY": a.total_timesteps, "WANDB_MODE": "disabled",
              "TEST_DURING_TRAINING": not a.no_test}
    result = {"config": config, "jax": jax.__version__, "devices": [str(d) for d in jax.devices()], "seeds": {}}
    if os.path.exists(a.out):  # a restarted job keeps the seeds it finished (a seed is one uninterruptible call)
        done = json.load(open(a.out))
        if done.get("config") == config:
            result["seeds"] = done["seeds"]
    for seed in a.seeds:
        if str(seed) in result["seeds"]:
            print(f"{a.env} seed {seed}: already in {a.out}")
            continue
        t0 = time.perf_counter()
        train = jax.jit(make_train(dict(config, SEED=seed))).lower(jax.random.PRNGKey(seed)).compile()
        t1 = time.perf_counter()
        out = jax.block_until_ready(train(jax.random.PRNGKey(seed)))
        t2 = time.perf_counter()
        m = out["metrics"]
        keep = ["env_step", "returned_episode_returns", "test/returned_episode_returns"]
        result["seeds"][str(seed)] = {"compile_seconds": t1 - t0, "run_seconds": t2 - t1,
                                 "steps": int(m["env_step"][-1]),
                                 **{k: np.asarray(m[k]).tolist() for k in keep if k in m}}
        print(f"{a.env} seed {seed}: {int(m['env_step'][-1]):,} steps in {t2 - t1:.1f} s "
              f"({int(m['env_step'][-1]) / (t2 - t1):,.0f} steps/s; compile {t1 - t0:.1f} s)", flush=True)
        with open(a.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
