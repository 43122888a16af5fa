"""Score one (possibly fake-quantized) model: perplexity over token windows, and lm-eval multiple choice.

Both return PER-UNIT results (one number per window, one 0/1 per question), because every comparison in
the sweep is a paired bootstrap over those units (fp8lab.stats):

    >>> items = eval_ppl(model, windows, nbytes)          # SmolLM2, the default 16 x 512 BoolQ windows
    >>> stats.ppl(items.nll, items.ntok), stats.bpb(items.nll, items.nbytes)
    (19.7869..., 0.98973...)                               # outputs/results.csv, baseline row
    >>> mc = eval_mc(model, tok, "arc_easy", samples)      # {"acc": {"fp8lab_arc_easy:41": 1.0, ...}, ...}

Perplexity: each window is scored on its own (no carried context), the first token is not predicted, so
a window of L tokens contributes L-1 NLL terms. Windows are run one at a time: a dynamic per-tensor
activation scale then depends on that window only, not on what it was batched with.

Multiple choice: lm-eval 0.4.13 `HFLM(pretrained=model, tokenizer=tok)` over the tasks that
fp8lab.data.write_task_yamls generates; `log_samples=True` gives per-question acc / acc_norm exactly as
lm-eval defines them (acc_norm: log-likelihood divided by the choice's length in bytes).
"""
from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fp8lab import data

__all__ = ["PplItems", "eval_ppl", "model_device", "check_device", "eval_mc", "make_hflm", "check_mc_backend", "MC_METRICS"]

MC_METRICS = {"mmlu": ("acc",), "hellaswag": ("acc", "acc_norm"), "arc_easy": ("acc", "acc_norm"),
              "piqa": ("acc", "acc_norm")}


@dataclass
class PplItems:
    nll: np.ndarray      # [n] summed NLL (nats) of each window
    ntok: np.ndarray     # [n] predicted tokens per window (seq_len - 1)
    nbytes: np.ndarray   # [n] UTF-8 bytes of the predicted text per window

    def to_json(self) -> dict:
        return {"nll": self.nll.tolist(), "ntok": self.ntok.tolist(), "nbytes": self.nbytes.tolist()}

    @classmethod
    def from_json(cls, d: dict) -> "PplItems":
        return cls(np.asarray(d["nll"], np.float64), np.asarray(d["ntok"], np.int64),
                   np.asarray(d["nbytes"], np.int64))


def check_device(dev: str) -> str:
    """`dev` if torch can compute there ("cpu", "cuda", "cuda:N"); ValueError with a one-line reason if not."""
    import re
    if dev == "cpu":
        return dev
    if not re.fullmatch(r"cuda(:\d+)?", dev or ""):
        raise ValueError(f"--device {dev!r}: use cpu or cuda[:N]")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {dev}: no CUDA device is visible to torch (torch.cuda.is_available() is "
                         "False); run on the CPU (the default) or on a GPU machine")
    idx = int(dev.split(":")[1]) if ":" in dev else 0
    if idx >= torch.cuda.device_count():
        raise ValueError(f"--device {dev}: only {torch.cuda.device_count()} CUDA device(s)")
    return dev


def model_device(model) -> torch.device:
    """The device the model's parameters live on (the sweep moves the whole model with --device)."""
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


@torch.no_grad()
def eval_ppl(model, windows: torch.Tensor, nbytes: torch.Tensor, desc: str = "ppl",
             progress: bool = True) -> PplItems:
    """Summed next-token NLL of every window (float64 sums of float32 log-softmax terms).

    Windows go to the model's device one at a time; the sums come back to the CPU as float64."""
    from tqdm import tqdm
    dev = model_device(model)
    nll = np.zeros(len(windows), np.float64)
    for i in tqdm(range(len(windows)), desc=desc, disable=not progress, leave=False, unit="window"):
        ids = windows[i:i + 1].to(dev)
        logits = model(input_ids=ids, use_cache=False).logits.float()
        nll[i] = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum").double().item()
    if not np.all(np.isfinite(nll)):
        bad = int(np.sum(~np.isfinite(nll)))
        raise FloatingPointError(f"{desc}: {bad} of {len(nll)} windows gave a non-finite NLL "
                                 "(the recipe produced inf/NaN logits)")
    ntok = np.full(len(windows), windows.shape[1] - 1, np.int64)
    return PplItems(nll, ntok, np.asarray(nbytes, np.int64))


_TASK_CACHE: dict = {}


def _tasks(task: str):
    """lm-eval Task objects for one CLI task, built once per process (datasets load once)."""
    if task not in _TASK_CACHE:
        from lm_eval.tasks import TaskManager
        tdir = Path(tempfile.mkdtemp(prefix="fp8lab_tasks_"))
        data.write_task_yamls(tdir, tasks=(task,))
        tm = TaskManager(include_path=str(tdir), include_defaults=False)
        _TASK_CACHE[task] = (tm, tm.load(data.mc_task_names(task))["tasks"])
    return _TASK_CACHE[task]


def check_mc_backend() -> None:
    """lm-eval's HF backend is its `lm-eval[hf]` extra (accelerate); say so before any work is done."""
    try:
        import lm_eval.models.huggingface  # noqa: F401
    except ImportError as e:
        raise data.DataError(f"lm-eval's HFLM cannot be imported ({e}); the multiple-choice tasks need the "
                             "lm-eval[hf] extra: pip install accelerate") from None


def make_hflm(model, tokenizer, batch_size: int = 1):
    """lm-eval's HFLM around our model object, WITHOUT letting it re-tie the weights.

    HFLM.__init__ calls model.tie_weights(); with a recipe that quantizes lm_head (include_lm_head), the head
    is deliberately untied from the embedding, and re-tying would silently undo its quantization.
    """
    from lm_eval.models.huggingface import HFLM
    model.tie_weights = lambda *a, **k: None       # instance attribute shadows the method for a moment
    try:
        return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size,
                    device=str(model_device(model)))
    finally:
        del model.tie_weights


def eval_mc(model, tokenizer, task: str, samples: dict[str, list[int]] | None,
            batch_size: int = 1, progress: bool = True) -> dict[str, dict[str, float]]:
    """Per-question lm-eval metrics: {metric: {"<lm-eval task>:<doc_id>": value}}.

    progress=False silences lm-eval's own progress bars (they write to stderr; errors still raise)."""
    if task not in MC_METRICS:
        raise ValueError(f"unknown multiple-choice task {task!r}; valid: {', '.join(MC_METRICS)}")
    import lm_eval
    check_mc_backend()
    # lm-eval warns on every call that `pretrained` is an object, not a name: that is our intended use
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    tm, tasks = _tasks(task)
    chosen = list(samples) if samples is not None else list(tasks)
    lm = make_hflm(model, tokenizer, batch_size)
    quiet = contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO())
    with quiet:
        res = lm_eval.simple_evaluate(model=lm, tasks=[tasks[n] for n in chosen], task_manager=tm,
                                      samples=samples, log_samples=True, bootstrap_iters=0,
                                      verbosity=None)
    out: dict[str, dict[str, float]] = {m: {} for m in MC_METRICS[task]}
    for name, rows in res["samples"].items():
        for r in rows:
            for m in MC_METRICS[task]:
                out[m][f"{name}:{r['doc_id']}"] = float(r[m])
    n_expected = sum(len(v) for v in samples.values()) if samples is not None else None
    if n_expected is not None and len(out[MC_METRICS[task][0]]) != n_expected:
        raise RuntimeError(f"{task}: lm-eval returned {len(out[MC_METRICS[task][0]])} questions, "
                           f"expected {n_expected}")
    return out
