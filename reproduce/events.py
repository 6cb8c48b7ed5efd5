"""A run's TensorBoard events: read record by record, checked for damage, and loaded as scalar series in one pass.

Why not TensorBoard's loader: its `EventFileLoader` catches the `DataLossError` of a record cut short or failing
its CRC check, logs it at debug level ("Truncated record") and stops reading the file there, without a word. A file
cut or corrupted in the middle then looks like a shorter run. So every file is read here, record by record
(`read_event_file`), and a run whose files are damaged, or whose events end before the run did (`check_events`),
has its training curves left out, with the reason in `Run.event_problems`; its evaluation return
(eval_results.json) is kept. The same pass collects the scalars with the rule TensorBoard's `EventAccumulator`
applies to these files (a resumed writer's purge of the events after its checkpoint; `load_scalars`), and checks
the CRCs with the C library google-crc32c: TensorBoard's own check is pure Python, and it took most of the 37 s
of the 5M-step MuJoCo grid's report (tests/test_events.py compares both readers on committed, resumed, damaged
and restarted runs).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import google_crc32c
import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.backend.event_processing import io_wrapper
from tensorboard.compat.proto import event_pb2

from .runs import RETURN_TAG, SIZE_TAGS, Run

START = event_pb2.SessionLog.START


def masked_crc32c(data: bytes) -> int:
    """The TFRecord framing's masked CRC-32C of `data` (the value TensorBoard's masked_crc32c gives)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass
class EventFile:
    """What reading one event file record by record found (read_event_file)."""
    path: Path
    size: int  # bytes
    read: int  # bytes of intact records from the start of the file
    problem: str | None  # why reading stopped before the end of the file; None when it was read to the end
    last_step: int | None  # the largest step of a summary read (None: no summary read)
    restarts: tuple = ()  # steps of the SessionLog START events read (a resumed writer's purge_step)
    tags: frozenset = frozenset()  # scalar tags read


@dataclass
class Scalars:
    """Scalar events collected across a run's files in reading order: tag -> [(step, wall_time, value)]."""
    tags: frozenset | None  # the tags to collect (None: every tag)
    series: dict = field(default_factory=dict)

    def restart(self, step: int) -> None:
        """A SessionLog START at `step` (a resumed writer's purge_step): TensorBoard's EventAccumulator drops every
        event read so far, of every tag, at or after that step (its _Purge with by_tags=False)."""
        for tag, events in self.series.items():
            self.series[tag] = [e for e in events if e[0] < step]

    def arrays(self) -> dict:
        """tag -> (steps, values), sorted by step then wall time (stable: a tie keeps the reading order); a tag whose
        events were all purged stays, empty, as in TensorBoard."""
        out = {}
        for tag in sorted(self.series):
            events = sorted(self.series[tag], key=lambda e: (e[0], e[1]))
            out[tag] = (np.array([e[0] for e in events], dtype=float), np.array([e[2] for e in events], dtype=float))
        return out


def event_files(run_dir: Path) -> list[Path]:
    """A run directory's event files in the order they were written. TensorBoard's order, by name, is the wall
    clock's, and a resume made on a node whose clock was behind names its file before the one it continues, whose
    events, read after it, would hide the resumed ones (the scripts name new files after the old since
    abs_utils.writer, but a directory may hold older files). So a resume's file (its writer's session START at the
    checkpoint's step + 1, s > 0) is read only once a file with a step below s has been: in name order otherwise,
    which keeps a fresh start over a killed attempt's files (START at 0) last."""
    files = sorted(p for p in run_dir.iterdir() if p.is_file() and io_wrapper.IsSummaryEventsFile(str(p)))
    heads = {p: file_head(p) for p in files}
    order, waiting, lowest = [], [], float("inf")
    for p in files:
        waiting.append(p)
        placed = True
        while placed:  # place every waiting file whose predecessor is in: the lowest START first, then by name
            placed = False
            for q in sorted(waiting, key=lambda w: heads[w][0]):
                start, first = heads[q]
                if start <= 0 or lowest < start:
                    order.append(q)
                    waiting.remove(q)
                    lowest = min(lowest, first if first is not None else float("inf"))
                    placed = True
                    break
    return order + waiting


