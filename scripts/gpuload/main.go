// Command gpuload puts a known load on one NVIDIA GPU, for gpuscope's
// hardware check (scripts/check-real-gpu.sh). It needs no CUDA toolkit:
// it opens the driver's own libcuda.so.1 at run time (dlopen, as go-nvml
// opens NVML) and has the driver JIT-compile its kernels from PTX text.
//
//	gpuload -mode MODE [-duration 60s] [-device 0] [-bytes 2GiB] [-on 100ms -off 300ms]
//
// Modes:
//
//	fma    an FP32 FMA loop on every SM, launched back to back: GPU_UTIL,
//	       PROF_GR_ENGINE_ACTIVE and PROF_SM_ACTIVE near 100 %, the tensor
//	       pipe and device memory idle
//	mma    a bf16 mma.sync loop (tensor cores; compute capability 8.0 or
//	       later) on every SM, launched back to back: PROF_PIPE_TENSOR_ACTIVE up
//	copy   device-to-device copies between two buffers of -bytes/2 each:
//	       PROF_DRAM_ACTIVE up
//	h2d    copies from a pinned host buffer (cuMemAllocHost) of -bytes to
//	       the device: PCIe receive (PROF_PCIE_RX_BYTES) at the link's rate
//	d2h    the same from the device to the host: PCIe transmit
//	alloc  -bytes allocated, written once and held: the process's GPU memory
//	duty   the FMA kernel for -on, then nothing for -off, over and over:
//	       a GPU busy -on/(-on + -off) of the time (25 % by default)
//	xid    one thread stores to an unmapped device address, once: the
//	       context dies with CUDA_ERROR_ILLEGAL_ADDRESS and the driver
//	       raises an XID (31, MMU fault, on current GPUs); other contexts
//	       and the GPU are unaffected. The hardware check runs it last.
//
// Once the load runs it prints one line "gpuload: ready pid=<pid> ..." on
// standard output; it stops when the duration has passed or on SIGTERM or
// SIGINT, frees what it took, prints "gpuload: done ..." and exits 0. The
// copy, h2d, d2h and duty modes also print, about once a second, what they
// measured since the previous such line:
//
//	gpuload: rate t=<Unix seconds> mode=<mode> bytes_per_s=<n>   copy (read + write), h2d, d2h
//	gpuload: rate t=<Unix seconds> mode=duty busy=<0..1>          the fraction of time a kernel ran
//
// The xid mode prints "gpuload: done mode=xid ... error=<CUDA error>" and
// exits 0 once the fault is reported, 1 if the store did not fault.
//
// Exit codes: 0 done, 1 CUDA failed, 2 bad arguments, 3 the driver library
// cannot be loaded (no NVIDIA driver).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes.
const (
	exitOK       = 0
	exitCUDA     = 1
	exitUsage    = 2
	exitNoDriver = 3
)

const (
	modeFMA   = "fma"
	modeMMA   = "mma"
	modeCopy  = "copy"
	modeH2D   = "h2d"
	modeD2H   = "d2h"
	modeAlloc = "alloc"
	modeDuty  = "duty"
	modeXID   = "xid"

	defaultLib   = "libcuda.so.1"
	defaultBytes = 2 << 30
)

// modes in the order the usage lists them.
var modes = []string{modeFMA, modeMMA, modeCopy, modeH2D, modeD2H, modeAlloc, modeDuty, modeXID}

// usesBytes says whether a mode takes -bytes.
func usesBytes(mode string) bool {
	return mode == modeCopy || mode == modeH2D || mode == modeD2H || mode == modeAlloc
}

type options struct {
	mode     string
	duration time.Duration
	device   int
	bytes    uint64
	lib      string
	on, off  time.Duration // duty mode
}

// driverError says that the driver library could not be loaded.
type driverError struct {
	lib, detail string
	notFound    bool
}

func (e *driverError) Error() string {
	if e.notFound {
		return fmt.Sprintf("%s not found: the NVIDIA driver is not installed, or its libraries are not on the loader path (ldconfig -p | grep libcuda); gpuload needs no CUDA toolkit, only the driver (%s)", e.lib, e.detail)
	}
	return fmt.Sprintf("cannot load %s: %s", e.lib, e.detail)
}

// byteSize parses "2GiB", "512MiB", "1048576".
type byteSize uint64

func (b *byteSize) String() string { return strconv.FormatUint(uint64(*b), 10) }

func (b *byteSize) Set(s string) error {
	units := []struct {
		suffix string
		mult   uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if !strings.HasSuffix(s, u.suffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(s, u.suffix), 10, 64)
		if err != nil {
			return fmt.Errorf("want a number with an optional GiB, MiB, KiB or B suffix: %w", err)
		}
		if n > (1<<63)/u.mult {
			return fmt.Errorf("%s is too large", s)
		}
		*b = byteSize(n * u.mult)
		return nil
	}
	return fmt.Errorf("bad size %q", s)
}

func parseArgs(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("gpuload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{bytes: defaultBytes}
	bytes := byteSize(defaultBytes)
	fs.StringVar(&o.mode, "mode", "", "load: fma (SMs busy), mma (tensor cores), copy (device memory bandwidth), h2d or d2h (PCIe), alloc (memory held), duty (fma -on, idle -off) or xid (one faulting store)")
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long to run the load")
	fs.IntVar(&o.device, "device", 0, "CUDA device ordinal")
	fs.Var(&bytes, "bytes", "memory to allocate: held in alloc mode, split in two copy buffers in copy mode, the pinned host buffer and its device twin in h2d and d2h (e.g. 2GiB)")
	fs.StringVar(&o.lib, "lib", defaultLib, "the CUDA driver library to open")
	fs.DurationVar(&o.on, "on", 100*time.Millisecond, "duty mode: how long each burst of the FMA kernel runs")
	fs.DurationVar(&o.off, "off", 300*time.Millisecond, "duty mode: how long the GPU is left idle after each burst")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.bytes = uint64(bytes)
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case !slices.Contains(modes, o.mode):
		return o, fmt.Errorf("-mode must be %s or %s, got %q", strings.Join(modes[:len(modes)-1], ", "), modes[len(modes)-1], o.mode)
	case o.duration <= 0:
		return o, fmt.Errorf("-duration must be positive, got %s", o.duration)
	case o.device < 0:
		return o, fmt.Errorf("-device must be 0 or more, got %d", o.device)
	case o.bytes < 2<<20 && usesBytes(o.mode):
		return o, fmt.Errorf("-bytes must be at least 2MiB, got %d", o.bytes)
	case o.on < time.Millisecond:
		return o, fmt.Errorf("-on must be at least 1ms, got %s", o.on)
	case o.off < 0:
		return o, fmt.Errorf("-off must not be negative, got %s", o.off)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case (set["on"] || set["off"]) && o.mode != modeDuty:
		return o, fmt.Errorf("-on and -off are for -mode duty, not %s", o.mode)
	case set["bytes"] && !usesBytes(o.mode):
		return o, fmt.Errorf("-bytes is for -mode copy, h2d, d2h or alloc, not %s", o.mode)
	}
	return o, nil
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuload: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	if err := run(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "gpuload: %v\n", err)
		var de *driverError
		if errors.As(err, &de) {
			return exitNoDriver
		}
		return exitCUDA
	}
	return exitOK
}
