"""A stand-in for ``pynvml`` (nvidia-ml-py) with two GPUs, for the GPU telemetry tests.

Behaviour from the environment, so the sampler's spawned process sees it too: ``FAKE_NVML_MODE`` = ``ok``
(default), ``nolib`` (no NVML library), ``nodriver``, ``nogpu`` (zero devices), ``noenergy`` (the energy
counter is not supported: the summary integrates power instead), ``flaky`` (GPU 1's power read fails with
another error than not supported).
"""

import os


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # pynvml's names
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class _Util:
    def __init__(self, gpu, memory):
        self.gpu, self.memory = gpu, memory


class _Mem:
    def __init__(self, total, used):
        self.total, self.used, self.free = total, used, total - used


GIB = 2**30
POWER_W = (300.0, 250.0)
ENERGY_STEP_S = 0.05
_energy_reads: dict[int, int] = {}


def _mode():
    return os.environ.get("FAKE_NVML_MODE", "ok")


def nvmlInit():
    if _mode() == "nolib":
        raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
    if _mode() == "nodriver":
        raise NVMLError_DriverNotLoaded("Driver Not Loaded")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 0 if _mode() == "nogpu" else 2


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetName(h):
    return b"NVIDIA H100 80GB HBM3"  # older nvidia-ml-py returned bytes


def nvmlDeviceGetUUID(h):
    return f"GPU-0000000{h}"


def nvmlSystemGetDriverVersion():
    return "550.54.15"


def nvmlSystemGetCudaDriverVersion():
    return 12040


def nvmlDeviceGetPowerManagementLimit(h):
    return 700000


def nvmlDeviceGetUtilizationRates(h):
    return _Util(50 + 10 * h, 20)


def nvmlDeviceGetMemoryInfo(h):
    return _Mem(80 * GIB, (10 + h) * GIB)


def nvmlDeviceGetPowerUsage(h):
    if _mode() == "flaky" and h == 1:
        raise NVMLError("Unknown Error")
    return int(POWER_W[h] * 1000)


def nvmlDeviceGetTotalEnergyConsumption(h):
    if _mode() == "noenergy":
        raise NVMLError_NotSupported("Not Supported")
    # a count, not a clock: each read is one sampling interval (ENERGY_STEP_S) at constant power later, so what the
    # records sum to does not depend on how busy the machine is between the sample's stamp and this read
    _energy_reads[h] = _energy_reads.get(h, 0) + 1
    return int(1_000_000 + POWER_W[h] * 1000 * ENERGY_STEP_S * _energy_reads[h])
