"""Peak resident memory of this process (Linux), for fcp.torch's memory
test and bench/torch_ring_bench.py. Not part of the API."""


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def reset_peak_rss() -> int:
    """Resident memory now (bytes), after resetting the kernel's peak (VmHWM)
    to it, so that :func:`peak_rss` then reports the peak of what follows,
    not one from start-up (/proc/self/clear_refs, 5 = reset peak RSS). Where
    the reset is refused the peak may include start-up: an over-estimate."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kib("VmRSS") * 1024


def peak_rss() -> int:
    """Peak resident memory (bytes) since start or the last reset."""
    return _status_kib("VmHWM") * 1024