def file_head(path: Path, records: int = 8) -> tuple[int, int | None]:
    """(the step of the session START among a file's first records, its writer's purge step, or -1 without one; the
    step of its first summary, None without one)."""
    start, first = -1, None
    try:
        with open(path, "rb") as f:
            for _ in range(records):
                header = f.read(12)
                if len(header) < 12:
                    break
                length = struct.unpack("<Q", header[:8])[0]
                if length > 1 << 20:  # no record of these files is this long: a damaged one
                    break
                event = event_pb2.Event.FromString(f.read(length))
                f.read(4)
                if event.HasField("session_log") and event.session_log.status == START and start < 0:
                    start = event.step
                elif event.HasField("summary") and first is None:
                    first = event.step
                    break
    except (OSError, DecodeError, struct.error):
        pass
    return start, first


def read_event_file(path: Path, scalars: Scalars | None = None) -> EventFile:
    """Read the TFRecord framing of an event file (length, its masked CRC-32C, the data, its CRC-32C), as
    TensorBoard's reader does, and parse each record as an Event. TensorBoard stops at the first record that is cut
    short or fails a CRC check, silently (a "truncated record" at debug level), and reads nothing after it: a file
    cut or corrupted in the middle looks to it like a shorter run. Here the stop is reported, with the bytes read.
    With `scalars`, the simple-value scalars of the records read (those TensorBoard also reads) are added to it."""
    size, pos, last, restarts, tags = path.stat().st_size, 0, None, [], set()
    want = None if scalars is None else scalars.tags

    def result(problem=None):
        return EventFile(path, size, pos, problem, last, tuple(restarts), frozenset(tags))
    try:
        data = path.read_bytes()
    except OSError as e:
        return result(f"cannot be opened ({type(e).__name__}: {e.strerror or e})")
    size = len(data)
    while pos < size:
        if size - pos < 12:
            return result("a record cut short (in its header)")
        header = data[pos:pos + 8]
        (length,), (crc,) = struct.unpack("<Q", header), struct.unpack_from("<I", data, pos + 8)
        if masked_crc32c(header) != crc:
            return result("a record failing its CRC check (header)")
        if length > size - pos - 16:
            return result("a record cut short (in its data)")
        record = data[pos + 12:pos + 12 + length]
        if masked_crc32c(record) != struct.unpack_from("<I", data, pos + 12 + length)[0]:
            return result("a record failing its CRC check (data)")
        try:
            event = event_pb2.Event.FromString(record)
        except DecodeError:
            return result("a record that is not an event")
        pos += 16 + length
        if event.HasField("summary"):
            last = event.step if last is None else max(last, event.step)
            for v in event.summary.value:
                tags.add(v.tag)
                if scalars is not None and (want is None or v.tag in want) and v.HasField("simple_value"):
                    scalars.series.setdefault(v.tag, []).append((event.step, event.wall_time, v.simple_value))
        elif event.HasField("session_log") and event.session_log.status == START:
            restarts.append(event.step)
            if scalars is not None:
                scalars.restart(event.step)
    return result()


def read_run_events(run_dir: Path, tags=None) -> tuple[list[EventFile], dict]:
    """(what reading each event file found, tag -> (steps, values) of `tags`, None: every tag) for a run directory,
    its files read once, in TensorBoard's order."""
    scalars = Scalars(None if tags is None else frozenset(tags))
    files = [read_event_file(p, scalars) for p in event_files(run_dir)]
    return files, scalars.arrays()


def iteration_tag(tags) -> str | None:
    """The tag the completeness check follows: one logged every iteration (charts/SPS, else a losses/* tag), else
    the training games (charts/episodic_return); None when the events hold none of them."""
    for tag in ("charts/SPS", *sorted(t for t in tags if t.startswith("losses/")), RETURN_TAG):
        if tag in tags:
            return tag
    return None


def logging_interval(steps) -> float:
    """The largest step gap between consecutive logged steps of a tag, counted from step 0: one logging interval
    (an iteration's steps for PPO and PQN, whose rollout length may grow, or BTR's --log-every steps)."""
    s = np.unique(np.asarray(steps, dtype=float))
    return float(np.max(np.diff(np.concatenate([[0.0], s])))) if len(s) else 0.0


