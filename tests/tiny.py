"""A tiny stand-in for the real model and corpus, so that sweep / kv_drift CLI tests run in seconds.

    install(monkeypatch.setattr)          # in a test: load_model, context_length and load_corpus replaced
    python -m tests.tiny sweep --out D …  # in a subprocess: the same patches, then the real CLI

The model is the random 2-layer Llama of tests/test_recipes.py (vocab 256, context 128); the tokenizer maps
UTF-8 bytes to ids, so every text is a valid token sequence. Set FP8LAB_TINY_SLOW=<seconds> to make each
perplexity evaluation sleep (a run then holds its folder's lock long enough for a second one to collide),
and FP8LAB_TINY_STARTED=<path> to have the first evaluation create that file.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

CONTEXT = 128
TEXT = ("The lab measures what low-precision formats do to a model. " * 200)


class ByteTokenizer:
    bos_token_id = None
    eos_token = pad_token = "\n"

    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        ids = list(text.encode("utf-8"))
        if return_tensors == "pt":
            import torch
            ids = torch.tensor([ids])
        return {"input_ids": ids}

    def decode(self, ids):
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def tiny_model():
    from fp8lab.models import LoadedModel
    from tests.test_recipes import tiny_llama
    m = tiny_llama()
    m.requires_grad_(False)
    return LoadedModel(m, ByteTokenizer(), "tiny", "tests.tiny", "0123456789abcdef" * 4,
                       "a random 2-layer test model, not a real one", 0.0, "")


def install(setattr_):
    """Patch the loaders with `setattr_(obj, name, value)` (monkeypatch.setattr, or plain setattr)."""
    from fp8lab import data, evaluate, models

    setattr_(models, "load_model", lambda name=None, **kw: tiny_model())
    setattr_(models, "context_length", lambda name=None: CONTEXT)
    setattr_(data, "load_corpus", lambda name: data.Corpus(name, TEXT, ["tests/tiny.py"], 1))
    slow = float(os.environ.get("FP8LAB_TINY_SLOW", "0") or 0)
    started = os.environ.get("FP8LAB_TINY_STARTED")
    if slow or started:
        real = evaluate.eval_ppl

        def eval_ppl(*a, **k):
            if started:
                Path(started).touch()
            time.sleep(slow)
            return real(*a, **k)

        setattr_(evaluate, "eval_ppl", eval_ppl)


def main(argv: list[str]) -> int:
    install(setattr)
    which, rest = argv[0], argv[1:]
    if which == "sweep":
        from fp8lab import sweep
        return sweep.main(rest)
    if which == "kv_drift":
        from fp8lab import kv_drift
        return kv_drift.main(rest)
    raise SystemExit(f"unknown CLI {which!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
