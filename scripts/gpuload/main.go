// Command gpuload puts a known load on one NVIDIA GPU, for gpuscope's
// hardware check (scripts/check-real-gpu.sh). It needs no CUDA toolkit:
// it opens the driver's own libcuda.so.1 at run time (dlopen, as go-nvml
// opens NVML) and has the driver JIT-compile its kernel from PTX text.
//
//	gpuload -mode fma|copy|alloc [-duration 60s] [-device 0] [-bytes 2GiB]
//
// Modes:
//
//	fma    an FMA loop on every SM, launched back to back: GPU_UTIL and
//	       PROF_GR_ENGINE_ACTIVE near 100 %
//	copy   device-to-device copies between two buffers of -bytes/2 each:
//	       PROF_DRAM_ACTIVE up
//	alloc  -bytes allocated, written once and held: the process's GPU memory
//
// Once the load runs it prints one line "gpuload: ready pid=<pid> ..." on
// standard output; it stops when the duration has passed or on SIGTERM or
// SIGINT, frees what it took, prints "gpuload: done ..." and exits 0.
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
	modeCopy  = "copy"
	modeAlloc = "alloc"

	defaultLib   = "libcuda.so.1"
	defaultBytes = 2 << 30
)

type options struct {
	mode     string
	duration time.Duration
	device   int
	bytes    uint64
	lib      string
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
	fs.StringVar(&o.mode, "mode", "", "load: fma (SMs busy), copy (device memory bandwidth) or alloc (memory held)")
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long to run the load")
	fs.IntVar(&o.device, "device", 0, "CUDA device ordinal")
	fs.Var(&bytes, "bytes", "memory to allocate: held in alloc mode, split in two copy buffers in copy mode (e.g. 2GiB)")
	fs.StringVar(&o.lib, "lib", defaultLib, "the CUDA driver library to open")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.bytes = uint64(bytes)
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.mode != modeFMA && o.mode != modeCopy && o.mode != modeAlloc:
		return o, fmt.Errorf("-mode must be fma, copy or alloc, got %q", o.mode)
	case o.duration <= 0:
		return o, fmt.Errorf("-duration must be positive, got %s", o.duration)
	case o.device < 0:
		return o, fmt.Errorf("-device must be 0 or more, got %d", o.device)
	case o.bytes < 2<<20 && o.mode != modeFMA:
		return o, fmt.Errorf("-bytes must be at least 2MiB, got %d", o.bytes)
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
