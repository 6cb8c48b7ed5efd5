"""Play a saved agent again without training: evaluate a run's model.pt (--save-model) or checkpoint.pt, optionally
recording its games (--capture-video), as CleanRL's `cleanrl_utils/evals` does for its models.

    python play.py runs/Breakout-v5__abs_pqn_atari__1__1700000000/model.pt --episodes 10 --capture-video

The file names the script that wrote it (its `algo`) and holds every flag of its run: the script's own network is
rebuilt from them, its weights loaded, and the script's own `evaluate` plays --episodes games (default: the run's
--eval-episodes) with the run's evaluation policy and settings, on the run's evaluation seed (--seed + 10000) unless
--seed is given. Where the run's eval_results.json at the file's step lies beside the file, the evaluation's flags
are taken from it (a resume that only evaluated again may have changed them without writing checkpoint.pt again).
So a model played with the run's episodes and seed, on the run's device and settings, gives the run's own
evaluation returns (tests/test_play.py). The results go to a new folder beside the file (or in --output-dir),
`play-<UTC time>/` (play_results.json, videos/); the run's own files are only read. A file of no script here, or
whose weights do not fit the network its flags build, is refused with one line, exit 2, as are --env-id and --algo
when the file is of another game or script. A sampling evaluation (PPO without --eval-greedy, an --eval-epsilon
above 0) draws from torch's generator, seeded here with the evaluation's seed: its games repeat from play to play,
not the run's draws. docs/video.md has the details.
"""
import abs_utils as U
if __name__ == "__main__":  # first: SIGINT/SIGTERM during the slow imports below are one line, not a traceback
    U.stop_outside_loop("while playing", "the run's files are unchanged (play.py only reads them); play again")

import dataclasses
import datetime
import hashlib
import importlib
import json
import os
import sys
import time
import typing
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

import torch
import tyro

from abs_utils.checkpoint import atomic_json_save, digest

ROOT = os.path.dirname(os.path.abspath(__file__))
Script = Literal["abs_pqn_atari", "gns_pqn_atari", "abs_ppo_atari", "abs_btr", "abs_ppo_mujoco", "abs_pqn_minatar"]
SCRIPTS = typing.get_args(Script)
NETWORK_KEY = {"abs_ppo_atari": "agent", "abs_ppo_mujoco": "agent"}  # the others: "q_network"


def default(text: str, metavar: str):
    """A flag whose default (None) stands for a value of the run, or for none: `text` is what --help shows as its
    default (tyro >= 0.8.11)."""
    return tyro.conf.arg(metavar=metavar, help_behavior_hint=f"(default: {text})")


@dataclass
class PlayArgs:
    """Play a saved agent again without training: evaluate a run's model.pt or checkpoint.pt with the run's own
    network, flags and evaluation, and write play_results.json (and, with --capture-video, MP4 files) into a new
    play-<UTC time>/ folder beside the file (docs/video.md)."""
    path: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="PATH")]
    """a run's model.pt (--save-model) or checkpoint.pt"""
    episodes: Annotated[Optional[int], default("the run's --eval-episodes", "INT")] = None
    """evaluation games"""
    seed: Annotated[Optional[int], default("the run's evaluation seed, --seed + 10000", "INT")] = None
    """the evaluation environments' seed"""
    capture_video: bool = False
    """record the first games as MP4 files in play-<time>/videos/ (docs/video.md)"""
    video_episodes: int = 2
    """how many games --capture-video records"""
    env_id: Annotated[Optional[str], default("any", "ID")] = None
    """refuse a file of another game than this one"""
    algo: Annotated[Optional[Script], default("any", "{" + ",".join(SCRIPTS) + "}")] = None
    """refuse a file of another script than this one"""
    cuda: bool = True
    """use the GPU when one is visible"""
    torch_threads: int = 0
    """CPU threads of torch (0: torch's default)"""
    output_dir: Annotated[Optional[str], default("beside the file", "DIR")] = None
    """where play-<UTC time>/ is made (another folder for a run one may not write to)"""


def play_problems(p: PlayArgs):
    yield p.episodes is None or 1 <= p.episodes <= U.MAX_COUNT, f"--episodes must be in [1, 10^12], got {p.episodes!r}"
    yield 1 <= p.video_episodes <= U.MAX_COUNT, f"--video-episodes must be in [1, 10^12], got {p.video_episodes!r}"
    yield p.seed is None or 0 <= p.seed < 2**31, f"--seed must be in [0, 2^31), got {p.seed!r}"
    yield (0 <= p.torch_threads <= U.MAX_THREADS,
           f"--torch-threads must be in [0, {U.MAX_THREADS}], got {p.torch_threads}")


