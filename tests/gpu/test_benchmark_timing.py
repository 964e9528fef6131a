"""The benchmarks' clocks: what each timing function counts."""

import time

import torch

from cutlass_ext import benchmark

GPU_CYCLES = 4_000_000  # ~2-3 ms of torch.cuda._sleep
HOST_SECONDS = 0.0005


def _gpu_only():
    torch.cuda._sleep(GPU_CYCLES)


def _host_then_gpu():
    time.sleep(HOST_SECONDS)  # a product's planning and allocations before its first launch
    torch.cuda._sleep(GPU_CYCLES)


def test_enqueued_time_hides_the_host_time_before_a_launch_and_median_time_counts_it():
    gpu = benchmark.median_time_us(_gpu_only, [()], repeats=10)
    enqueued = benchmark.enqueued_time_us(_host_then_gpu, [()], repeats=10)
    synchronised = benchmark.median_time_us(_host_then_gpu, [()], repeats=10)
    assert abs(enqueued - gpu) < 0.1 * gpu, (enqueued, gpu)
    assert synchronised > gpu + 0.5 * HOST_SECONDS * 1e6, (synchronised, gpu)
