"""The sweep's results table: its columns, what makes a row unique, and a validated reader.

One row per model x recipe x task x metric x settings. A row's *identity* is every setting that changes one
of its numbers, so that a run with `--seed 1` (or another `--seq-len`, `--limit`, device, ...) into the same
folder adds rows beside seed 0's instead of overwriting or being confused with them:

    key(row) -> ("smollm2-135m", "b179c9523d0e6a0f", "e4m3-w", "ppl", "t8192", "512", "0", "", "cpu", "2000")
                 model           model_sha256        recipe    task   size     seq_len seed batch device n_boot

`size` is t<tokens> for perplexity and n<limit> (or n<all>) for multiple choice; seq_len only applies to
perplexity and batch_size only to multiple choice (perplexity windows always run one at a time).

The per-item files the rows are computed from live under `per_item/<model>-<sha12>/<cell>/<recipe>.json`,
where <cell> spells the same identity: `ppl-t8192-L512-s0-cpu`, `arc_easy-n40-b1-s0-cpu`.

Both the sweep (which writes the table) and the plots (which only read it) import this module; neither
imports the other.
"""
from __future__ import annotations

from pathlib import Path

from fp8lab.store import DamagedFile, read_rows

__all__ = ["CSV_FIELDS", "KEY_FIELDS", "LEGACY_FIELDS", "PPL_TASKS", "key", "read_results", "cell_tag",
           "size_tag", "LegacyTable"]

PPL_TASKS = ("ppl", "ppl_lambada", "ppl_wikitext")
CSV_FIELDS = ["model", "model_sha256", "recipe", "causal", "task", "metric", "value", "baseline", "delta_pct",
              "ci95_low", "ci95_high", "ci_method", "changed", "delta_unit", "n", "size", "seq_len", "seed",
              "batch_size", "device", "n_boot", "seconds", "model_note"]
KEY_FIELDS = ("model", "model_sha256", "recipe", "task", "size", "seq_len", "seed", "batch_size", "device",
              "n_boot")
#: the columns of results.csv files written before rows carried causal / device / interval method
LEGACY_FIELDS = ["model", "model_sha256", "recipe", "task", "metric", "value", "baseline", "delta_pct",
                 "ci95_low", "ci95_high", "delta_unit", "n", "size", "seq_len", "seed", "seconds", "model_note"]


class LegacyTable(DamagedFile):
    """A results.csv in the older layout: readable for figures, never extended by a new run."""


def key(row: dict) -> tuple:
    return tuple(str(row.get(k, "")) for k in KEY_FIELDS)


def size_tag(task: str, tokens: int, limit: int | None) -> str:
    return f"t{tokens}" if task in PPL_TASKS else f"n{limit or 'all'}"


def cell_tag(task: str, size: str, seq_len, seed, batch_size, device: str) -> str:
    """The per-item folder name of one task under one set of settings (see the module docstring)."""
    if task in PPL_TASKS:
        return f"{task}-{size}-L{seq_len}-s{seed}-{device}"
    return f"{task}-{size}-b{batch_size}-s{seed}-{device}"


def read_results(path, allow_legacy: bool = False) -> list[dict]:
    """All rows of a results.csv, validated: header, row widths, a complete last line.

    [] when the file does not exist. `DamagedFile` when it cannot be trusted; `LegacyTable` (a DamagedFile)
    for the older column layout unless `allow_legacy`, in which case its rows are returned with the new
    columns filled in where they can be known (causal from the recipe table, device "cpu", the rest "")."""
    p = Path(path)
    if not p.is_file():
        return []
    first = p.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].strip()
    if first.split(",") == LEGACY_FIELDS:
        if not allow_legacy:
            raise LegacyTable(f"{p} has the columns of an older fp8lab (no causal / device / ci_method): "
                              "a new run cannot extend it; rerun with --fresh to replace it (it stays in git "
                              "if committed), or use another --out")
        rows = read_rows(p, fieldnames=LEGACY_FIELDS)
        from fp8lab.recipes import RECIPES
        for r in rows:
            rec = RECIPES.get(r["recipe"])
            r.update(causal=str(rec.causal) if rec else "", ci_method="paired bootstrap", changed="",
                     batch_size="" if r["task"] in PPL_TASKS else "1", device="cpu", n_boot="2000")
        return rows
    return read_rows(p, fieldnames=CSV_FIELDS)
