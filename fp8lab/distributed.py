"""Independent cells in parallel: a Dask cluster (local by default) and one result file per cell.

The sensitivity map and the bytes-quality frontier are hundreds of cells of the same shape: *score this model,
fake-quantized by this recipe, on these token windows*. No cell needs another, so they spread over processes,
GPUs or machines with no change to what each computes.

    cells = [Cell("baseline", "smollm2-135m", {"name": "baseline"}, data),
             Cell("layer3-nvfp4", "smollm2-135m", {"weights": [[r"\\.layers\\.3\\.", "nvfp4"]]}, data)]
    payloads = run_cells(cells, "runs/sens")                   # local cluster, 2 worker processes
    payloads = run_cells(cells, "runs/sens", scheduler="tcp://10.0.0.5:8786")   # a cluster you started
    payloads = run_cells(cells, "runs/sens", workers=0)        # no Dask: one process, in order
    paired_ppl_delta(payloads["layer3-nvfp4"], payloads["baseline"])  -> (delta %, ci low, ci high, n)

Why Dask and not Ray: `dask[distributed]` is pure Python on top of packages the lab already has (it installed
in ~6 s here, ~10 MB), runs offline with a local cluster, and the same code talks to a remote scheduler. Ray's
wheel alone is ~80 MB.

The store (why no row is ever lost): every cell owns one file, `<out>/cells/<key>.json`, written through
`fp8lab.store.atomic_write_json` (temp file + fsync + rename) by the worker that computed it. Two workers never
write the same file, and a reader sees a whole file or none. The driver holds `FolderLock(<out>)` for the run
(one driver per folder) and is the only process that writes `<out>/results.csv`, from the cell files. A worker
on another machine whose files land on its own disk returns the payload as well; the driver writes any file it
does not find. A rerun computes only the cells whose files are missing or damaged (`DamagedFile`: recomputed).

Several machines: start `dask scheduler` on one (port 8786), `dask worker tcp://<host>:8786 --nworkers 1
--nthreads 1` on each (one per GPU: `--nworkers <n_gpus>`; every worker machine needs the lab installed with its
model and data packages), then pass `--scheduler tcp://<host>:8786`. Give the driver's `--out` a shared folder
if you want the workers to write the cell files themselves; otherwise the driver writes them.

Device: `device="auto"` gives the i-th worker of a host the GPU `cuda:(i mod n_gpus)` when CUDA is there (one worker per GPU:
`workers=n_gpus`), else the CPU. On a CPU, each worker runs torch with `threads` threads (default 1): two
workers x one thread use the lab's 2 cores better than one process with two threads for a 135M model.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fp8lab.store import DamagedFile, FolderLock, atomic_write_json, read_json

__all__ = ["Cell", "CellStore", "run_cells", "ppl_cell", "paired_ppl_delta", "tiny_causal_lm", "DistributedError",
           "pick_device", "check_scheduler", "max_per_host"]


class DistributedError(RuntimeError):
    """The cluster cannot be reached / started, or Dask is not installed; the message says what to do."""


@dataclass(frozen=True)
class Cell:
    """One unit of work: `model` scored under `recipe` on the windows `data` describes.

    key     a readable unique name ("layer03-nvfp4"); the file name of its result
    model   an offline model name or folder (fp8lab.models.load_model), or "tiny-llama" (tests, cluster checks)
    recipe  {"name": "<a fp8lab.recipes name>"} or a parts assignment (fp8lab.parts.build_recipe):
            {"weights": [[regex, weight format], ...], "lm_head": fmt, "kv": kv format, "kv_layers": [..]}
    data    {"corpus": "boolq", "seq_len": 512, "n_windows": 64, "seed": 0}; corpus "random" for tiny-llama
    """

    key: str
    model: str
    recipe: dict
    data: dict
    meta: dict = field(default_factory=dict, compare=False)    # carried into the rows, not into the hash

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9._+-]{1,120}", self.key):
            raise ValueError(f"cell key {self.key!r}: use letters, digits and . _ + - only (it names a file)")

    @property
    def fingerprint(self) -> str:
        """What the result depends on: model, recipe and data (not the key or meta)."""
        blob = json.dumps({"model": self.model, "recipe": self.recipe, "data": self.data}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---- the store: one atomic file per cell ----------------------------------------------------------------
class CellStore:
    """`<folder>/cells/<key>.json` = {"cell": ..., "fingerprint": ..., "result": ...}, written atomically."""

    REQUIRED = ("cell", "fingerprint", "result")

    def __init__(self, folder):
        self.folder = Path(folder)
        self.dir = self.folder / "cells"

    def path(self, cell: Cell) -> Path:
        return self.dir / f"{cell.key}.json"

    def get(self, cell: Cell) -> dict | None:
        """The stored result of `cell`, or None if absent, damaged, or computed for another fingerprint."""
        p = self.path(cell)
        if not p.is_file():
            return None
        try:
            d = read_json(p, required=self.REQUIRED)
        except DamagedFile as e:
            print(f"[fp8lab.distributed] {e}: recomputing this cell", file=sys.stderr)
            return None
        return d["result"] if d["fingerprint"] == cell.fingerprint else None

    def put(self, cell: Cell, result: dict) -> Path:
        return atomic_write_json(self.path(cell), {"cell": asdict(cell), "fingerprint": cell.fingerprint,
                                                   "result": result}, indent=None)


# ---- what a worker computes -------------------------------------------------------------------------------
_CACHE: dict = {}          # per process: loaded models and token windows, so a worker loads each once


def tiny_causal_lm(seed: int = 0):
    """A 2-layer random Llama (vocab 256, hidden 128): for tests and for checking a cluster end to end."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


