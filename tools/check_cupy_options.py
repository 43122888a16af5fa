"""On the GPU machine: is the SASS that fp8lab.kernels.sass reads offline the SASS that CuPy really runs?

    python tools/check_cupy_options.py [quant.cu gemm_w8a8.cu ...]     (default: every source of the package)

For each source, `_cuda.load_module` compiles it through CuPy (into an empty CUPY_CACHE_DIR, so the cubin CuPy
produced is on disk), and `_cuda.compile_for(source, device cc)` compiles it offline with the options the lab says
CuPy uses (loader's options + what CuPy 14 appends). Both cubins are disassembled and compared kernel by kernel.
Prints one line per source and a verdict last; exit status 1 if any kernel differs. Where the two cubins are equal
byte for byte (all that was seen so far, but for the last byte: see below) nothing is disassembled.

Where CuPy 14.2 keeps the cubin (cupy/cuda/compiler.py and cupy/cuda/_compiler_cache.py, tag v14.2.0):
  * RawModule compiles LAZILY, at the first get_function / .module / .compile() -- load_module alone writes nothing,
    which is why an earlier version of this tool found "0 new files": it now calls RawModule.compile().
  * _compile_with_cache_cuda names the entry sha1(key).cubin and hands it to the module-level
    `_kernel_cache_backend`, a DiskKernelCacheBackend built at import with CUPY_CACHE_DIR (default
    ~/.cupy/kernel_cache); the file is sha1-hex(cubin) (40 ASCII bytes) + the cubin, written atomically
    through a temporary file in the same folder. This tool reads the folder from that backend (`_cache_dir`),
    falling back to CUPY_CACHE_DIR.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    cache = tempfile.mkdtemp(prefix="fp8lab_cupy_cache_")
    os.environ["CUPY_CACHE_DIR"] = cache  # before CuPy is imported: it reads the variable at compile time
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fp8lab.kernels import _cuda, sass, sources

    cc = _cuda.device_cc()
    from cupy.cuda import compiler

    backend = getattr(compiler, "_kernel_cache_backend", None)
    cache = getattr(backend, "_cache_dir", None) or os.environ["CUPY_CACHE_DIR"]
    print(f"CuPy's kernel cache: {cache}")
    names = (argv if argv is not None else sys.argv[1:]) or [f for f, s in sources.SOURCES.items() if s.builds_for(cc)]
    bad = 0
    for f in names:
        before = set(Path(cache).rglob("*"))
        _cuda.load_module(f).compile()  # RawModule compiles lazily: force it, so the cubin lands in the cache
        new = [p for p in set(Path(cache).rglob("*")) - before
               if p.is_file() and not p.name.endswith(".cu") and not p.name.startswith("tmp")]
        if len(new) != 1:
            print(f"{f:22s} could not find CuPy's cubin in its cache ({len(new)} new files)")
            bad += 1
            continue
        data = new[0].read_bytes()
        start = data.find(b"\x7fELF")  # CuPy prefixes the cubin with its sha1 (40 hex bytes): the cubin is the ELF
        cubin, mine = data[start:], _cuda.compile_for(f, cc)[0]
        if cubin in (mine, mine[:-1]):
            # byte for byte the offline cubin (CuPy 14.2 keeps it without the final NUL byte NVRTC returns, which
            # cuobjdump then refuses as "does not contain device code"; seen 2026-12-06 on gemm_w8a8_tma.cu)
            print(f"{f:22s} CuPy's cubin is the offline one byte for byte"
                  + ("" if cubin == mine else " (but for the trailing NUL byte CuPy drops)"))
            continue
        if mine.endswith(b"\0") and not cubin.endswith(b"\0"):
            cubin += b"\0"  # the byte CuPy drops: without it cuobjdump reads no device code
        cupy_k = sass.parse(sass.disassemble(cubin))
        ours = sass.kernels(f, cc)
        differ = [k for k in cupy_k if k not in ours or [t for _, t in cupy_k[k].instrs] != [t for _, t in ours[k].instrs]]
        missing = [k for k in ours if k not in cupy_k]
        print(f"{f:22s} {len(cupy_k):3d} kernels from CuPy, {len(ours):3d} offline: "
              + ("identical SASS" if not differ and not missing else f"{len(differ)} differ, {len(missing)} missing, e.g. {(differ + missing)[:3]}"))
        bad += bool(differ or missing)
    print(f"CUPY-OPTIONS CHECK (sm_{cc}): " + ("the offline compile reproduces CuPy's SASS for every kernel" if not bad
                                             else f"{bad} source(s) differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
