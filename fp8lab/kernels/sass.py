"""Read the machine code the kernels really run: compile exactly what `_cuda.load_module` compiles (same NVRTC
options, same defines), for any listed arch and without a GPU, disassemble it with cuobjdump, count opcodes.

    k = kernels("gemm_w8a8.cu", 90)["w8a8_mma_fp8"]      # one kernel's SASS on sm_90
    k.count("HMMA"), k.count("QMMA")                      # -> (256, 0): the FP8 mma.sync is emulated on Hopper
    k.forms("F2FP")                                       # -> {'F2FP.F16.E4M3.UNPACK_B': 128, ...}
    k.loop()                                              # the largest loop holding a matrix instruction

Command line:
    python -m fp8lab.kernels.sass --summary --out outputs/kernels/sass/     # key kernels x sm_89/90/100/120/121
    python -m fp8lab.kernels.sass --source gemv_fp8.cu --arch sm_90 --ptxas-v   # registers and spills per kernel
    python -m fp8lab.kernels.sass --source gemm_w8a8.cu --arch sm_121 --kernel w8a8_mma_fp8   # the listing
    python -m fp8lab.kernels.sass --source gemm_w8a8_tma.cu --arch sm_90 --kernel w8a8_tma_n256_w2_s3_c2_e1_ss --control
                                                            # its k-loop with each instruction's stall/yield/reuse bits

Why one module: the lab's claims about hardware paths ("QGMMA on sm_90a", "mma.sync e4m3 is emulated on sm_90",
"QMMA on sm_89/sm_120") are claims about SASS, and SASS depends on every compile flag (CuPy's -ftz=true among
them). This module compiles with the options `_cuda.nvrtc_options` builds, which are the loader's options plus
what CuPy appends, so the SASS read here is the SASS that runs. The disassembler is `cuobjdump` from the PyPI
package nvidia-cuda-cuobjdump (or a CUDA toolkit on PATH).
"""
from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import _cuda, sources

MATRIX_OPS = ("HMMA", "QMMA", "OMMA", "IMMA", "HGMMA", "QGMMA", "UTCHMMA", "UTCQMMA")
# what the summary counts for every kernel (base opcodes; modifiers are kept separately in `forms`)
SUMMARY_OPS = MATRIX_OPS + ("F2FP", "F2F", "I2F", "PRMT", "LOP3", "HMUL2", "HFMA2", "FFMA", "FMUL", "MUFU", "FCHK",
                            "LDG", "LDGSTS", "LDS", "LDSM", "STG", "BRA", "BAR", "SYNCS", "LDL", "STL")


class ToolMissing(RuntimeError):
    """cuobjdump is not installed (pip install nvidia-cuda-cuobjdump)."""


@functools.lru_cache(maxsize=None)
def cuobjdump() -> str:
    for p in sys.path:
        for cand in sorted(glob.glob(os.path.join(p, "nvidia", "cu1*", "bin", "cuobjdump")), reverse=True):
            if os.access(cand, os.X_OK):
                return cand
    found = shutil.which("cuobjdump")
    if found:
        return found
    raise ToolMissing("cuobjdump not found: pip install nvidia-cuda-cuobjdump (requirements.txt lists it)")


# ---- parsing ------------------------------------------------------------------------------------------------
_PRED = re.compile(r"^@!?U?P[T0-9]+\s+")


