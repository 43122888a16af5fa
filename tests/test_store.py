"""The result store: atomic writes, validated reads, one writer per folder; and the provenance record."""
import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest

from fp8lab import provenance as P
from fp8lab.store import (LOCK_NAME, DamagedFile, FolderBusy, FolderLock, atomic_write_json, atomic_write_text, read_json,
                          read_rows, write_rows)


def test_rows_round_trip_header_and_no_temp_left(tmp_path):
    p = write_rows([{"a": 1, "b": 2.5}, {"a": 3, "b": -1}], tmp_path / "sub" / "x.csv")
    assert read_rows(p) == [{"a": "1", "b": "2.5"}, {"a": "3", "b": "-1"}]
    assert sorted(os.listdir(p.parent)) == ["x.csv"]                      # no temp file left behind
    write_rows([{"a": 1, "z": 9}], p, fieldnames=["a"])                    # extra keys ignored, given header kept
    assert p.read_text().splitlines() == ["a", "1"]


def test_rows_missing_and_empty(tmp_path):
    assert read_rows(tmp_path / "none.csv") == []
    with pytest.raises(ValueError, match="no rows"):
        write_rows([], tmp_path / "e.csv")
    assert read_rows(write_rows([], tmp_path / "e.csv", fieldnames=["a"])) == []


@pytest.mark.parametrize("text, why", [
    ("a,b\n1,2\n3", "incomplete"),          # cut mid-row by a crash: no final newline
    ("a,b\n1,2\n3,4,5\n", "3 fields"),      # a garbage line
    ("", "no header"),                      # truncated to nothing
])
def test_damaged_csv_is_refused(tmp_path, text, why):
    p = tmp_path / "r.csv"
    p.write_text(text)
    with pytest.raises(DamagedFile, match=why):
        read_rows(p)


def test_csv_header_checked_when_given(tmp_path):
    p = write_rows([{"a": 1}], tmp_path / "r.csv")
    with pytest.raises(DamagedFile, match="header"):
        read_rows(p, fieldnames=["a", "b"])


def test_json_atomic_and_validated(tmp_path):
    p = atomic_write_json(tmp_path / "x.json", {"a": 1})
    assert read_json(p, required=("a",)) == {"a": 1}
    with pytest.raises(DamagedFile, match="missing"):
        read_json(p, required=("b",))
    p.write_text('{"a": ')                                                 # truncated
    with pytest.raises(DamagedFile, match="not valid JSON"):
        read_json(p)
    p.write_text("[1, 2]")
    with pytest.raises(DamagedFile, match="JSON object"):
        read_json(p)
    with pytest.raises(ValueError):                                        # NaN is not JSON: refused, file untouched
        atomic_write_json(p, {"x": float("nan")})
    assert p.read_text() == "[1, 2]"


def test_atomic_write_refuses_a_directory(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path / "d", "x")


def test_unwritable_paths_give_one_line_errors(tmp_path):
    """A folder under a regular file cannot be made (even by root): the writer and the lock say so in one line,
    as the error classes the commands already report (OutputError is an OSError, FolderUnusable a FolderBusy)."""
    from fp8lab.store import FolderUnusable, OutputError

    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=r"^cannot write .*f/sub/a\.json: ") as e:
        atomic_write_text(tmp_path / "f" / "sub" / "a.json", "{}")
    assert "\n" not in str(e.value) and isinstance(e.value, OSError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]           # nothing left behind
    with pytest.raises(FolderUnusable, match=r"^cannot write to .*choose another --out$"):
        with FolderLock(tmp_path / "f" / "run"):
            pass
    assert issubclass(FolderUnusable, FolderBusy)