def check_events(run: Run, files: list[EventFile], scalars: dict) -> tuple[list[str], list[str]]:
    """(problems, notes) of a run's event files. A problem leaves its training-curve numbers out:
    - damaged: a file TensorBoard cannot read to its end (a record cut short or failing its CRC check), unless
      a later file of the run restarts (a resumed writer's purge_step P, which drops every earlier event from step
      P on) at a step the damaged file was read past: then nothing that counts is missing, and it is only noted;
    - incomplete: the events, as TensorBoard reads them, end before the run's last step (eval_results.json
      global_step) by more than one logging interval of a tag logged every iteration (iteration_tag), or hold
      no training event at all (an empty file); a run without any event file is named so by load_run_events."""
    problems, notes = [], []
    who = f"{run.label} {run.game} seed {run.seed}"
    end = f"the run's last step {run.total_steps:,}" if run.total_steps else "the run's last step unknown"
    for i, ef in enumerate(files):
        if ef.problem is None:
            continue
        read = (f"{ef.problem} at byte {ef.read:,} of {ef.size:,}; TensorBoard stops reading the file there, so its "
                f"events end at step " + (f"{ef.last_step:,}" if ef.last_step is not None else "– (none read)"))
        later = [p for x in files[i + 1:] for p in x.restarts]
        if later and (ef.last_step or 0) >= min(later):
            notes.append(f"`{ef.path}` ({who}): {read}, but the run resumed at step {min(later):,} in a later event "
                         "file, which replaces every event from that step on: nothing read is missing (kept)")
        else:
            problems.append(f"`{ef.path}` ({who}): damaged: {read} ({end})")
    tag = iteration_tag(set().union(*(ef.tags for ef in files)) if files else set())
    if not problems and tag is None:  # e.g. an empty file: no curve, which the tables would silently drop
        shown = files[-1].path if files else run.path
        problems.append(f"`{shown}` ({who}): incomplete: its event files hold no training events (none of "
                        f"charts/SPS, losses/*, {RETURN_TAG})")
    if not problems and tag is not None and run.total_steps:
        steps = scalars.get(tag, (np.array([]), None))[0]
        last = float(steps.max()) if len(steps) else None
        interval = logging_interval(steps)
        if last is None or last < run.total_steps - interval:
            shown = files[-1].path if files else run.path
            problems.append(f"`{shown}` ({who}): incomplete: its events end at step "
                            + (f"{last:,.0f}" if last is not None else "– (none of them)")
                            + f" ({tag}), before {end} by more than one logging interval ({interval:,.0f} steps)")
    return problems, notes


def load_scalars(run_dir: Path, tags) -> dict:
    """tag -> (steps, values) of every event in the run's TensorBoard files, sorted by step: the scripts log one
    `charts/episodic_return` per finished game and several games can end at one step, so no event is dropped (no
    sampling, unlike TensorBoard's default of 10,000 events per tag). A resumed run's events after its checkpoint
    are purged as TensorBoard purges them (the scripts open the writer with purge_step)."""
    return read_run_events(run_dir, tags)[1]


def report_tags(run: Run) -> tuple[str, ...]:
    """The tags the report reads: the training games, the divergence the run's schedule used and its window mean
    (the schedule's delta_bar), and the batch size."""
    return (RETURN_TAG, *run.divergence_tags, *(f"{t}_mean" for t in run.divergence_tags), *SIZE_TAGS)


def load_run_events(run: Run, tags=None) -> None:
    """Fill run.scalars with the `tags` (default: report_tags) of the run's event files, unless they are damaged or
    incomplete (check_events): then the run's training-curve numbers are left out (run.scalars stays empty) and
    run.event_problems says why. Its evaluation return, from eval_results.json, is kept either way."""
    tags = report_tags(run) if tags is None else tuple(tags)
    try:
        files, scalars = read_run_events(run.path)
    except OSError as e:
        run.event_problems = [f"`{run.path}` ({run.label} {run.game} seed {run.seed}): damaged: its event files "
                              f"cannot be listed ({type(e).__name__}: {e.strerror or e})"]
        return
    if not files:  # named, as a damaged file is: its run would drop out of every curve's table without a word
        run.event_problems = [f"`{run.path}` ({run.label} {run.game} seed {run.seed}): incomplete: no TensorBoard "
                              "event file (events.out.tfevents.*) in the run directory"]
        return
    run.event_file_count = len(files)
    run.event_problems, run.event_notes = check_events(run, files, scalars)
    if not run.event_problems:
        run.scalars = {t: v for t, v in scalars.items() if t in tags}


def load_events(data: dict) -> None:
    """load_run_events for every run of data[label][game][seed]."""
    for by_game in data.values():
        for by_seed in by_game.values():
            for run in by_seed.values():
                load_run_events(run)