def load_saved(path: str) -> dict:
    """The file, loaded weights-only (tensors and plain data; any other pickled object is refused unbuilt), with its
    digest checked when it has one (checkpoints)."""
    if not os.path.isfile(path):
        U.refuse(f"{path!r}: no such file")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        U.refuse(f"{path!r} is not a model.pt or checkpoint.pt of these scripts ({U.describe_error(e)})")
    if not (isinstance(saved, dict) and isinstance(saved.get("args"), dict) and saved.get("algo") in SCRIPTS):
        U.refuse(f"{path!r} is not a model.pt or checkpoint.pt of these scripts (its 'algo' is "
                 f"{saved.get('algo') if isinstance(saved, dict) else None!r}; a model.pt written before play.py has "
                 "none: play the run's checkpoint.pt)")
    written = saved.pop("digest", None)
    if written is not None and written != digest(saved):
        U.refuse(f"{path!r} is damaged: its contents differ from the digest written with them")
    return saved


def evaluation_flags(module, saved: dict, path: str) -> tuple:
    """(the run's own evaluation's flags at the file's step, the record they are read from), where eval_results.json
    beside the file is of the same script and step: a resume that only evaluated again (a signal had stopped the
    evaluation) takes changed evaluation flags without writing checkpoint.pt again. The flags: the run-control flags
    that change what the evaluation plays (--eval-*, --bf16). ({}, None) where there is no such record."""
    record = os.path.join(os.path.dirname(os.path.abspath(path)), "eval_results.json")
    try:
        with open(record) as f:
            result = json.load(f)
        same = (result["algo"] == saved["algo"] and result["global_step"] == saved.get("global_step")
                and isinstance(result["args"], dict))
    except (OSError, ValueError, KeyError, TypeError):
        return {}, None
    names = [f for f in module.RUN_CONTROL_FLAGS if f.startswith("eval_") or f == "bf16"]
    return ({k: result["args"][k] for k in names if k in result["args"]}, record) if same else ({}, None)


def run_args(module, saved: dict, p: PlayArgs, path: str):
    """The run's flags (those of a newer script version that the file lacks: their defaults), its evaluation's from
    its eval_results.json at the file's step where there is one (evaluation_flags), the evaluation's overridden by
    play.py's; and the record the evaluation's flags came from, or None."""
    fields, hints = {f.name for f in dataclasses.fields(module.Args)}, typing.get_type_hints(module.Args)
    evaluated, record = evaluation_flags(module, saved, path)
    for source, flags in ((path, saved["args"]), (record, evaluated)):
        for name, value in flags.items():
            if name in hints and not U.is_a(value, hints[name]):
                U.refuse(f"{source!r} holds {U.flag_of(name)} = {value!r}, which is not a "
                         f"{getattr(hints[name], '__name__', hints[name])}; it is damaged")
    changed = {k: v for k, v in evaluated.items() if saved["args"].get(k) != v}
    if changed:
        print(f"evaluation flags of the run's own evaluation at this step, from {record}: " + ", ".join(
            f"{U.flag_of(k)} {v} (the file's: {saved['args'].get(k)})" for k, v in changed.items()), flush=True)
    try:
        args = module.Args(**{k: v for k, v in {**saved["args"], **evaluated}.items() if k in fields})
    except TypeError as e:
        U.refuse(f"{path!r} holds flags {module.SCRIPT}.py does not take ({U.describe_error(e)})")
    return dataclasses.replace(args, eval_episodes=p.episodes or args.eval_episodes, capture_video=p.capture_video,
                               video_episodes=p.video_episodes, cuda=p.cuda, torch_threads=p.torch_threads), record


def evaluation(module, args, saved: dict, path: str, device):
    """The script's own network with the file's weights, and a call of the script's own evaluate(seed, run_dir)."""
    key, algo = NETWORK_KEY.get(module.SCRIPT, "q_network"), module.SCRIPT
    try:
        net, obs_rms = network(module, args, saved)
    except Exception as e:  # an env id or flag this script cannot build (a file of another script, relabelled)
        U.refuse(f"{path!r}: {algo}.py cannot build its network for {args.env_id} ({U.describe_error(e)}); the file "
                 "is of another script or damaged")
    try:
        net.load_state_dict(saved[key])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
        U.refuse(f"{path!r}'s {key!r} does not fit {algo}.py's network for its flags ({U.describe_error(e)}); the "
                 "file is of another network or game, or damaged")
    net = net.to(device)
    if algo == "abs_ppo_mujoco":
        return lambda seed, run_dir: module.evaluate(net, args.env_id, args.eval_episodes, obs_rms, seed, device,
                                                     U.videos_of(args, run_dir, fps=0))
    player = module.GreedyQ(net.eval()) if algo == "abs_btr" else net
    return lambda seed, run_dir: module.evaluate(player, args, seed, device, run_dir)


