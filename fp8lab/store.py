"""The result store: every file the lab writes under `outputs/` (or a user's run folder) goes through here.

    atomic_write_json("outputs/x.json", {"a": 1})      # temp file in the same folder, fsync, rename
    write_rows([{"recipe": "e4m3-w", "delta_pct": 1.07}], "outputs/x.csv")
    read_rows("outputs/x.csv") -> [{"recipe": "e4m3-w", "delta_pct": "1.07"}]   # strings, as csv gives them
    with FolderLock("runs/mine", "python -m fp8lab.sweep …"): …               # one writer per folder

Three promises, because a results folder is something a rerun trusts:
  * **nothing half-written**: a writer never opens the final path; it writes `.<name>.<pid>.tmp` beside it,
    flushes and fsyncs, then renames (atomic on POSIX). Killed at any moment, the folder holds the old file
    or the new one, never a torn one.
  * **nothing trusted blindly**: readers check what they read (a CSV's header and every row's width, a JSON
    document's required keys) and raise `DamagedFile`; callers recompute the damaged cell with a one-line
    warning instead of taking garbage as done.
  * **one writer at a time**: `FolderLock` takes an exclusive `flock` on `<folder>/.fp8lab.lock`, which the
    kernel releases when the holder dies, so a killed run never leaves a stale lock. A second writer is
    refused at once with a message naming the holder (pid, host, command, since when); pass `wait=seconds`
    to wait instead.
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import platform
from pathlib import Path

LOCK_NAME = ".fp8lab.lock"
#: the committed reference results: written only on purpose (`--record`), never by a user's default run
REFERENCE = Path(__file__).resolve().parents[1] / "outputs"


class DamagedFile(ValueError):
    """A results file exists but cannot be trusted (truncated, wrong header, bad JSON, missing keys)."""


class FolderBusy(RuntimeError):
    """Another process holds the folder's lock."""


class FolderUnusable(FolderBusy):
    """The output folder cannot be created or written (permissions, a read-only or virtual file system). A kind of
    FolderBusy so that every command that reports a busy folder in one line reports this one the same way."""


class OutputError(OSError):
    """A file could not be written (a folder that cannot be created, no permission, a full or read-only disk); the
    message is one line naming the path, for a command to print as its error."""


class FolderNotFile(OutputError, IsADirectoryError):
    """The path to write is an existing folder: an OutputError like any other (and an IsADirectoryError)."""


def check_file_target(path) -> Path:
    """`path` if a file can be written there as far as can be told without writing; `OutputError` (one line) when
    it is a folder or a parent of it is a regular file. For a command to refuse a bad --out before any work."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise FolderNotFile(f"cannot write {path}: {path} is a folder, not a file")
    for up in path.parents:
        if up.exists() and not up.is_dir():
            raise OutputError(f"cannot write {path}: {up} is a file, not a folder")
    return path


# ---- atomic writes ------------------------------------------------------------------------------------
def atomic_write_bytes(path, data: bytes) -> Path:
    """Write `data` to `path` atomically (creating parent folders). Returns the path; `OutputError` (one line, nothing
    left behind) when it cannot be written."""
    path = check_file_target(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on a directory
        pass
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj, indent: int | None = 1) -> Path:
    """JSON with a trailing newline; floats that JSON cannot hold (NaN, Inf) are refused, not written."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False, default=_json_default) + "\n")


def _json_default(o):
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot store {type(o).__name__} as JSON")


def save_figure(fig, path, **kw) -> Path:
    """`fig.savefig` through the atomic writer (the format comes from the path's suffix)."""
    path = Path(path)
    buf = io.BytesIO()
    kw.setdefault("dpi", 110)
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", **kw)
    return atomic_write_bytes(path, buf.getvalue())


