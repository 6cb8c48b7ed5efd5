"""--capture-video: the evaluation's first games as MP4 files, as the game looks to a person (the emulator's RGB
screen on Atari, the package's own colours on MinAtar, MuJoCo's renderer), written under `<run>/videos/`.

The frames come from the evaluated environments themselves (envpool's and gymnasium's `render`, MinAtar's state),
which rendering does not step or reseed: the evaluation's returns are the same with and without videos
(tests/test_video.py). The encoder is imageio-ffmpeg (its wheel carries its own ffmpeg binary), imported only when
a video is written, so that a run without --capture-video never imports it.
"""
import os
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np


@dataclass(frozen=True)
class Videos:
    """Where and how many: the first `episodes` games that the evaluation counts, among those of its first
    `episodes` environments, as `<directory>/<name>__episode<i>__return<R>.mp4` (i: the game's index in
    eval_results.json's eval.returns), at `fps` frames per second."""
    directory: str
    name: str
    episodes: int
    fps: float


def videos_of(args, run_dir: Optional[str], fps: float) -> Optional[Videos]:
    """The Videos of an evaluation that writes into run_dir (a run's directory, or play.py's), under its videos/
    (--capture-video, --video-episodes, named by --run-name), or None."""
    if run_dir is None or not getattr(args, "capture_video", False):
        return None
    return Videos(os.path.join(run_dir, "videos"), args.run_name, args.video_episodes, fps)


def remove_stale_videos(run_dir: str) -> None:
    """An evaluation starts in run_dir, which holds no eval_results.json at this step: the MP4 files in its videos/
    are of an earlier evaluation that a signal stopped (a finished evaluation's went to videos_at_<step>/ with its
    record, keep_earlier_result), and are removed whether or not this evaluation films, so that none is taken for
    one of its games."""
    directory = os.path.join(run_dir, "videos")
    if not os.path.isdir(directory):
        return
    stale = [name for name in os.listdir(directory) if name.endswith(".mp4")]
    for name in stale:
        os.remove(os.path.join(directory, name))
    if not os.listdir(directory):
        os.rmdir(directory)
    if stale:
        print(f"removed {len(stale)} video(s) from {directory}: they were of an evaluation stopped before its end",
              flush=True)


def return_text(episode_return: float) -> str:
    """A return in a file name, never with an exponent: a whole number in full (1234500), any other to 6 significant
    digits (3124.57, 0.00125), as {:g} would write it without one."""
    if float(episode_return).is_integer():
        return str(int(episode_return))
    return np.format_float_positional(episode_return, precision=6, unique=False, fractional=False, trim="-")


def video_name(name: str, episode: int, episode_return: float) -> str:
    return f"{name}__episode{episode}__return{return_text(episode_return)}.mp4"


class Recorder:
    """Streams the frames of envs 0..K-1 to ffmpeg, one file per game, and keeps the file of a game the evaluation
    counts (while fewer than `videos.episodes` are kept); a game it does not count, or one past the count, is
    deleted. `render(env_ids)` -> uint8 [len(env_ids), H, W, 3], the envs' screens now."""

    def __init__(self, videos: Videos, num_envs: int, render: Callable):
        self.videos, self.render = videos, render
        self.envs = list(range(min(videos.episodes, num_envs)))
        self.writers: dict = {}  # env -> (temporary path, ffmpeg generator) of the game it plays now
        self.kept: list[str] = []
        # a stopped evaluation's files are gone: Run.end_training removed them (remove_stale_videos); play.py films
        # into a new folder
        os.makedirs(videos.directory, exist_ok=True)

    @property
    def done(self) -> bool:
        return len(self.kept) >= self.videos.episodes or not self.envs

    def capture(self) -> None:
        """After a reset or a step: one frame of each recorded env; an env whose game ended at the last step
        starts a new file with its reset frame."""
        if self.done:
            return
        for env, frame in zip(self.envs, self.render(self.envs)):
            if env not in self.writers:
                self.writers[env] = self._open(env, frame.shape)
            self.writers[env][1].send(np.ascontiguousarray(frame, dtype=np.uint8))

    def _open(self, env: int, shape) -> tuple:
        import imageio_ffmpeg  # the video library: imported only when a video is written

        path = os.path.join(self.videos.directory, f".{self.videos.name}__env{env}.partial.mp4")
        writer = imageio_ffmpeg.write_frames(path, (shape[1], shape[0]), fps=self.videos.fps, macro_block_size=2,
                                             ffmpeg_log_level="error")
        writer.send(None)  # starts ffmpeg
        return path, writer

    def ended(self, env: int, counted_as: Optional[int], episode_return: float) -> None:
        """Env `env`'s game ended (after its last frame was captured); counted_as: its index among the evaluation's
        counted games, or None (not counted): the file is kept under its name, or deleted."""
        if env not in self.writers:
            return
        path, writer = self.writers.pop(env)
        writer.close()
        if counted_as is not None and len(self.kept) < self.videos.episodes:
            final = os.path.join(self.videos.directory, video_name(self.videos.name, counted_as, episode_return))
            os.replace(path, final)
            self.kept.append(final)
            print(f"video: {final}", flush=True)
        else:
            os.remove(path)
        if self.done:
            self.close()

    def close(self) -> None:
        """Drop the files of games still unfinished (the evaluation ended before them)."""
        for path, writer in self.writers.values():
            writer.close()
            os.remove(path)
        self.writers.clear()


def read_video(path: str) -> np.ndarray:
    """The frames of an MP4 file, uint8 [T, H, W, 3] (for tests and checks)."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(path)
    meta = next(reader)
    width, height = meta["size"]
    return np.stack([np.frombuffer(f, dtype=np.uint8).reshape(height, width, 3) for f in reader])