def network(module, args, saved: dict):
    """(the script's network for the run's flags, untrained; MuJoCo's frozen observation statistics or None)."""
    algo, obs_rms = module.SCRIPT, None
    if algo == "abs_ppo_mujoco":
        obs_dim, act_dim = module.mujoco_dims(args.env_id)
        net = module.Agent(obs_dim, act_dim)
        obs_rms = saved["obs_rms"] if "obs_rms" in saved else saved["normalization"]["obs_rms"]  # model, checkpoint
    elif algo == "abs_pqn_minatar":
        envs = module.MinAtarEnvs(args.env_id, 1, 0)
        net = module.QNetwork(envs.observation_space.shape[0], envs.action_space.n, args.network, args.obs_divisor)
    else:
        envs = module.make_envs(args.env_id, 1, 0, train=False)
        actions = envs.action_space.n
        envs.close()
        net = {"abs_ppo_atari": lambda: module.Agent(actions),
               "abs_btr": lambda: module.BTRNetwork(actions, args)}.get(algo, lambda: module.QNetwork(actions,
                                                                                                      args.network))()
    return net, obs_rms


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def play_directory(path: str, output_dir: Optional[str]) -> str:
    """A new folder beside the file (or in output_dir): play-<UTC time>[-n]/, never one of the run's."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    parent = os.path.dirname(os.path.abspath(path)) if output_dir is None else output_dir
    base, n = os.path.join(parent, f"play-{stamp}"), 1
    while True:
        directory = base if n == 1 else f"{base}-{n}"
        try:
            os.mkdir(directory)
            return directory
        except FileExistsError:
            n += 1
        except OSError as e:
            U.refuse(f"--output-dir: cannot make {directory} ({U.describe_error(e)})")


def main(argv=None) -> dict:
    p = U.tyro_cli(PlayArgs, argv)
    for ok, message in play_problems(p):
        if not ok:
            U.refuse(message)
    saved = load_saved(p.path)
    algo, env_id = saved["algo"], saved["args"].get("env_id")
    if p.algo is not None and p.algo != algo:
        U.refuse(f"--algo: {p.path!r} is a file of {algo}.py, not of {p.algo}.py")
    if p.env_id is not None and p.env_id != env_id:
        U.refuse(f"--env-id: {p.path!r} is a file of {env_id}, not of {p.env_id}")
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    module = importlib.import_module(algo)  # its first statement, U.catch_signals(), speaks of training: not here
    U.stop_outside_loop("while playing", "the run's files are unchanged (play.py only reads them); play again")
    args, record = run_args(module, saved, p, p.path)
    if args.eval_episodes < 1:
        U.refuse(f"--episodes: the run evaluated no games (--eval-episodes {args.eval_episodes}); give --episodes N")
    if args.capture_video and hasattr(module, "rendering_problem"):  # MuJoCo: a rendering backend, before anything
        ok, message = module.rendering_problem(args.env_id)
        if not ok:
            U.refuse(message)
    if p.torch_threads:
        torch.set_num_threads(p.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and p.cuda else "cpu")
    play = evaluation(module, args, saved, p.path, device)
    seed = args.seed + 10_000 if p.seed is None else p.seed
    directory = play_directory(p.path, p.output_dir)
    U.stop_outside_loop("while playing", f"the run's files are unchanged (play.py only reads them); {directory} "
                        "holds an unfinished play (no play_results.json): remove it and play again")
    print(f"playing {p.path} ({algo}.py, {env_id}, step {saved.get('global_step', '?')}): {args.eval_episodes} "
          f"episodes on seed {seed} -> {directory}", flush=True)
    start = time.monotonic()
    torch.manual_seed(seed)  # a sampling evaluation (PPO, --eval-epsilon > 0): repeatable, though not the run's draws
    with torch.no_grad():
        returns, lengths, capped, *counts = play(seed, directory)
    summary = U.summarize_eval(returns, lengths, capped, *counts)
    print(f"eval: mean {summary['mean']:.2f} +- {summary['std']:.2f} over {summary['episodes']} episodes "
          f"({summary['capped']} hit the step cap)")
    # The played file by its name and SHA-256, not by a path of this machine; play.py's own flags, less its paths.
    result = {"algo": algo, "env_id": env_id, "played": os.path.basename(p.path), "played_sha256": sha256(p.path),
              "run_name": args.run_name, "global_step": saved.get("global_step"), "eval_seed": seed,
              "eval_flags_from": record and os.path.basename(record), "play_seconds": time.monotonic() - start,
              "eval": summary, "args": vars(args),
              "play_args": {k: v for k, v in vars(p).items() if k not in ("path", "output_dir")}}
    atomic_json_save(os.path.join(directory, "play_results.json"), result)
    U.stop_outside_loop("after playing", f"the result is saved in {directory}")
    return result


if __name__ == "__main__":
    main()
