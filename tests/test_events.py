"""Tests of reproduce/events.py: the event files read record by record against TensorBoard's own reader, and
the damage and completeness checks on cut, corrupted, resumed and empty copies of committed runs."""
import csv
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import events  # noqa: E402
from reproduce import report  # noqa: E402
from reproduce import runs  # noqa: E402
from report_helpers import COMMITTED, only_event_file, row_of, section, write_run  # noqa: E402


def records(path: Path) -> list[tuple[int, int, set]]:
    """(byte offset where the record ends, its step, its tags) of every record of an intact event file, read here
    without report.py's reader."""
    from tensorboard.compat.proto import event_pb2

    data, pos, out = path.read_bytes(), 0, []
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
        out.append((pos + 16 + n, event.step, {v.tag for v in event.summary.value}))
        pos += 16 + n
    assert pos == len(data)
    return out


def tensorboard_scalars(run_dir: Path, tags=None) -> dict:
    """tag -> (steps, values) as TensorBoard's own EventAccumulator reads a run directory (every event kept, sorted
    by step then wall time): the reference events.read_run_events must equal."""
    import logging

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    level = logging.getLogger("tensorboard").level
    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # its "TensorFlow restart" line at each resume
    try:
        acc.Reload()
    finally:
        logging.getLogger("tensorboard").setLevel(level)
    out = {}
    for tag in acc.Tags()["scalars"]:
        if tags is None or tag in tags:
            ev = sorted(acc.Scalars(tag), key=lambda e: (e.step, e.wall_time))
            out[tag] = (np.array([e.step for e in ev], dtype=float), np.array([e.value for e in ev], dtype=float))
    return out


def same_scalars(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[t][0], b[t][0]) and np.array_equal(a[t][1], b[t][1])
                                        for t in a)


def test_every_committed_event_file_reads_to_its_end_and_reaches_its_run_s_last_step():
    """(tests/test_results.py checks that the committed report, which would list any, comes out the same.)"""
    found = [runs.read_run(lb, d) for lb in ("PPO", "PPO+ABS") for d in sorted((COMMITTED / lb).glob("*__*"))]
    assert len(found) == 18
    files = {r.path: [events.read_event_file(p) for p in events.event_files(r.path)] for r in found}
    assert sum(map(len, files.values())) == 22  # 4 runs were resumed
    for r in found:
        assert all(ef.problem is None and ef.read == ef.size > 0 for ef in files[r.path]), r.path
        assert files[r.path][-1].last_step == r.total_steps and "charts/SPS" in files[r.path][-1].tags, r.path


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """Copies of the committed PPO Hopper runs, seed 2 intact (it was resumed: two event files), and PPO+ABS
    Hopper seeds 1-3, each damaged one way:
    PPO seed 1: its event file cut mid-record at about 30% (TensorBoard reads up to the cut, silently);
    PPO seed 3: one byte of its event file flipped at half its length (a record fails its CRC check);
    PPO+ABS seed 1: its event file cut at a record boundary at half its length (no read error: incomplete);
    PPO+ABS seeds 2 and 3 intact. Returns (root, {name: details}, the report made, the committed report of the
    intact runs, the report's directory)."""
    root = tmp_path_factory.mktemp("damaged")
    for label in ("PPO", "PPO+ABS"):
        for seed in (1, 2, 3):
            shutil.copytree(COMMITTED / label / f"Hopper-v4__{seed}", root / label / f"Hopper-v4__{seed}")
    info = {}
    cut = only_event_file(root / "PPO" / "Hopper-v4__1")
    ends = records(cut)
    end = next(e for e, _, _ in ends if e > 0.3 * cut.stat().st_size)
    size = end + 7  # the next record's header cut after 7 of its 12 bytes
    full_curve = tensorboard_scalars(cut.parent, [runs.RETURN_TAG])[runs.RETURN_TAG]
    with open(cut, "r+b") as f:
        f.truncate(size)
    cut_curve = tensorboard_scalars(cut.parent, [runs.RETURN_TAG])[runs.RETURN_TAG]
    info["cut"] = dict(path=cut, read=end, size=size, step=max(s for e, s, _ in ends if e <= end),
                       full_curve=full_curve, cut_curve=cut_curve)
    flip = only_event_file(root / "PPO" / "Hopper-v4__3")
    raw = bytearray(flip.read_bytes())
    at = len(raw) // 2
    raw[at] ^= 0xFF
    flip.write_bytes(bytes(raw))
    start = max([0] + [e for e, _ in records_of(bytes(raw), at)])
    info["flip"] = dict(path=flip, read=start, size=len(raw))
    short = only_event_file(root / "PPO+ABS" / "Hopper-v4__1")
    ends = records(short)
    end = next(e for e, _, _ in ends if e > 0.5 * short.stat().st_size)
    with open(short, "r+b") as f:
        f.truncate(end)
    info["short"] = dict(path=short, step=max(s for e, s, tags in ends if e <= end and "charts/SPS" in tags))
    out = tmp_path_factory.mktemp("damaged-report")
    assert report.main(["--runs", f"PPO={root / 'PPO'}", f"PPO+ABS={root / 'PPO+ABS'}", "--out", str(out),
                        "--reps", "20"]) == 0
    return root, info, (out / "report.md").read_text(), (COMMITTED.parents[1] / "report.md").read_text(), out


