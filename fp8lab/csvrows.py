"""Result rows to and from CSV: the one writer every results file of the lab goes through.

    write_rows([{"recipe": "e4m3-w", "delta_pct": 1.07}], "outputs/x.csv")   # header from the first row
    read_rows("outputs/x.csv") -> [{"recipe": "e4m3-w", "delta_pct": "1.07"}]  # strings, as csv gives them

Writes go to `<name>.partial` first and are renamed into place, so an interrupted run never leaves a
half-written results file behind (a rerun of the sweep trusts the rows it finds).
"""
from __future__ import annotations

import csv
from pathlib import Path


def write_rows(rows: list[dict], path, fieldnames: list[str] | None = None) -> Path:
    """Write dict rows with a header (the first row's keys unless `fieldnames` is given; extra keys ignored)."""
    path = Path(path)
    if not rows and fieldnames is None:
        raise ValueError(f"no rows to write to {path} and no fieldnames for the header")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fieldnames or rows[0]), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
    return path


def read_rows(path) -> list[dict]:
    """All rows of a CSV file as dicts of strings; [] when the file does not exist."""
    p = Path(path)
    if not p.is_file():
        return []
    with p.open(newline="") as fh:
        return list(csv.DictReader(fh))