@dataclass
class Kernel:
    """One kernel's SASS: `instrs` are (address, text without predicate) pairs in order; `exits` the addresses of
    its unpredicated EXITs (the ends of its code paths)."""

    name: str
    instrs: list
    exits: frozenset = frozenset()

    def opcodes(self) -> Counter:
        """Base opcodes: 'HMMA.16816.F32.BF16' counts as 'HMMA'."""
        return Counter(t.split()[0].split(".")[0] for _, t in self.instrs if t)

    def count(self, op: str) -> int:
        return self.opcodes().get(op, 0)

    def forms(self, op: str) -> dict:
        """Full opcodes (with modifiers) whose base is `op`: {'F2FP.BF16.F32.PACK_AB': 8, ...}."""
        c = Counter(t.split()[0] for _, t in self.instrs if t and t.split()[0].split(".")[0] == op)
        return dict(sorted(c.items()))

    def at(self, op: str) -> list[int]:
        """Addresses of the instructions whose opcode is `op`, in full ('CCTL.IVALL': not 'SYNCS.CCTL.IVALL') or by
        its base ('ATOMG'), in order."""
        return [a for a, t in self.instrs if t and op in (t.split()[0], t.split()[0].split(".")[0])]

    def has(self, pattern: str) -> bool:
        """True if some instruction's text matches the regular expression (e.g. r'F2FP\\..*E4M3.*UNPACK')."""
        rx = re.compile(pattern)
        return any(rx.search(t) for _, t in self.instrs)

    def loop_range(self, innermost: bool = False) -> tuple[int, int] | None:
        """(first, last) address of the largest loop (a backward branch) holding a matrix instruction, or with
        innermost=True of the shortest such loop (a GEMM's k-loop inside its tile loop); None if none.
        A backward branch over an unpredicated EXIT is no loop: it is the jump back of an out-of-line stub that
        ptxas places after the kernel's end (an mbarrier wait's retry, for one), and its range would span most of
        the kernel."""
        best = None
        for addr, text in self.instrs:
            m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
            if m and int(m.group(1), 16) <= addr:
                lo = int(m.group(1), 16)
                if any(lo <= e <= addr for e in self.exits):
                    continue
                body = [t for a, t in self.instrs if lo <= a <= addr]
                if any(t.split()[0].split(".")[0] in MATRIX_OPS for t in body if t) and (
                        best is None or (addr - lo < best[1] - best[0] if innermost else addr - lo > best[1] - best[0])):
                    best = (lo, addr)
        return best

    def loop_body(self, innermost: bool = False) -> list | None:
        """The instructions (in order) of the loop loop_range(innermost) names."""
        r = self.loop_range(innermost)
        return None if r is None else [t for a, t in self.instrs if r[0] <= a <= r[1]]

    def loop(self) -> dict | None:
        """The largest loop (a backward branch) holding a matrix instruction: the work per iteration.

        {"instructions": n, "matrix": m, "per_matrix_instruction": n / m, "ops": {opcode: count}}; None if none."""
        best = self.loop_body()
        if best is None:
            return None
        ops = Counter(t.split()[0].split(".")[0] for t in best if t)
        n_mma = sum(v for k, v in ops.items() if k in MATRIX_OPS)
        return {"instructions": len(best), "matrix": n_mma, "per_matrix_instruction": round(len(best) / n_mma, 2),
                "ops": dict(ops.most_common())}

    def summary(self) -> dict:
        ops = self.opcodes()
        out = {"total": sum(ops.values()), **{op: ops.get(op, 0) for op in SUMMARY_OPS}}
        out["matrix_forms"] = {k: v for op in MATRIX_OPS for k, v in self.forms(op).items()}
        out["f2fp_forms"] = self.forms("F2FP")
        out["loop"] = self.loop()
        return out


def parse(sass_text: str) -> dict[str, Kernel]:
    """cuobjdump -sass output -> {kernel name: Kernel} (encoded() without the words, predicates dropped)."""
    return {name: Kernel(name, [(a, _PRED.sub("", t)) for a, t, _, _ in code],
                         frozenset(a for a, t, _, _ in code if t.split()[0] == "EXIT"))
            for name, code in encoded(sass_text).items()}


