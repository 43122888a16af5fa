"""fp8lab.distributed: a two-worker local Dask cluster on a tiny model, one atomic file per cell, resume."""
import json

import pytest

from fp8lab import distributed as D
from fp8lab.store import FolderBusy, FolderLock

DATA = {"corpus": "random", "seq_len": 32, "n_windows": 4, "seed": 0}


def _cells(n=6):
    cells = [D.Cell("baseline", "tiny-llama", {"weights": []}, DATA)]
    for i in range(n - 1):
        fmt = ["fp8_tensor", "nvfp4", "mxfp4"][i % 3]
        cells.append(D.Cell(f"layer{i % 2}-{fmt}-{i}", "tiny-llama", {"weights": [[rf"\.layers\.{i % 2}\.", fmt]]}, DATA))
    return cells


def test_two_worker_cluster_matches_one_process_and_loses_no_cell(tmp_path):
    pytest.importorskip("distributed")
    cells = _cells(8)
    par = D.run_cells(cells, tmp_path / "par", workers=2, log=lambda *a: None)
    ser = D.run_cells(cells, tmp_path / "ser", workers=0, log=lambda *a: None)
    assert set(par) == set(ser) == {c.key for c in cells}
    assert len({r["pid"] for r in par.values()}) == 2            # both workers computed cells
    assert {r["worker_rank"] for r in par.values()} == {0, 1}    # numbered per host: worker i takes GPU i
    for c in cells:
        assert par[c.key]["nll"] == ser[c.key]["nll"]            # bit-identical to the single process
        f = tmp_path / "par" / "cells" / f"{c.key}.json"         # every worker wrote its own file, whole
        d = json.loads(f.read_text())
        assert d["fingerprint"] == c.fingerprint and d["result"]["nll"] == par[c.key]["nll"]
    assert not list((tmp_path / "par" / "cells").glob(".*.tmp"))  # no temp file left behind
    d, lo, hi, n = D.paired_ppl_delta(par[cells[2].key], par["baseline"])
    assert n == 4 and lo <= d <= hi and d != 0


def test_rerun_computes_only_missing_or_damaged_cells(tmp_path):
    cells = _cells(4)
    first = D.run_cells(cells, tmp_path, workers=0, log=lambda *a: None)
    (tmp_path / "cells" / f"{cells[1].key}.json").write_text('{"cell": ')          # a torn file
    (tmp_path / "cells" / f"{cells[2].key}.json").unlink()
    done = []
    again = D.run_cells(cells, tmp_path, workers=0, log=done.append)
    assert again == {k: {**v, "seconds": again[k]["seconds"], "pid": again[k]["pid"]} for k, v in first.items()}
    assert any("3 of 4" in m or "2 of 4" in m for m in done)
    assert sum(m.startswith("[") for m in done) == 2               # exactly the two bad cells recomputed


def test_a_changed_cell_is_not_served_from_a_stale_file(tmp_path):
    c = D.Cell("x", "tiny-llama", {"weights": []}, DATA)
    D.run_cells([c], tmp_path, workers=0, log=lambda *a: None)
    c2 = D.Cell("x", "tiny-llama", {"weights": []}, {**DATA, "seed": 1})
    assert D.CellStore(tmp_path).get(c2) is None


def test_one_driver_per_folder(tmp_path):
    with FolderLock(tmp_path, "another run"):
        with pytest.raises(FolderBusy, match="another run"):
            D.run_cells(_cells(2), tmp_path, workers=0)


def test_bad_cell_keys_and_duplicates_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cell key"):
        D.Cell("a/b", "tiny-llama", {}, DATA)
    c = D.Cell("a", "tiny-llama", {"weights": []}, DATA)
    with pytest.raises(ValueError, match="unique"):
        D.run_cells([c, c], tmp_path, workers=0)


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    pytest.importorskip("distributed")
    with pytest.raises(D.DistributedError, match="cannot reach"):
        D._client("tcp://127.0.0.1:9", 1, 1, timeout="2s")


@pytest.mark.gpu
def test_cells_on_cuda_workers_agree_with_the_cpu(tmp_path):
    """One Dask worker per GPU (device auto): the same cells give the CPU's NLL to float32 accuracy."""
    import numpy as np
    import torch
    pytest.importorskip("distributed")
    cells = _cells(4)
    gpu = D.run_cells(cells, tmp_path / "gpu", workers=torch.cuda.device_count(), log=lambda *a: None)
    cpu = D.run_cells(cells, tmp_path / "cpu", workers=0, device="cpu", log=lambda *a: None)
    for c in cells:
        assert gpu[c.key]["device"].startswith("cuda") and cpu[c.key]["device"] == "cpu"
        assert np.allclose(gpu[c.key]["nll"], cpu[c.key]["nll"], rtol=1e-4)
    dg = D.paired_ppl_delta(gpu[cells[2].key], gpu["baseline"])[0]
    dc = D.paired_ppl_delta(cpu[cells[2].key], cpu["baseline"])[0]
    assert abs(dg - dc) < 0.05