# ---- validated reads ----------------------------------------------------------------------------------
def read_json(path, required: tuple[str, ...] = ()) -> dict:
    """Read a JSON object; `DamagedFile` if it does not parse, is not an object, or lacks a required key."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DamagedFile(f"{path}: not valid JSON ({e.__class__.__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise DamagedFile(f"{path}: expected a JSON object, found {type(obj).__name__}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise DamagedFile(f"{path}: missing key(s) {missing}")
    return obj


# ---- CSV rows -----------------------------------------------------------------------------------------
def write_rows(rows: list[dict], path, fieldnames: list[str] | None = None) -> Path:
    """Write dict rows with a header (the first row's keys unless `fieldnames` is given; extra keys ignored)."""
    path = Path(path)
    if not rows and fieldnames is None:
        raise ValueError(f"no rows to write to {path} and no fieldnames for the header")
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(fieldnames or rows[0]), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def read_rows(path, fieldnames: list[str] | None = None) -> list[dict]:
    """All rows of a CSV file as dicts of strings; [] when the file does not exist.

    `DamagedFile` when the header differs from `fieldnames` (if given), a row has the wrong number of
    fields, or the file does not end with a newline (a write cut short by a crash or a full disk)."""
    p = Path(path)
    if not p.is_file():
        return []
    text = p.read_text(encoding="utf-8", errors="strict")
    if text and not text.endswith("\n"):
        raise DamagedFile(f"{p}: the last row is incomplete (no final newline)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise DamagedFile(f"{p}: empty file, no header") from None
    if fieldnames is not None and header != list(fieldnames):
        raise DamagedFile(f"{p}: header {header} is not the expected {list(fieldnames)}")
    out = []
    for i, row in enumerate(reader, start=2):
        if len(row) != len(header):
            raise DamagedFile(f"{p}: line {i} has {len(row)} fields, the header has {len(header)}")
        out.append(dict(zip(header, row)))
    return out


# ---- where a run may write ----------------------------------------------------------------------------
def is_reference(path) -> bool:
    """True for the committed `outputs/` folder or anything inside it."""
    p, ref = Path(path).resolve(), REFERENCE.resolve()
    return p == ref or ref in p.parents


def out_folder(arg: str | None, default, record: bool = False, record_default=None) -> Path:
    """Check an output folder argument; `ValueError` with a one-line reason when it cannot be used.

    out_folder(None, "runs/default") -> runs/default        # a user's run: git-ignored
    out_folder(None, "runs/default", record=True, record_default=REFERENCE) -> outputs/
    out_folder("outputs", "runs/default")                   -> ValueError: re-recording needs --record
    """
    if arg is not None and not str(arg).strip():
        raise ValueError("--out is empty: name a folder (or leave it out for the default)")
    if arg is None:
        p = Path(record_default if record and record_default is not None else default)
    else:
        p = Path(arg).expanduser()
    if p.exists() and not p.is_dir():
        raise ValueError(f"--out {p} exists and is not a folder")
    for up in p.resolve().parents:
        if up.exists() and not up.is_dir():
            raise ValueError(f"--out {p}: {up} is a file, not a folder")
    if is_reference(p) and not record:
        raise ValueError(f"{p} holds the lab's committed reference results; write there only on purpose "
                         f"with --record (or choose another --out, e.g. the default {default})")
    return p


# ---- one writer per folder ----------------------------------------------------------------------------
class FolderLock:
    """Exclusive lock on a results folder for the lifetime of a `with` block.

    `wait=0` (default) refuses at once with `FolderBusy` naming the holder; `wait=s` retries for s seconds.
    The lock is an `flock` on `<folder>/.fp8lab.lock`: released by the kernel if the holder dies. A folder the
    lock created is removed again on exit when it holds nothing but the lock file (a run that failed before
    writing anything leaves nothing behind); `created` says whether this lock made it."""

    def __init__(self, folder, command: str = "", wait: float = 0.0):
        self.folder = Path(folder)
        self.command = command
        self.wait = wait
        self.created = False
        self._made: list[Path] = []
        self._fh = None

    def _holder(self) -> str:
        try:
            info = json.loads((self.folder / LOCK_NAME).read_text() or "{}")
            return (f"pid {info.get('pid')} on {info.get('host')} since {info.get('since')}: "
                    f"{info.get('command') or '(no command recorded)'}")
        except (OSError, ValueError):
            return "another process (its details could not be read)"

    def _open(self):
        """The lock file, opened (creating the folder and the file when missing)."""
        missing = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
        for attempt in range(3):  # a holder leaving may remove the empty folder between mkdir and open
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                fh = open(self.folder / LOCK_NAME, "a+")
                break
            except FileNotFoundError as e:
                if attempt == 2:
                    raise FolderUnusable(f"cannot write to {self.folder}: {e.strerror or e}; "
                                         "choose another --out") from None
            except OSError as e:
                raise FolderUnusable(f"cannot write to {self.folder}: {e.strerror or e}; "
                                     "choose another --out") from None
        made = [p for p in missing if p.is_dir()]
        self._made = made if made else self._made
        return fh

    def __enter__(self):
        import fcntl
        import time

        deadline = time.monotonic() + self.wait
        fh = self._open()
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = self._holder()
                    fh.close()
                    raise FolderBusy(f"{self.folder} is being written by {holder}; wait for it to finish "
                                     f"or choose another --out") from None
                time.sleep(0.2)
                continue
            try:  # the holder before us may have removed the file (and its folder): lock the one on disk
                same = os.path.samestat(os.fstat(fh.fileno()), os.stat(self.folder / LOCK_NAME))
            except OSError:
                same = False
            if same:
                break
            fh.close()
            fh = self._open()
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "host": platform.node(), "command": self.command,
                             "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}))
        fh.flush()
        self._fh = fh
        self.created = bool(self._made)
        return self

    def __exit__(self, *exc):
        import fcntl

        if self._fh is not None:
            self._fh.seek(0)
            self._fh.truncate()
            empty = False
            if self.created:
                try:
                    empty = [p.name for p in self.folder.iterdir()] == [LOCK_NAME]
                except OSError:
                    pass
                if empty:
                    (self.folder / LOCK_NAME).unlink(missing_ok=True)   # still locked: nobody holds it after us
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
            if empty:
                for p in self._made:                                   # the folder, then parents it made
                    try:
                        p.rmdir()
                    except OSError:                                     # someone else's file arrived: keep it
                        break
        return False
