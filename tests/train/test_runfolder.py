"""A run folder's lock, a finished run's files checked against each other, and an event log checked before a resume."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scalerepro.errors import UserError
from scalerepro.train.events import EventLog, read_events
from scalerepro.train.runfolder import finished_run, holder, locked

HOLD = (
    "import sys, time; from pathlib import Path; from scalerepro.train.runfolder import locked\n"
    "with locked(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)\n"
)


def test_a_second_holder_of_a_run_folder_is_refused_naming_the_first(tmp_path):
    assert holder(tmp_path) is None
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "held"
        assert holder(tmp_path).startswith(f"pid {first.pid} on {socket.gethostname()} since ")
        with pytest.raises(UserError, match=rf"in use by another trainer \(pid {first.pid} on "), locked(tmp_path):
            pass
    finally:
        first.kill()
        first.wait()
    assert holder(tmp_path) is None  # the kernel dropped the lock with its process: nothing stale
    with locked(tmp_path):
        assert (tmp_path / "train.lock").read_text().startswith(f"pid {os.getpid()} ")


def event(key: str, value=None, **metadata) -> dict:
    """One event as the log holds it."""
    return {"key": key, "value": value, "metadata": metadata, "time_ms": 0, "event_type": "POINT_IN_TIME"}


def finished_folder(folder: Path, epochs: int = 3, status: str = "success", drop: int = 0) -> Path:
    """run.json and events.jsonl of a finished run of ``epochs`` epochs, its last ``drop`` events cut off."""
    folder.mkdir()
    events = [event("run_start")]
    for e in range(epochs):
        events += [event("step", e, epoch_num=e), event("epoch_stop", e, epoch_num=e)]
        events.append(event("eval_accuracy", 0.125 * (e + 1), epoch_num=e, top5=0.9))
    events.append(event("run_stop", status=status))
    events = events[: len(events) - drop]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    final = {"epoch": epochs - 1, "top1": 0.125 * epochs, "top5": 0.9}
    record = {"status": status, "final": final, "config": {"train": {"epochs": epochs}}}
    (folder / "run.json").write_text(json.dumps(record))
    return folder


def test_a_finished_runs_agreeing_files_are_read(tmp_path):
    record, events = finished_run(finished_folder(tmp_path / "r"))
    assert record["status"] == "success"
    assert events[-1]["key"] == "run_stop"
    assert finished_run(tmp_path) is None  # no run.json, no events.jsonl: not finished, no error


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("cut", "the log ends without run_stop, after epoch 1"),
        ("status", "the log's run_stop says 'aborted', run.json says 'success'"),
        ("epochs", "the log holds 3 of the 80 epochs run.json says ran"),
        ("final", "its last evaluation is {'epoch': 2, 'top1': 0.375}, run.json's final one"),
        ("start", "the log has no run_start"),
    ],
)
def test_a_finished_runs_files_that_disagree_are_refused_naming_both(tmp_path, damage, named):
    run = finished_folder(tmp_path / "r", drop=3 if damage == "cut" else 0)
    record = json.loads((run / "run.json").read_text())
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    if damage == "status":
        record["status"] = "success"
        lines[-1] = lines[-1].replace('"success"', '"aborted"')
    elif damage == "epochs":
        record["config"]["train"]["epochs"] = 80
    elif damage == "final":
        record["final"]["top1"] = 0.5
    elif damage == "start":
        lines = lines[1:]
    (run / "run.json").write_text(json.dumps(record))
    (run / "events.jsonl").write_text("".join(lines))
    with pytest.raises(UserError) as err:
        finished_run(run)
    assert named in str(err.value)
    assert f"{run / 'events.jsonl'} does not match {run / 'run.json'}" in str(err.value)
    assert f"delete {run} and rerun its job" in str(err.value)


def test_a_diverged_run_may_hold_fewer_epochs_than_planned(tmp_path):
    run = finished_folder(tmp_path / "r", epochs=2, status="diverged")
    record = json.loads((run / "run.json").read_text())
    record["config"]["train"]["epochs"] = 80
    (run / "run.json").write_text(json.dumps(record))
    assert finished_run(run)[0]["status"] == "diverged"


def partial_log(folder: Path, steps: int, start: bool = True) -> EventLog:
    """A run's partial log holding ``steps`` steps; the EventLog that would resume it."""
    log = EventLog(folder / "events.jsonl", enabled=True)
    if start:
        log.start("run_start")
    for s in range(steps):
        log.emit("step", s, epoch_num=0)
    log.close()
    return EventLog(folder / "events.jsonl", enabled=True, resume=True)