def pick_device(device: str = "auto") -> str:
    """"auto": this worker's GPU (the host's i-th worker -> cuda:(i mod n)) when CUDA is available, else "cpu"."""
    import torch
    if device != "auto":
        from fp8lab.evaluate import check_device
        try:
            return check_device(device)
        except ValueError as e:       # on a worker too: one line back to the driver, not a torch stack
            raise DistributedError(str(e)) from None
    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{(_LOCAL_RANK['rank'] or 0) % torch.cuda.device_count()}"


def _model(ref: str, device: str):
    if ("model", ref, device) not in _CACHE:
        for k in [k for k in _CACHE if k[0] == "model"]:        # one model per worker at a time (memory)
            del _CACHE[k]
        if ref == "tiny-llama":
            m, tok, sha = tiny_causal_lm(), None, "tiny-llama-seed0"
        else:
            from fp8lab.models import load_model
            lm = load_model(ref, verbose=False)
            m, tok, sha = lm.model, lm.tokenizer, lm.file_sha256
        _CACHE[("model", ref, device)] = (m.to(device), tok, sha)
    return _CACHE[("model", ref, device)]


def _windows(ref: str, tok, data: dict):
    key = ("windows", ref, json.dumps(data, sort_keys=True))
    if key not in _CACHE:
        import torch
        n, L, seed = int(data["n_windows"]), int(data["seq_len"]), int(data.get("seed", 0))
        if data["corpus"] == "random":
            g = torch.Generator().manual_seed(seed)
            win = torch.randint(0, int(data.get("vocab", 256)), (n, L), generator=g)
            nbytes = torch.full((n,), L - 1)
        else:
            from fp8lab import data as D
            text = D.load_corpus(data["corpus"]).text
            win, nbytes = D.token_windows(tok, text, L, n, seed=seed)
        _CACHE[key] = (win, nbytes, hashlib.sha256(win.numpy().tobytes()).hexdigest()[:16])
    return _CACHE[key]


def _recipe(desc: dict):
    from fp8lab import recipes as R
    if "name" in desc:
        return R.get_recipe(desc["name"])
    from fp8lab.parts import build_recipe
    return build_recipe(desc)


def ppl_cell(cell: Cell, device: str = "auto") -> dict:
    """Per-window summed NLL of `cell.model` under `cell.recipe` on `cell.data`'s windows (fp8lab.evaluate)."""
    from fp8lab import recipes as R
    from fp8lab.evaluate import eval_ppl
    t0 = time.time()
    dev = pick_device(device)
    model, tok, sha = _model(cell.model, dev)
    win, nbytes, fp = _windows(cell.model, tok, cell.data)
    with R.applied(model, _recipe(cell.recipe)):
        items = eval_ppl(model, win.to(dev), nbytes, desc=cell.key, progress=False)
    return {"windows_fingerprint": fp, "model_sha256": sha, "device": dev, "pid": os.getpid(),
            "worker_rank": _LOCAL_RANK["rank"],
            "seconds": round(time.time() - t0, 2), **items.to_json()}


def _compute_and_store(fn, cell: Cell, folder: str, device: str) -> dict:
    """Runs on a worker: compute, write the cell's own file atomically, return the payload too."""
    result = fn(cell, device)
    try:
        CellStore(folder).put(cell, result)
    except OSError:          # a worker on another machine may not be able to write there: the driver will
        pass
    return result


_LOCAL_RANK = {"rank": None}     # this worker's index among the workers of its host (set by the driver)


def _init_worker(threads: int, rank: int | None = None) -> int:
    import torch
    torch.set_num_threads(threads)
    _LOCAL_RANK["rank"] = rank
    return torch.get_num_threads()


def _assign_ranks(client, threads: int) -> None:
    """Number the workers 0..k-1 on each host, so that device="auto" puts worker i on that host's GPU i mod n."""
    by_host: dict = {}
    for addr, w in sorted(client.scheduler_info()["workers"].items()):
        by_host.setdefault(w.get("host", addr), []).append(addr)
    for addrs in by_host.values():
        for i, a in enumerate(addrs):
            client.run(_init_worker, threads, i, workers=[a])


