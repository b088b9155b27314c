"""Benchmarks: each `bench_<area>.py` measures chronolog against a baseline in the same run."""