def records_of(data: bytes, limit: int) -> list[tuple[int, int]]:
    """(end offset, 0) of the intact records that end at or before byte `limit` of data."""
    pos, out = 0, []
    while pos + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        if pos + 16 + n > limit:
            break
        out.append((pos + 16 + n, 0))
        pos += 16 + n
    return out


def test_tensorboard_alone_reads_a_cut_event_file_silently_short(damaged):
    """What the report guards against: TensorBoard reads the cut file up to the cut and says nothing, and the curve's
    numbers (here the final training return) come out of a third of the run as if it were all of it."""
    _, info, *_ = damaged
    full, cut = info["cut"]["full_curve"], info["cut"]["cut_curve"]
    assert len(cut[1]) < 0.5 * len(full[1]) and cut[0].max() < 0.5 * full[0].max()
    assert abs(np.mean(cut[1][-100:]) - np.mean(full[1][-100:])) > 500  # Hopper: ~1,000 vs ~2,700


def test_a_cut_or_corrupted_event_file_is_named_and_its_curve_numbers_left_out(damaged):
    root, info, md, intact, *_ = damaged
    assert "Damaged or incomplete event files" not in intact
    data = section(md, "Data")
    lines = data.split("### Damaged or incomplete event files")[1].splitlines()
    cut, flip = info["cut"], info["flip"]
    line = next(ln for ln in lines if f"`{cut['path']}`" in ln)
    assert (f"(PPO Hopper seed 1): damaged: a record cut short (in its header) at byte {cut['read']:,} of "
            f"{cut['size']:,}; TensorBoard stops reading the file there, so its events end at step {cut['step']:,} "
            "(the run's last step 1,001,472)") in line
    line = next(ln for ln in lines if f"`{flip['path']}`" in ln)
    assert "(PPO Hopper seed 3): damaged: a record failing its CRC check" in line
    assert f"at byte {flip['read']:,} of {flip['size']:,}" in line
    # Training-curve numbers: only the intact seed 2 is left for PPO, in every table built from the curves ...
    for title in ("Final training return", "Early / late"):
        text = section(md, title)
        assert ("Left out (event files damaged or incomplete, see \"Damaged or incomplete event files\"): PPO Hopper "
                "seed 1, PPO Hopper seed 3, PPO+ABS Hopper seed 1.") in text
        got, was = ([[c.strip() for c in ln.strip("|").split("|")] for ln in t.splitlines()
                     if ln.startswith("| Hopper | PPO |")] for t in (text, section(intact, title)))
        assert len(got) == len(was) >= 1
        for g, w in zip(got, was):  # per seed "1: x, 2: y, 3: z" -> "2: y", n 3 -> 1
            assert g[2] == w[2].split(", ")[1] and g[2].startswith("2: ") and (g[-1], w[-1]) == ("1", "3"), (g, w)
    # ... and in the figure data: one PPO run in every bin, none past the cut from the cut run
    with open(damaged[4] / "learning_curves.csv") as f:
        ppo = [r for r in csv.DictReader(f) if r["label"] == "PPO"]
    assert ppo and {r["n_runs"] for r in ppo} == {"1"}
    assert "not in the learning curves or the adapt figure (event files damaged or incomplete): PPO Hopper seed 1, " \
        "PPO Hopper seed 3, PPO+ABS Hopper seed 1" in section(md, "Figures")
    # The evaluation return, from eval_results.json, stays for every seed.
    for label in ("PPO", "PPO+ABS"):
        assert row_of(section(md, "Per-game evaluation return"), "Hopper", label) == row_of(
            section(intact, "Per-game evaluation return"), "Hopper", label)


