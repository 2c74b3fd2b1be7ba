"""asv benchmark suite for `stability` (docs/performance.md says how to run it).

Modules: `bench_speed` (time), `bench_memory` (peak RSS, saved activation bytes),
`bench_arrival` (gradient arrival of every shipped spec), `bench_cuda` (CUDA variants, skipped
without CUDA). `ratios.py` is a stand-alone script, not an asv benchmark.
"""
