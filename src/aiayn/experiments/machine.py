"""What machine a run ran on, and how fast it multiplies matrices: so that a reader of a run's timings can tell a slow
machine from a slow stage."""

import time

import torch


def processor_name() -> str:
    """The CPU's model name (`platform.processor()` is empty on Linux)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "an unnamed CPU"


def synchronize(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_throughput(device: str = "cpu", seconds: float = 1.0) -> float:
    """GFLOP/s of the products training is made of, with the threads torch uses: on CPUs a float32 (4096 x 512) @
    (512 x 2048) product (a feed-forward layer), on GPUs a bfloat16 8192 x 8192 one."""
    size = (4096, 512, 2048) if device == "cpu" else (8192, 8192, 8192)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x = torch.randn(size[0], size[1], device=device, dtype=dtype)
    weight = torch.randn(size[2], size[1], device=device, dtype=dtype)
    torch.matmul(x, weight.t())
    synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.matmul(x, weight.t())
        count += 1
        synchronize(device)
    return 2 * size[0] * size[1] * size[2] * count / (time.perf_counter() - start) / 1e9


def machine_description(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
    blas = "MKL" if torch.backends.mkl.is_available() else "another BLAS"
    return f"{processor_name()}, {torch.backends.cpu.get_cpu_capability()}; products through {blas}"