def test_commands_report_an_unwritable_out_in_one_line(tmp_path, capsys):
    from fp8lab import accumulation, sweep

    (tmp_path / "f").write_text("x")
    assert accumulation.main(["--out", str(tmp_path / "f" / "a.json"), "--ks", "128", "--mn", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and err.count("\n") == 1
    assert sweep.main(["--out", str(tmp_path / "f" / "run"), "--yes"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "f/run" in err[-1]


def _hold(folder, ready, release):
    with FolderLock(folder, command="holder-cmd"):
        ready.set()
        release.wait(20)


@contextlib.contextmanager
def _held(folder, release_after: float | None = None):
    """A forked process holds `folder`'s lock (command "holder-cmd") until the block ends, or `release_after`
    seconds into it; yields the fork context."""
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(folder, ready, release))
    p.start()
    try:
        assert ready.wait(20)
        if release_after is not None:
            ctx.Process(target=lambda: (time.sleep(release_after), release.set())).start()
        yield ctx
    finally:
        release.set()
        p.join(20)


def test_folder_lock_refuses_a_second_writer_and_names_the_holder(tmp_path):
    with _held(tmp_path):
        with pytest.raises(FolderBusy, match="holder-cmd"):
            with FolderLock(tmp_path, command="second"):
                pass
    with FolderLock(tmp_path, command="third"):                            # free again once the holder is gone
        pass


def test_folder_lock_released_when_the_holder_is_killed(tmp_path):
    code = ("import sys, time; from fp8lab.store import FolderLock\n"
            f"l = FolderLock({str(tmp_path)!r}, 'victim').__enter__(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusy):
            with FolderLock(tmp_path):
                pass
    finally:
        proc.kill()
        proc.wait()
    with FolderLock(tmp_path, wait=5):                                     # no stale lock after SIGKILL
        pass


def test_folder_lock_waits_when_asked(tmp_path):
    with _held(tmp_path, release_after=0.5):
        t0 = time.monotonic()
        with FolderLock(tmp_path, wait=15):
            assert time.monotonic() - t0 >= 0.4


# ---- provenance -------------------------------------------------------------------------------------
def test_provenance_has_commit_state_device_date_command():
    rec = P.provenance("python -m fp8lab.x --y")
    assert rec["command"] == "python -m fp8lab.x --y"
    assert rec["dirty"] in (True, False, None)
    assert rec["device"] and rec["date"][:2] == "20"
    assert rec["packages"]["python"]
    json.dumps(rec)                                                        # storable as it is


def test_env_commit_wins_and_dirty_mark_survives(monkeypatch):
    monkeypatch.setenv("FP8LAB_GIT_COMMIT", "a" * 40 + "+dirty")
    rec = P.provenance("x")
    assert rec["git_commit"] == "a" * 40 and rec["dirty"] is True and not P.is_clean(rec)
    monkeypatch.setenv("FP8LAB_GIT_COMMIT", "b" * 40)
    assert P.is_clean(P.provenance("x"))


def test_git_state_of_a_scratch_repo(tmp_path):
    run = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)
    run("init", "-q")
    run("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x")
    clean = P.git_state(tmp_path)
    assert clean["dirty"] is False and len(clean["git_commit"]) == 40 and clean["diff_sha256"] is None
    (tmp_path / "new.txt").write_text("1")                                 # an untracked file makes the tree dirty
    d1 = P.git_state(tmp_path)
    (tmp_path / "new.txt").write_text("2")
    d2 = P.git_state(tmp_path)
    assert d1["dirty"] and d2["dirty"] and d1["diff_sha256"] != d2["diff_sha256"]


@pytest.mark.parametrize("prov, want", [
    ({"git_commit": "c" * 40, "dirty": False, "device": "NVIDIA H200", "date": "2026-12-01T00:00", "command": "x"},
     "(clean)"),
    ({"git_commit": "c" * 40 + "+dirty", "device": "cpu", "date": "2026-12-01", "command": "x"}, "DIRTY"),
    ({"git": {"commit": "c" * 40, "dirty": True}, "date": "2026", "command": "x"}, "DIRTY"),  # the sweep's old schema
    # a merged file (harness.merge_runs): the last run clean, an earlier one dirty -> DIRTY, and every commit named
    ({"git_commit": "b" * 40, "dirty": False, "merged_from": [{"git_commit": "a" * 40, "dirty": True},
                                                             {"git_commit": "b" * 40, "dirty": False}]},
     "commits aaaaaaaaaaaa + bbbbbbbbbbbb (runs merged, DIRTY tree)"),
])
def test_describe_never_hides_a_dirty_tree(prov, want):
    assert want in P.describe(prov)


def test_describe_names_every_merged_run_command():
    runs = [{"git_commit": "a" * 40, "dirty": False, "command": "bench gemm --only decode"},
            {"git_commit": "a" * 40, "dirty": False, "command": "bench gemm --only prefill"}]
    text = P.describe({"git_commit": "a" * 40, "dirty": False, "command": "bench gemm --only prefill", "merged_from": runs})
    assert text.endswith("bench gemm --only decode + bench gemm --only prefill") and "runs merged, clean" in text
    assert P.describe({**runs[0], "merged_from": runs[:1]}).endswith("bench gemm --only decode")


def test_provenance_takes_the_state_captured_when_the_run_started(tmp_path):
    """A run that writes provenance last passes the git state it saw at its start: its own output files must not
    turn a clean commit into a DIRTY record."""
    from fp8lab.provenance import describe, provenance

    start = {"git_commit": "a" * 40, "dirty": False, "diff_sha256": None, "commit_source": "git"}
    rec = provenance("python -m fp8lab.x", git=start, wall_seconds=1.0)
    assert rec["git_commit"] == "a" * 40 and rec["dirty"] is False and rec["wall_seconds"] == 1.0
    assert "clean" in describe(rec)


def test_flat_reads_both_provenance_schemas():
    nested = {"git_commit": "abc1234", "device": "NVIDIA H100", "packages": {"torch": "2.11.0", "cupy-cuda13x": "14.2.0"},
              "machine": {"cuda": "13.0", "sms": 132}}
    f = P.flat(nested)
    assert (f["torch"], f["cupy"], f["cuda"], f["sms"], f["device"]) == ("2.11.0", "14.2.0", "13.0", 132, "NVIDIA H100")
    old = {"git_commit": "abc1234", "torch": "2.4.0", "cupy": "13.3.0", "cuda": "12.4"}
    assert P.flat(old) == old
    assert P.flat({"packages": {"cupy-cuda13x": None}})["cupy"] is None  # not installed: no version made up
    assert P.flat({"device": "top", "machine": {"device": "inner"}})["device"] == "top"


def test_lock_removes_a_folder_it_made_when_nothing_was_written(tmp_path):
    with pytest.raises(RuntimeError):
        with FolderLock(tmp_path / "a" / "b") as lock:
            assert lock.created and (tmp_path / "a" / "b" / LOCK_NAME).is_file()
            raise RuntimeError("failed at setup")
    assert list(tmp_path.iterdir()) == []


def test_lock_keeps_a_folder_with_results_and_a_folder_it_did_not_make(tmp_path):
    with FolderLock(tmp_path / "w") as lock:
        atomic_write_text(tmp_path / "w" / "x.txt", "1")
    assert lock.created and sorted(p.name for p in (tmp_path / "w").iterdir()) == [LOCK_NAME, "x.txt"]
    (tmp_path / "e").mkdir()
    with FolderLock(tmp_path / "e") as lock:
        pass
    assert not lock.created and [p.name for p in (tmp_path / "e").iterdir()] == [LOCK_NAME]


def test_a_waiter_gets_the_lock_after_the_holder_removed_its_empty_folder(tmp_path):
    """The holder removes the lock file it made; a writer that waited on it must lock the file on disk, so a
    third writer is still refused."""
    folder = tmp_path / "new"
    with _held(folder, release_after=0.5):
        with FolderLock(folder, command="waiter", wait=15):
            assert (folder / LOCK_NAME).is_file()
            with pytest.raises(FolderBusy, match="waiter"):
                with FolderLock(folder, command="third"):
                    pass
