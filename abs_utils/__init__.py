"""The run machinery of the ABS scripts, written once; each script holds its algorithm top to bottom.

Each script imports this package first, as `import abs_utils as U`, calls `U.catch_signals()`, and uses the names
as `U.name`. Importing the package runs nothing and imports none of its files: each name loads its file when it is
first used (PEP 562), so that the first call can come before torch's import. One file a concern:

- `signals.py`: SIGINT/SIGTERM outside the training loop (one line, exit 128 + n); `catch_signals()` is each
  script's first statement, before its slow imports of torch and envpool.
- `flags.py`: every flag's domain (`DOMAINS`, `in_domain`), the rows every script checks (`common_problems`,
  `count_problems`, memory and epoch bounds), `check_flags`, tyro's errors as one line (`tyro_cli`).
- `parsing.py`: `parse_args`, the command line of a run: a new run's flags and directory, a resume's flags from its
  checkpoint and the rules that relate the two (step budget, stop, finished run).
- `checkpoint.py`: the atomic writers, every RNG's state, loading a weights-only checkpoint and checking it.
- `evaluation.py`: `summarize_eval` (eval_results.json's "eval") and the Atari evaluation loop `play_atari_games`.
- `video.py`: --capture-video, the evaluation's first games as MP4 files (`Videos`, `videos_of`, `Recorder`); the
  video library is imported only when a video is written.
- `writer.py`: `event_writer`, the run's TensorBoard writer, its file named to sort after the run's earlier ones.
- `faults.py`: what ends a run early as one line: a write the disk refused (exit 4), a non-finite loss (exit 3).
- `results.py`: eval_results.json's record, the evaluation's printed summary, the earlier result a resume keeps.
- `run.py`: `Run`, which carries the run directory (locked while the run lives), seeds, device, TensorBoard writer,
  timings, progress line, checkpoints and stop signals through the loop, and calls the two files above:

    args, checkpoint = U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS, {"q_network": dict, ...})
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "update"))  # run directory, seeds, device, wandb
    run.begin(global_step)  # after loading the script's state from `checkpoint`; writer, signals, clocks
    ...  # the loop: run.timed(phase), run.log, run.progress, run.checkpoint(global_step, steps, state)
    run.end_training(); run.finish(global_step, returns, lengths, capped, action_counts)  # eval_results.json

docs/CONVENTIONS.md has the contract. A script copied to another folder takes this folder along.
"""
import importlib

# Each name the scripts use, by the file that holds it.
_NAMES = {
    "signals": ("catch_signals", "stop_outside_loop"),
    "flags": ("DOMAINS", "MAX_COUNT", "MAX_EPOCHS", "MAX_THREADS", "check_flags", "common_problems", "count_problems",
              "epochs_problem", "flag_of", "given_flags", "has_cxx", "in_domain", "memory_problem", "refuse",
              "rollout_memory_problem", "tyro_cli"),
    "checkpoint": ("RUN_STATE", "atomic_torch_save", "check_checkpoint", "describe_error", "is_a", "load_checkpoint",
                   "load_state", "rng_state", "set_rng_state"),
    "parsing": ("parse_args", "result_step"),
    "evaluation": ("NEAR_CONSTANT_SHARE", "action_names", "fire_action", "play_atari_games", "summarize_eval",
                   "top_action"),
    "video": ("Recorder", "Videos", "read_video", "videos_of"),
    "writer": ("event_writer",),
    "faults": ("LOSS_SCALES", "NonFiniteLoss", "loss_scales"),
    "results": ("keep_earlier_result",),
    "run": ("Run", "env_seed"),
}
_FILE_OF = {name: file for file, names in _NAMES.items() for name in names}
__all__ = sorted(_FILE_OF)


def __getattr__(name: str):
    """U.name: the name from its file, imported on first use; U.<file> (U.run, U.checkpoint): the file itself."""
    if name in _FILE_OF:
        value = getattr(importlib.import_module(f".{_FILE_OF[name]}", __name__), name)
    elif name in _NAMES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(_FILE_OF) | set(_NAMES))