# ---- the driver ---------------------------------------------------------------------------------------------
def max_per_host() -> int:
    """The most local worker processes, and torch threads per worker, accepted: 4 per core of this machine."""
    return 4 * (os.cpu_count() or 1)


def check_scheduler(address: str) -> str:
    """`address` if it has the form [protocol://]host:port (port 1-65535); ValueError with a one-line reason."""
    m = re.fullmatch(r"(?:[a-z]+://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})", str(address))
    if not m or not 1 <= int(m.group(2)) <= 65535:
        raise ValueError(f"--scheduler {str(address)[:80]!r}: give a Dask scheduler address host:port, "
                         "e.g. tcp://10.0.0.5:8786")
    return address


def _client(scheduler: str | None, workers: int, threads: int, timeout: str = "20s"):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise DistributedError("parallel cells need Dask: pip install 'dask[distributed]' "
                               "(or run with --workers 0 for one process)") from None
    if scheduler:
        try:
            return Client(scheduler, timeout=timeout), None
        except (OSError, TimeoutError, ValueError) as e:
            raise DistributedError(f"cannot reach the Dask scheduler {scheduler}: {e}") from None
    # loopback only; no dashboard (nothing to serve, and it would need bokeh)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, silence_logs=40)
    return Client(cluster), cluster


def run_cells(cells: list[Cell], out, fn=ppl_cell, scheduler: str | None = None, workers: int = 2,
              threads: int = 1, device: str = "auto", command: str = "", log=print) -> dict[str, dict]:
    """Compute every cell whose result is not in `<out>/cells/` yet; returns {key: result} for all cells.

    workers=0 (and no scheduler): no Dask, one process, cells in order. Otherwise a LocalCluster of `workers`
    processes, or the cluster at `scheduler` ("tcp://host:8786"). The caller's `fn(cell, device)` must be
    importable by the workers (a module-level function of an installed package).
    """
    keys = [c.key for c in cells]
    if len(set(keys)) != len(keys):
        raise ValueError("cell keys must be unique")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an integer >= 0, got {workers!r}")
    store = CellStore(out)
    results: dict[str, dict] = {}
    with FolderLock(out, command or " ".join(sys.argv)):
        todo = []
        for c in cells:
            r = store.get(c)
            if r is None:
                todo.append(c)
            else:
                results[c.key] = r
        if len(results):
            log(f"{len(results)} of {len(cells)} cells already in {store.dir}; computing {len(todo)}")
        if not todo:
            return results
        t0 = time.time()
        if not scheduler and workers == 0:
            for i, c in enumerate(todo, 1):
                results[c.key] = _compute_and_store(fn, c, str(out), device)
                log(f"[{i}/{len(todo)}] {c.key}  {results[c.key].get('seconds', 0):.1f}s")
            return results
        client, cluster = _client(scheduler, workers, threads)
        try:
            from distributed import as_completed
            _assign_ranks(client, threads)
            futs = {client.submit(_compute_and_store, fn, c, str(Path(out).resolve()), device, key=f"fp8lab-{c.key}-"
                                  f"{c.fingerprint}", pure=False): c for c in todo}
            for i, fut in enumerate(as_completed(futs), 1):
                c = futs[fut]
                r = fut.result()              # a worker's exception is raised here, with its traceback
                if store.get(c) != r:         # a remote worker wrote to its own disk: the driver writes it
                    store.put(c, r)
                results[c.key] = r
                log(f"[{i}/{len(todo)}] {c.key}  {r.get('seconds', 0):.1f}s on {r.get('device', '?')}  "
                    f"(elapsed {time.time() - t0:.0f}s)")
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    return results


def paired_ppl_delta(result: dict, baseline: dict, n_boot: int = 2000, seed: int = 0):
    """(delta %, ci95 low, ci95 high, n windows) of perplexity, paired over the same windows."""
    import numpy as np
    from fp8lab import stats
    if result["windows_fingerprint"] != baseline["windows_fingerprint"]:
        raise ValueError("the two cells were scored on different windows: no pairing possible")
    r, b = np.asarray(result["nll"], float), np.asarray(baseline["nll"], float)
    ntok = np.asarray(result["ntok"], float)
    d, lo, hi = stats.delta_with_ci(stats.ppl_delta_pct, (r, b, ntok), n_boot=n_boot, seed=seed)
    return d, lo, hi, len(r)


def default_workers() -> int:
    """One worker per GPU when CUDA is there, else min(2, cores)."""
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.device_count()
    except ImportError:  # pragma: no cover
        pass
    return max(1, min(2, os.cpu_count() or 1))
