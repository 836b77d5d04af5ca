"""Kernel profiling: Nsight Compute capture and parsing, SASS facts, bottleneck classification,
and a torch.profiler fallback that says it is one."""
