"""fp8lab: what FP8, NVFP4 and MX formats do to a real language model's quality, and what they buy in speed.

Modules (one idea each):
    formats      FloatFormat: E4M3, E5M2, E2M1, E8M0; bf16 RNE; INT8
    scaling      quantize/dequantize at every granularity (tensor, channel, token, group, block, NVFP4, MX, delayed)
    metrics      relative error, SQNR, % flushed, % saturated, cosine
    probe        the underflow probe; grids: the representable grids figure
    models, data, recipes, evaluate, stats, sweep, plots   the quality sweep (python -m fp8lab.sweep)
    bandwidth, gpus, audit    bandwidth math and the checkpoint auditor
    kernels/     CuPy raw kernels and their benchmarks (GPU)
"""
__version__ = "0.1.0"