def test_a_log_that_covers_the_checkpoint_is_continued(tmp_path):
    log = partial_log(tmp_path, steps=7)
    before = (tmp_path / "events.jsonl.partial").read_bytes()
    assert log.resume(7) is None  # a checkpoint before step 7: steps 0..6 logged
    log.emit("run_resume")
    log.close()
    assert (tmp_path / "events.jsonl.partial").read_bytes().startswith(before)


@pytest.mark.parametrize(
    ("steps", "start", "named"),
    [
        (None, True, "is at step 7 but its event log is missing (no events.jsonl.partial, events.jsonl or"),
        (4, True, "events.jsonl.partial ends at step 3"),
        (7, False, "events.jsonl.partial has no run_start"),
    ],
)
def test_a_log_behind_its_checkpoint_is_refused_and_left_as_it_is(tmp_path, steps, start, named):
    log = partial_log(tmp_path, steps or 0, start)
    if steps is None:
        log.partial.unlink()
    before = log.partial.read_bytes() if log.partial.exists() else None
    problem = log.resume(7)
    assert problem is not None
    assert named in problem
    assert f"Put the log back to resume, or delete {tmp_path} to train the run again" in problem
    log.emit("run_resume")  # not reopened: dropped
    assert (log.partial.read_bytes() if log.partial.exists() else None) == before


def test_an_event_log_on_a_full_disk_is_one_error_naming_the_file(tmp_path):
    (tmp_path / "events.jsonl.partial").symlink_to("/dev/full")  # every write: ENOSPC
    log = EventLog(tmp_path / "events.jsonl", enabled=True)
    with pytest.raises(UserError) as err:
        log.emit("run_start")
    assert str(err.value).startswith(f"could not write the event log {tmp_path / 'events.jsonl.partial'}: ")
    assert "free space in its folder (or raise the quota) and rerun" in str(err.value)
    log.emit("run_stop")  # closed: later events are dropped, not a second error


def test_progress_a_segment_logged_after_its_checkpoint_is_dropped_when_resumed(tmp_path):
    """Checkpoint before step 3, then steps 3 and 4 and a crash: the resumed run trains steps 3 and 4 again, so
    the log keeps them once."""
    log = EventLog(tmp_path / "events.jsonl", enabled=True)
    log.start("run_start")
    for s in range(3):
        log.emit("step", s, epoch_num=0)
    log.emit("checkpoint", 3, epoch_num=0, batch=3)
    log.emit("step", 3, epoch_num=0)
    log.emit("step", 4, epoch_num=0)
    log.end("run_stop", status="aborted", error="killed")
    log.close()
    again = EventLog(tmp_path / "events.jsonl", enabled=True, resume=True)
    assert again.resume(3) is None
    again.close()
    kept = [(e["key"], e["value"]) for e in read_events(tmp_path / "events.jsonl.partial")]
    assert kept == [
        ("run_start", None),
        ("step", 0),
        ("step", 1),
        ("step", 2),
        ("checkpoint", 3),
        ("run_interrupted", None),
    ]


def test_a_finished_log_outlives_snakemake_deleting_it_and_the_rerun_continues_it(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", enabled=True)
    log.start("run_start")
    log.emit("step", 0, epoch_num=0)
    log.emit("checkpoint", 1, epoch_num=1, batch=0)
    log.end("run_stop", status="success")
    log.finish()
    assert (tmp_path / "events.jsonl").stat().st_ino == (tmp_path / "events.jsonl.kept").stat().st_ino
    assert not (tmp_path / "events.jsonl.partial").exists()
    (tmp_path / "events.jsonl").unlink()  # what Snakemake does to an incomplete job's outputs before rerunning it
    again = EventLog(tmp_path / "events.jsonl", enabled=True, resume=True)
    assert again.resume(1) is None
    again.emit("run_resume")
    again.end("run_stop", status="success")
    again.finish()
    keys = [e["key"] for e in read_events(tmp_path / "events.jsonl")]
    assert keys == ["run_start", "step", "checkpoint", "run_interrupted", "run_resume", "run_stop"]


def test_a_filesystem_without_locks_trains_unguarded_with_a_warning(tmp_path, monkeypatch, capsys):
    import errno
    import fcntl

    def no_locks(*_args):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "lockf", no_locks)
    with locked(tmp_path):
        pass
    assert f"the filesystem of {tmp_path} takes no lock (No locks available)" in capsys.readouterr().err
    assert holder(tmp_path) is None


def test_a_second_ctrl_c_interrupts_at_once():
    import signal

    from scalerepro.train.runfolder import StopSignals

    signals = StopSignals()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        signals.restore()
