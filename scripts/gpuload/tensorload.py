#!/usr/bin/env python3
"""A bf16 matrix-multiply load on one GPU through PyTorch, for the tensor
step of scripts/check-real-gpu.sh.

cuBLAS's bf16 GEMM drives the tensor cores the way training does (on
Hopper with wgmma, which gpuload's mma.sync mode cannot reach), so where
the GPU machine has torch this is the load that PROF_PIPE_TENSOR_ACTIVE is
checked under; gpuload -mode mma is the fallback.

    tensorload.py --probe
    tensorload.py [--duration SECONDS] [--device N] [--n 8192]

--probe prints "torch <version> cuda <runtime> devices <n>" and exits 0
when torch imports and sees a CUDA device (without making a CUDA context:
the check probes while another step measures); otherwise it prints why
and exits 1. The load speaks gpuload's protocol: "gpuload: ready pid=<pid>
mode=tensor ..." on standard output once the matmuls run, then runs until
--duration has passed or SIGTERM or SIGINT comes, prints "gpuload: done
mode=tensor ..." and exits 0. Exit codes: 0 done, 1 torch or CUDA failed,
2 bad arguments.

The device ordinal is CUDA's: the check sets CUDA_DEVICE_ORDER=PCI_BUS_ID
so that it is nvidia-smi's index.
"""

import argparse
import os
import signal
import sys
import time

# One launch batch lasts about this long, so that a stop is quick.
BATCH_SECONDS = 0.1


def probe():
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print(f"torch does not import: {type(e).__name__}: {e}")
        return 1
    try:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as e:
        print(f"torch {torch.__version__}: CUDA fails: {type(e).__name__}: {e}")
        return 1
    if n == 0:
        print(f"torch {torch.__version__} sees no CUDA device (a CPU-only build, or no driver)")
        return 1
    print(f"torch {torch.__version__} cuda {torch.version.cuda} devices {n}")
    return 0


def bus_id(props):
    """The PCI address as CUDA prints it, or "?" from a torch too old to say."""
    try:
        return "%04X:%02X:%02X.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    except AttributeError:
        return "?"


def load(args):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    import torch

    if args.device >= torch.cuda.device_count():
        print(f"gpuload: device {args.device}: torch lists {torch.cuda.device_count()} CUDA devices", file=sys.stderr)
        return 1
    torch.cuda.set_device(args.device)
    n = args.n
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)

    def run(k):
        t = time.monotonic()
        for _ in range(k):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        return time.monotonic() - t

    run(2)  # cuBLAS picks its kernel and loads it
    per = run(4) / 4
    batch = max(1, int(BATCH_SECONDS / max(per, 1e-6)))
    props = torch.cuda.get_device_properties(args.device)
    print(
        f"gpuload: ready pid={os.getpid()} mode=tensor device={args.device} bus_id={bus_id(props)} "
        f'name="{props.name}" sms={props.multi_processor_count} cc={props.major}.{props.minor} '
        f"torch={torch.__version__} n={n} dtype=bfloat16 batch={batch} matmul_ms={per * 1000:.2f}",
        flush=True,
    )
    start = time.monotonic()
    deadline = start + args.duration
    matmuls = 0
    while not stop and time.monotonic() < deadline:
        run(batch)
        matmuls += batch
    el = time.monotonic() - start
    tflops = 2 * n**3 * matmuls / max(el, 1e-9) / 1e12
    print(f"gpuload: done mode=tensor matmuls={matmuls} seconds={el:.1f} bf16_tflops={tflops:.1f}", flush=True)
    return 0


def main(argv):
    p = argparse.ArgumentParser(prog="tensorload.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--probe", action="store_true", help="say whether torch and a CUDA device are there, and exit")
    p.add_argument("--duration", type=float, default=60, help="seconds to run (default 60)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    p.add_argument("--n", type=int, default=8192, help="the matrices are n by n (default 8192)")
    args = p.parse_args(argv)
    if args.probe:
        return probe()
    if args.duration <= 0:
        p.error(f"--duration must be positive, got {args.duration:g}")
    if args.device < 0:
        p.error(f"--device must be 0 or more, got {args.device}")
    if args.n < 256:
        p.error(f"--n must be at least 256, got {args.n}")
    try:
        return load(args)
    except Exception as e:
        print(f"gpuload: tensor: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
