"""A stand-in for PyTorch, for tensorload.py's tests on machines without a
GPU: the few names tensorload.py uses, one "Stub H200" device, matmuls that
take 0.5 ms. $TORCHSTUB_NO_CUDA makes it a CPU-only build; $TORCHSTUB_LOG
names a file each matmul batch's synchronisation is logged to."""

import os
import time

__version__ = "2.9.0+stub"
bfloat16 = "bfloat16"


class version:
    cuda = "12.8"


class _Props:
    name = "Stub H200"
    multi_processor_count = 132
    major, minor = 9, 0
    pci_domain_id, pci_bus_id, pci_device_id = 0, 0x18, 0


class cuda:
    @staticmethod
    def is_available():
        return "TORCHSTUB_NO_CUDA" not in os.environ

    @staticmethod
    def device_count():
        return 0 if "TORCHSTUB_NO_CUDA" in os.environ else 1

    @staticmethod
    def get_device_name(i):
        return _Props.name

    @staticmethod
    def get_device_properties(i):
        return _Props

    @staticmethod
    def set_device(i):
        if i >= cuda.device_count():
            raise RuntimeError("CUDA error: invalid device ordinal")

    @staticmethod
    def synchronize():
        log = os.environ.get("TORCHSTUB_LOG")
        if log:
            with open(log, "a") as f:
                f.write("synchronize\n")


class _Tensor:
    def __init__(self, shape, device, dtype):
        self.shape, self.device, self.dtype = shape, device, dtype


def randn(*shape, device=None, dtype=None):
    return _Tensor(shape, device, dtype)


def empty(*shape, device=None, dtype=None):
    return _Tensor(shape, device, dtype)


def matmul(a, b, out=None):
    assert a.dtype == b.dtype == "bfloat16" and a.device == "cuda", "tensorload multiplies bf16 on the GPU"
    time.sleep(0.0005)
    return out