def test_an_event_file_that_ends_early_without_a_read_error_is_incomplete(damaged):
    _, info, md, *_ = damaged
    short = info["short"]
    line = next(ln for ln in section(md, "Data").splitlines() if f"`{short['path']}`" in ln)
    assert (f"(PPO+ABS Hopper seed 1): incomplete: its events end at step {short['step']:,} (charts/SPS), before the "
            "run's last step 1,000,448 by more than one logging interval") in line
    final = section(md, "Final training return")
    assert row_of(final, "Hopper", "PPO+ABS")[2].startswith("2: ") and row_of(final, "Hopper", "PPO+ABS")[-1] == "2"
    burn = section(md, "Early / late").split("### Burn-in")[1]
    assert row_of(burn, "Hopper", "PPO+ABS")[-1] == "2"  # its burn-in left out too


def write_resumed_run(run_dir: Path, first_to: int, resume_at: int = 500, total: int = 1000, damage=b""):
    """A run written in two sessions, as a resumed script writes it: the first event file has steps 100..first_to
    (then `damage` appended to it), the second opens with purge_step resume_at + 1 (TensorBoard drops every earlier
    event from that step on) and logs resume_at..total."""
    from torch.utils.tensorboard import SummaryWriter

    write_run(run_dir, "Hopper-v4", 1, 1000.0, total=total)
    w = SummaryWriter(str(run_dir), purge_step=0)
    for step in range(100, first_to + 1, 100):
        w.add_scalar(runs.RETURN_TAG, step / 10, step)
        w.add_scalar("charts/SPS", 1000, step)
    w.close()
    with open(only_event_file(run_dir), "ab") as f:
        f.write(damage)
    time.sleep(1.1)  # the second file's name (its time stamp) sorts after the first
    w = SummaryWriter(str(run_dir), purge_step=resume_at + 1)
    for step in range(resume_at, total + 1, 100):
        w.add_scalar(runs.RETURN_TAG, step / 10, step)
        w.add_scalar("charts/SPS", 1000, step)
    w.close()