def disassemble(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "k.cubin"
        p.write_bytes(cubin)
        r = subprocess.run([cuobjdump(), "-sass", str(p)], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"cuobjdump failed: {r.stderr.strip()[:500]}")
        return r.stdout


@functools.lru_cache(maxsize=None)
def kernels(filename: str, cc: int) -> dict[str, Kernel]:
    """Every kernel of `filename` as a device of compute capability `cc` runs it (cached per process)."""
    cubin, _ = _cuda.compile_for(filename, cc)
    return parse(disassemble(cubin))


def build_all(pairs, workers: int | None = None, progress=None) -> dict:
    """Compile and disassemble (filename, cc) pairs in parallel (NVRTC releases the GIL): {(file, cc): kernels}.
    progress: called with one line as the work starts and one per pair as it finishes (seconds so far, a rough
    estimate of the rest); a full summary compiles ~80 pairs, several minutes on 2 cores."""
    pairs = list(pairs)
    workers = workers or max(1, min(len(pairs), os.cpu_count() or 1))
    t0, done, lock = time.monotonic(), [0], threading.Lock()
    if progress is not None:
        progress(f"compiling {len(pairs)} (source, arch) pairs with NVRTC on {workers} thread(s); one line each")

    def one(p):
        ks = kernels(*p)
        if progress is not None:
            with lock:
                done[0] += 1
                dt = time.monotonic() - t0
                progress(f"[{done[0]}/{len(pairs)}] {p[0]} sm_{p[1]}: {len(ks)} kernel(s), {dt:.0f} s so far, "
                         f"~{dt / done[0] * (len(pairs) - done[0]):.0f} s left")
        return ks

    with ThreadPoolExecutor(workers) as ex:
        return dict(zip(pairs, ex.map(one, pairs)))


def arch_cc(arch: str) -> int:
    """'sm_90a' / 'sm_90' / '90' -> 90."""
    m = re.fullmatch(r"(?:sm_)?(\d+)a?", arch.strip())
    if not m:
        raise ValueError(f"not an arch: {arch!r} (write sm_89, sm_90, sm_120, sm_121)")
    return int(m.group(1))


# ---- control bits: read them, and rewrite them in a cubin ------------------------------------------------------
# Since Volta an instruction is 128 bits; ptxas's scheduling decisions sit in its top bits (105-125), in the second
# 64-bit word cuobjdump prints for each instruction. NVIDIA does not document them; the layout below is the one the
# public reverse-engineering work reads (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
# Microbenchmarking", 2018; the open assemblers after it) and DeepGEMM's FFMA rewrite relies on. Bits of the high word:
CONTROL_FIELDS = {"stall": (41, 4), "yield": (45, 1), "write_barrier": (46, 3), "read_barrier": (49, 3),
                  "wait_mask": (52, 6), "reuse": (58, 4)}
_ENCODED = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*\n\s*/\*\s*(0x[0-9a-f]{16})\s*\*/")


def control(hi: int) -> dict:
    """The control fields of an instruction's high word: {"stall": cycles, "yield": raw bit, ...}. The raw yield bit
    is set on most instructions; in the W8A8 promotion ptxas clears it on about half of the FFMAs, alternating with
    FFMAs that carry a reuse flag, and the reverse-engineering work reads a clear bit as 'the scheduler may switch to
    another warp after this one'."""
    return {k: (hi >> lo) & ((1 << n) - 1) for k, (lo, n) in CONTROL_FIELDS.items()}


def with_control(hi: int, **fields) -> int:
    """`hi` with some control fields replaced: with_control(hi, reuse=0, **{"yield": 0})."""
    for k, v in fields.items():
        if k not in CONTROL_FIELDS:
            raise ValueError(f"no control field {k!r}; the fields are {', '.join(CONTROL_FIELDS)}")
        lo, n = CONTROL_FIELDS[k]
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < (1 << n):
            raise ValueError(f"control field {k} holds {n} bit(s): {v} does not fit")
        hi = (hi & ~(((1 << n) - 1) << lo)) | (v << lo)
    return hi


def encoded(sass_text: str) -> dict[str, list]:
    """cuobjdump -sass output -> {kernel: [(address, text with predicate, low word, high word), ...]}."""
    out = {}
    for block in re.split(r"\n\s*Function : ", "\n" + sass_text)[1:]:
        name = block.split("\n", 1)[0].strip()
        out[name] = [(int(a, 16), t.strip(), int(lo, 16), int(hi, 16)) for a, t, lo, hi in _ENCODED.findall(block)]
    return out


def elf_sections(blob: bytes) -> dict[str, tuple[int, int]]:
    """{section name: (file offset, size)} of a 64-bit little-endian ELF file (a cubin). A kernel's code is the
    section '.text.<kernel>'; the addresses cuobjdump prints are offsets into it."""
    import struct

    if blob[:4] != b"\x7fELF" or len(blob) < 6 or blob[4] != 2 or blob[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file (a cubin)")
    try:
        shoff, = struct.unpack_from("<Q", blob, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
        heads = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
        stroff = heads[shstrndx][4]
        out = {}
        for h in heads:
            end = blob.index(b"\0", stroff + h[0])
            out[blob[stroff + h[0]:end].decode()] = (h[4], h[5])
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"a truncated or malformed ELF file ({type(e).__name__}: {e})") from None
    return out


def edit_control(cubin: bytes, kernel: str, select, sass_text: str | None = None, **fields) -> tuple[bytes, int]:
    """Rewrite control fields (see CONTROL_FIELDS) of the instructions of `kernel` that select(address, text)
    picks: (new cubin, instructions changed). sass_text: the cubin's disassembly, if already at hand. Every picked
    instruction's bytes are checked against the disassembly first (a mismatch is an error, never a silent edit
    elsewhere); picking nothing is an error too. The opcodes and operands stay as they are, so a kernel edited this
    way computes the same bits; what changes is when its warps issue and, where reuse flags are dropped, how often
    the register file is read."""
    code = encoded(sass_text if sass_text is not None else disassemble(cubin))
    if kernel not in code:
        raise ValueError(f"no kernel {kernel!r} in this cubin; it has: {', '.join(sorted(code))}")
    off, size = elf_sections(cubin).get(".text." + kernel, (None, None))
    if off is None:
        raise ValueError(f"no section .text.{kernel} in this cubin")
    out = bytearray(cubin)
    changed = picked = 0
    for addr, text, lo, hi in code[kernel]:
        if not select(addr, text):
            continue
        picked += 1
        at = off + addr
        if addr + 16 > size or bytes(out[at:at + 16]) != lo.to_bytes(8, "little") + hi.to_bytes(8, "little"):
            raise ValueError(f"{kernel} at {addr:#x}: the cubin's bytes are not those cuobjdump printed")
        new = with_control(hi, **fields)
        if new != hi:
            out[at + 8:at + 16] = new.to_bytes(8, "little")
            changed += 1
    if not picked:
        raise ValueError(f"{kernel}: the selection picked no instruction; nothing to edit")
    return bytes(out), changed


def format_control(kernel: Kernel, code: list) -> str:
    """The innermost matrix loop of `kernel` (all of it if it has none) with each instruction's control bits;
    `code` is encoded(...)[kernel.name]. The yield column is the raw bit (0: the scheduler may switch warps here)."""
    lo, hi = kernel.loop_range(innermost=True) or (0, 1 << 62)
    lines = [f"{'addr':>6s} {'stall':>5s} {'yield':>5s} {'reuse':>5s}  instruction"]
    for addr, text, _, word in code:
        if lo <= addr <= hi:
            c = control(word)
            lines.append(f"{addr:06x} {c['stall']:5d} {c['yield']:5d} {format(c['reuse'], '04b'):>5s}  {text}")
    return "\n".join(lines)


def promotion_ffmas(kernel: Kernel):
    """select() for edit_control: the FFMAs of `kernel`'s innermost matrix loop (a W8A8 kernel's FP32 promotion).
    A kernel without such a loop is an error."""
    r = kernel.loop_range(innermost=True)
    if r is None:
        raise ValueError(f"{kernel.name} has no loop holding a matrix instruction: no promotion to select")
    lo, hi = r
    return lambda addr, text: lo <= addr <= hi and _PRED.sub("", text).startswith("FFMA")


# ---- the summary written under outputs/ ----------------------------------------------------------------------
def summarize(archs=sources.ARCHS, progress=None) -> dict:
    """{arch: {kernel: summary}} for the key kernels of every source that builds for that arch (progress: see
    build_all)."""
    pairs = [(f, cc) for cc in archs for f, s in sources.SOURCES.items() if s.builds_for(cc)]
    built = build_all(pairs, progress=progress)
    out = {}
    for (f, cc), ks in built.items():
        target = sources.get(f).target(cc)
        for name in sources.get(f).key_kernels:
            out.setdefault(f"sm_{cc}", {})[name] = {"source": f, "target": target, **ks[name].summary()}
    not_built = {f"sm_{cc}": {f: s.why for f, s in sources.SOURCES.items() if not s.builds_for(cc)} for cc in archs}
    return {"kernels": out, "not_built": not_built}


def format_summary(summary: dict) -> str:
    """A table: per arch and key kernel, the matrix instructions and F2FP conversions it really runs."""
    lines = [f"{'arch':7s} {'kernel':34s} {'target':8s} {'total':>6s}  matrix instructions / F2FP forms"]
    for arch, ks in summary["kernels"].items():
        for name, k in ks.items():
            mm = ", ".join(f"{f} {n}" for f, n in k["matrix_forms"].items()) or "no matrix instruction"
            f2 = ", ".join(f"{f} {n}" for f, n in k["f2fp_forms"].items())
            lines.append(f"{arch:7s} {name[:34]:34s} {k['target']:8s} {k['total']:6d}  {mm}" + (f" | {f2}" if f2 else ""))
    for arch, nb in summary["not_built"].items():
        for f, why in nb.items():
            lines.append(f"{arch:7s} {f:34s} not built: {why}")
    return "\n".join(lines)


def write_summary(out_dir: str | Path, archs=sources.SUMMARY_ARCHS, progress=None) -> Path:
    """summary.json (provenance, compiler, options) and summary.txt under out_dir, through fp8lab.store."""
    from fp8lab import provenance, store

    from . import nvrtc

    out_dir = Path(out_dir)
    summary = summarize(archs, progress)
    cmd = "python -m fp8lab.kernels.sass --summary --out " + str(out_dir)
    opts = [o.replace(str(_cuda.KERNEL_DIR), "fp8lab/kernels") for o in _cuda.nvrtc_options("gemm_w8a8.cu", 90)]
    version = subprocess.run([cuobjdump(), "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    payload = {"provenance": provenance.provenance(cmd, cuda=False, extra_packages=("nvidia-cuda-nvrtc", "nvidia-cuda-cuobjdump")),
               "compiler": {"nvrtc": ".".join(map(str, nvrtc.version())), "cuobjdump": version[-1] if version else "?",
                            "options_example_sm_90": opts[:3] + ["-D<format constants and instantiation lists>"] + opts[-3:]},
               **summary}
    with store.FolderLock(out_dir, cmd):
        store.atomic_write_json(out_dir / "summary.json", payload)
        store.atomic_write_text(out_dir / "summary.txt", provenance.describe(payload["provenance"]) + "\n\n" + format_summary(summary) + "\n")
    return out_dir / "summary.json"


def main(argv=None) -> int:
    from fp8lab.cli import OneLineParser, UsageError, fail, split_list
    from fp8lab.cli import parse as parse_args  # this module's parse() reads SASS text
    from fp8lab.store import REFERENCE, out_folder

    p = OneLineParser(prog="python -m fp8lab.kernels.sass", description=__doc__.split("\n")[0])
    p.add_argument("--summary", action="store_true", help="write summary.json / summary.txt of the key kernels (compiles "
                   "every source for every arch: about ten minutes on 2 cores, one progress line each on stderr)")
    p.add_argument("--out", default=None, help="folder for --summary (default runs/sass; the committed "
                   "outputs/kernels/sass only with --record)")
    p.add_argument("--record", action="store_true", help="with --summary: write the committed reference (default "
                   "--out then outputs/kernels/sass)")
    p.add_argument("--archs", default=",".join(f"sm_{a}" for a in sources.SUMMARY_ARCHS),
                   help="comma-separated, e.g. sm_90,sm_121 (default: the tested archs and sm_100)")
    p.add_argument("--source", help="one .cu file of fp8lab/kernels")
    p.add_argument("--arch", default="sm_90", help="with --source: the device arch (sm_89, sm_90, sm_120, sm_121)")
    p.add_argument("--ptxas-v", action="store_true", help="with --source: print ptxas' registers/spills per kernel")
    p.add_argument("--kernel", help="with --source: print this kernel's SASS listing")
    p.add_argument("--control", action="store_true",
                   help="with --kernel: the innermost loop holding a matrix instruction (the whole kernel if none), "
                        "each instruction with its control bits: stall cycles, yield bit, reuse flags")
    a, status = parse_args(p, argv)
    if a is None:
        return status
    try:
        archs = tuple(arch_cc(x) for x in split_list(a.archs, "--archs"))
        if a.summary:
            out = out_folder(a.out, "runs/sass", record=a.record, record_default=REFERENCE / "kernels" / "sass")
            path = write_summary(out, archs, progress=lambda line: print(line, file=sys.stderr, flush=True))
            print(format_summary(summarize(archs)))             # the compiles are cached: no second pass
            print(f"wrote {path}")
            return 0
        if not a.source:
            raise UsageError("give --summary, or --source FILE.cu")
        cc = arch_cc(a.arch)
        cubin, log = _cuda.compile_for(a.source, cc, ptxas_verbose=a.ptxas_v)
        if a.ptxas_v:
            print(log.strip())
        text = disassemble(cubin)
        ks = parse(text)
        if a.kernel:
            if a.kernel not in ks:
                print(f"no kernel {a.kernel!r} in {a.source}; it has: {', '.join(sorted(ks))}", file=sys.stderr)
                return 2
            if a.control:
                print(format_control(ks[a.kernel], encoded(text)[a.kernel]))
            else:
                print("\n".join(t for _, t in ks[a.kernel].instrs))
        elif not a.ptxas_v:
            for name, k in sorted(ks.items()):
                s = k.summary()
                print(f"{name:44s} {s['total']:6d} instr  " + " ".join(f"{op}={s[op]}" for op in MATRIX_OPS + ("F2FP",) if s[op]))
        return 0
    except UsageError as e:
        return fail(str(e))
    except (KeyError, ValueError, ToolMissing, RuntimeError) as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