def test_damage_a_resumed_run_replaced_is_noted_and_damage_before_its_resume_leaves_the_curve_out(tmp_path):
    """A hard kill (a node failure) can leave a record cut short at the end of an event file; the run then resumes
    from its checkpoint in a new file that replaces every event from the resume step on. If the damaged file was
    read past that step, nothing is missing: noted, numbers kept. If it was read only up to an earlier step, the
    events between are lost: left out."""
    partial = struct.pack("<Q", 50)[:5]  # a header cut after 5 bytes
    write_resumed_run(tmp_path / "A" / "kept", first_to=800, damage=partial)
    data, _, _ = report.collect({"A": tmp_path / "A"}, None, {})
    run = data["A"]["Hopper"][1]
    first = events.event_files(run.path)[0]
    assert run.event_problems == [] and len(run.event_notes) == 1, run.event_problems
    assert run.event_notes[0].startswith(f"`{first}` (A Hopper seed 1): a record cut short (in its header) at byte ")
    assert "events end at step 800, but the run resumed at step 501 in a later event file" in run.event_notes[0]
    assert run.scalars[runs.RETURN_TAG][0].tolist() == [100, 200, 300, 400, 500, 500, 600, 700, 800, 900, 1000]
    assert report.main(["--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "o1"), "--reps", "20"]) == 0
    md = (tmp_path / "o1" / "report.md").read_text()
    assert "Damaged, but nothing read from them is missing (kept):" in md and "Left out" not in md
    write_resumed_run(tmp_path / "B" / "lost", first_to=300, damage=partial)
    data, _, _ = report.collect({"B": tmp_path / "B"}, None, {})
    run = data["B"]["Hopper"][1]
    assert run.event_notes == [] and run.scalars == {}
    assert len(run.event_problems) == 1 and "damaged: a record cut short (in its header)" in run.event_problems[0]
    assert "events end at step 300 (the run's last step 1,000)" in run.event_problems[0]


def test_an_intact_resumed_run_is_not_flagged(tmp_path):
    write_resumed_run(tmp_path / "A" / "r", first_to=600)
    data, _, _ = report.collect({"A": tmp_path / "A"}, None, {})
    run = data["A"]["Hopper"][1]
    assert run.event_problems == run.event_notes == [] and runs.RETURN_TAG in run.scalars
    steps = run.scalars[runs.RETURN_TAG][0]
    assert list(steps).count(600) == 1  # the first file's event at 600 (after the resume at 500) was purged


def test_the_one_pass_reader_gives_tensorboards_scalars(tmp_path, damaged):
    """events.read_run_events (CRCs in C, one pass) against TensorBoard's EventAccumulator, tag by tag, value by
    value: committed runs (resumed ones included, two event files), runs resumed after damage, a fresh start over a
    killed attempt's events (purge_step 0), and the cut and corrupted copies of the damaged fixture."""
    from torch.utils.tensorboard import SummaryWriter

    resumed = [d for lb in ("PPO", "PPO+ABS") for d in sorted((COMMITTED / lb).glob("*__*"))
               if len(events.event_files(d)) > 1]
    assert len(resumed) == 4
    dirs = [COMMITTED / "PPO" / "HalfCheetah-v4__1", *resumed[:2]]
    partial = struct.pack("<Q", 50)[:5]
    write_resumed_run(tmp_path / "A" / "intact", first_to=600)
    write_resumed_run(tmp_path / "A" / "kept", first_to=800, damage=partial)
    write_resumed_run(tmp_path / "A" / "lost", first_to=300, damage=partial)
    write_resumed_run(tmp_path / "A" / "fresh", first_to=700, total=700)  # then a new start (purge_step 0) over it
    time.sleep(1.1)
    w = SummaryWriter(str(tmp_path / "A" / "fresh"), purge_step=0)
    for step in range(0, 1001, 100):
        w.add_scalar(runs.RETURN_TAG, -step, step)
    w.close()
    dirs += [tmp_path / "A" / n for n in ("intact", "kept", "lost", "fresh")]
    root, info, *_ = damaged
    dirs += [info["cut"]["path"].parent, info["flip"]["path"].parent, info["short"]["path"].parent]
    for d in dirs:
        files, ours = events.read_run_events(d)
        theirs = tensorboard_scalars(d)
        assert theirs and same_scalars(ours, theirs), d
    steps, values = events.read_run_events(tmp_path / "A" / "fresh")[1][runs.RETURN_TAG]
    assert steps.tolist() == list(range(0, 1001, 100)) and values.tolist() == [-s for s in range(0, 1001, 100)]


def empty_event_files(run_dir: Path, how: str) -> None:
    """Leave a run without training events: its event files removed, cut to 0 bytes, or replaced by one that a
    SummaryWriter opened and closed (its file-version record only)."""
    from torch.utils.tensorboard import SummaryWriter

    for path in run_dir.glob("events.out.tfevents.*"):
        if how == "zero bytes":
            path.write_bytes(b"")
        else:
            path.unlink()
    if how == "no summary":
        SummaryWriter(str(run_dir)).close()


@pytest.mark.parametrize("how", ["removed", "zero bytes", "no summary"])
def test_a_run_without_training_events_is_named_and_left_out_of_every_curve_table(tmp_path, how):
    """A run whose event files are missing or hold no training event would drop out of the curves' tables (burn-in
    n 3 -> 2) without a word: it is named as incomplete, as a cut file is, and its evaluation return kept."""
    for seed in (1, 2, 3):
        shutil.copytree(COMMITTED / "PPO+ABS" / f"Hopper-v4__{seed}", tmp_path / "runs" / f"Hopper-v4__{seed}")
    run_dir = tmp_path / "runs" / "Hopper-v4__2"
    empty_event_files(run_dir, how)
    assert report.main(["--runs", f"PPO+ABS={tmp_path / 'runs'}", "--out", str(tmp_path / "o"), "--reps", "20"]) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    damaged = section(md, "Data").split("### Damaged or incomplete event files")[1]
    (line,) = [ln for ln in damaged.splitlines() if "(PPO+ABS Hopper seed 2)" in ln]
    assert line.startswith(f"- `{run_dir}" if how == "removed" else f"- `{run_dir}/events.out.tfevents."), line
    assert line.endswith("incomplete: no TensorBoard event file (events.out.tfevents.*) in the run directory"
                         if how == "removed" else "incomplete: its event files hold no training events (none of "
                         "charts/SPS, losses/*, charts/episodic_return)"), line
    left = ("Left out (event files damaged or incomplete, see \"Damaged or incomplete event files\"): "
            "PPO+ABS Hopper seed 2.")
    burn = section(md, "Early / late").split("### Burn-in")[1]
    assert left in section(md, "Final training return") and left in section(md, "Early / late")
    assert row_of(burn, "Hopper", "PPO+ABS")[-1] == "2"
    assert row_of(section(md, "Per-game evaluation return"), "Hopper", "PPO+ABS")[-1] == "3"


def test_logging_interval_and_iteration_tag():
    assert events.logging_interval([1024, 2048, 4096, 8192]) == 4096  # a rollout that grows
    assert events.logging_interval([500]) == 500 and events.logging_interval([]) == 0
    assert events.iteration_tag({"charts/SPS", "losses/x", runs.RETURN_TAG}) == "charts/SPS"
    assert events.iteration_tag({"losses/b", "losses/a", runs.RETURN_TAG}) == "losses/a"
    assert events.iteration_tag({runs.RETURN_TAG}) == runs.RETURN_TAG and events.iteration_tag(set()) is None
