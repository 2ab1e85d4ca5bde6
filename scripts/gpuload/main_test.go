package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The tests run gpuload itself: this test binary re-executed with
// GPULOAD_MAIN=1 is gpuload.
func TestMain(m *testing.M) {
	if os.Getenv("GPULOAD_MAIN") == "1" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

type result struct {
	code           int
	stdout, stderr string
}

func gpuload(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "GPULOAD_MAIN=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// driverInstalled says whether this machine has an NVIDIA driver library,
// in which case gpuload would really run.
func driverInstalled() bool {
	out, _ := exec.Command("ldconfig", "-p").Output()
	if bytes.Contains(out, []byte("libcuda.so.1")) {
		return true
	}
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/local/nvidia/lib64"} {
		if _, err := os.Stat(filepath.Join(d, "libcuda.so.1")); err == nil {
			return true
		}
	}
	return false
}

func TestNoDriver(t *testing.T) {
	t.Run("default library", func(t *testing.T) {
		if driverInstalled() {
			t.Skip("this machine has libcuda.so.1")
		}
		r := gpuload(t, nil, "-mode", "fma", "-duration", "1s")
		require.Equal(t, exitNoDriver, r.code, r.stderr)
		require.Contains(t, r.stderr, "gpuload: libcuda.so.1 not found: the NVIDIA driver is not installed")
		require.Empty(t, r.stdout)
	})
	t.Run("missing path", func(t *testing.T) {
		lib := filepath.Join(t.TempDir(), "libcuda.so.1")
		r := gpuload(t, nil, "-mode", "alloc", "-lib", lib)
		require.Equal(t, exitNoDriver, r.code, r.stderr)
		require.Contains(t, r.stderr, "gpuload: "+lib+" not found: the NVIDIA driver is not installed")
	})
	t.Run("not a library", func(t *testing.T) {
		lib := filepath.Join(t.TempDir(), "libcuda.so.1")
		require.NoError(t, os.WriteFile(lib, []byte("not an ELF file\n"), 0o644))
		r := gpuload(t, nil, "-mode", "copy", "-lib", lib)
		require.Equal(t, exitNoDriver, r.code, r.stderr)
		require.Contains(t, r.stderr, "gpuload: cannot load "+lib+": ")
	})
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `-mode must be fma, mma, copy, h2d, d2h, alloc, duty or xid, got ""`},
		{[]string{"-mode", "burn"}, `-mode must be fma, mma, copy, h2d, d2h, alloc, duty or xid, got "burn"`},
		{[]string{"-mode", "fma", "-duration", "-1s"}, "-duration must be positive, got -1s"},
		{[]string{"-mode", "fma", "-device", "-1"}, "-device must be 0 or more, got -1"},
		{[]string{"-mode", "alloc", "-bytes", "2TB"}, `invalid value "2TB" for flag -bytes`},
		{[]string{"-mode", "alloc", "-bytes", "1KiB"}, "-bytes must be at least 2MiB, got 1024"},
		{[]string{"-mode", "h2d", "-bytes", "1MiB"}, "-bytes must be at least 2MiB, got 1048576"},
		{[]string{"-mode", "alloc", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-mode", "duty", "-on", "0s"}, "-on must be at least 1ms, got 0s"},
		{[]string{"-mode", "duty", "-off", "-1ms"}, "-off must not be negative, got -1ms"},
		{[]string{"-mode", "fma", "-on", "50ms"}, "-on and -off are for -mode duty, not fma"},
		{[]string{"-mode", "xid", "-off", "1s"}, "-on and -off are for -mode duty, not xid"},
		{[]string{"-mode", "fma", "-bytes", "1GiB"}, "-bytes is for -mode copy, h2d, d2h or alloc, not fma"},
		{[]string{"-mode", "mma", "-bytes", "1GiB"}, "-bytes is for -mode copy, h2d, d2h or alloc, not mma"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := gpuload(t, nil, tc.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
		})
	}
}

// fakeDriver builds testdata/fakecuda.c into a libcuda.so.1 stand-in.
func fakeDriver(t *testing.T, defines ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) for the fake driver", cc)
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	args := append([]string{"-shared", "-fPIC", "-Wall", "-Werror", "-o", lib}, defines...)
	out, err := exec.Command(cc, append(args, filepath.Join("testdata", "fakecuda.c"))...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return lib
}

func TestFakeDriver(t *testing.T) {
	lib := fakeDriver(t)
	for _, tc := range []struct {
		mode  string
		args  []string
		want  []string // lines of the fake driver's call log
		stdio []string // regexps that standard output must match
	}{
		{"fma", nil,
			[]string{"module load bytes=", "entry=fma_loop", "alloc bytes=32768", "launch fma_loop grid=32 block=256 iters=16384", "launch fma_loop grid=32 block=256 iters=", "module unload"},
			[]string{`kernel=fma_loop grid=32 block=256 iters=\d+ launch_ms=`, `gpuload: done mode=fma launches=\d+ seconds=\S+ busy=\S+ fp32_tflops=`}},
		{"mma", nil,
			[]string{"entry=mma_loop", "alloc bytes=16384", "launch mma_loop grid=16 block=256 iters=16384", "module unload"},
			[]string{` cc=9\.0 `, `kernel=mma_loop grid=16 block=256 `, `gpuload: done mode=mma launches=\d+ .* bf16_tflops=`}},
		{"duty", []string{"-on", "10ms", "-off", "30ms", "-duration", "2500ms"},
			[]string{"entry=fma_loop", "launch fma_loop grid=32 block=256 iters="},
			[]string{` on=10ms off=30ms`, `(?m)^gpuload: rate t=\d+\.\d{3} mode=duty busy=0\.\d{3}$`, `gpuload: done mode=duty launches=\d+ seconds=\S+ busy=0\.[0-4]\d\d `}},
		{"copy", []string{"-bytes", "200MiB", "-duration", "1500ms"},
			[]string{"alloc bytes=104857600", "alloc bytes=104857600", "memset words=26214400", "copy bytes=104857600"},
			[]string{`(?m)^gpuload: rate t=\d+\.\d{3} mode=copy bytes_per_s=\d+$`}},
		{"h2d", []string{"-bytes", "64MiB", "-duration", "1500ms"},
			[]string{"alloc host bytes=67108864", "alloc bytes=67108864", "memset words=16777216", "copy htod bytes=67108864", "free host"},
			[]string{`buffer_bytes=67108864 pinned=true`, `(?m)^gpuload: rate t=\d+\.\d{3} mode=h2d bytes_per_s=\d+$`, `gpuload: done mode=h2d copies=\d+ seconds=\S+ bytes_per_s=\d+`}},
		{"d2h", []string{"-bytes", "64MiB", "-duration", "1500ms"},
			[]string{"alloc host bytes=67108864", "copy dtoh bytes=67108864", "free host"},
			[]string{`(?m)^gpuload: rate t=\d+\.\d{3} mode=d2h bytes_per_s=\d+$`}},
		{"alloc", []string{"-bytes", "200MiB"},
			[]string{"alloc bytes=209715200", "memset words=52428800", "free"},
			[]string{`gpuload: done mode=alloc bytes=209715200 `}},
		{"xid", nil,
			[]string{"entry=fault_store", "launch fault_store address=0 grid=1 block=1", "sync error=700", "module unload"},
			[]string{`fault_address=0x0`, `gpuload: done mode=xid fault_address=0x0 seconds=\S+ error=CUDA_ERROR_ILLEGAL_ADDRESS \(700\)`}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "calls")
			args := append([]string{"-lib", lib, "-mode", tc.mode, "-duration", "300ms"}, tc.args...)
			r := gpuload(t, []string{"FAKECUDA_LOG=" + log}, args...)
			require.Equal(t, exitOK, r.code, r.stderr)
			require.Regexp(t, `^gpuload: ready pid=\d+ mode=`+tc.mode+` device=0 bus_id=0000:18:00.0 name="Fake GPU" sms=4 cc=9\.0 cuda_driver_api=13.0 `, r.stdout)
			require.Contains(t, r.stdout, "gpuload: done mode="+tc.mode+" ")
			for _, re := range tc.stdio {
				require.Regexp(t, re, r.stdout)
			}
			calls, err := os.ReadFile(log)
			require.NoError(t, err)
			require.Contains(t, string(calls), "cuInit flags=0\nctx retain device=0\n")
			for _, w := range tc.want {
				require.Contains(t, string(calls), w)
			}
			require.True(t, strings.HasSuffix(string(calls), "ctx release device=0\n"), "the context is released last:\n%s", calls)
		})
	}
}

func TestFakeDriverFailures(t *testing.T) {
	t.Run("cuInit fails", func(t *testing.T) {
		r := gpuload(t, []string{"FAKECUDA_INIT_ERROR=100"}, "-lib", fakeDriver(t), "-mode", "fma")
		require.Equal(t, exitCUDA, r.code, r.stderr)
		require.Contains(t, r.stderr, "gpuload: cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected")
	})
	t.Run("no such device", func(t *testing.T) {
		r := gpuload(t, nil, "-lib", fakeDriver(t), "-mode", "fma", "-device", "3")
		require.Equal(t, exitCUDA, r.code, r.stderr)
		require.Contains(t, r.stderr, "gpuload: device 3: the driver lists 1 CUDA devices")
	})
	t.Run("mma before Ampere", func(t *testing.T) {
		r := gpuload(t, []string{"FAKECUDA_CC=7.5"}, "-lib", fakeDriver(t), "-mode", "mma")
		require.Equal(t, exitCUDA, r.code, r.stderr)
		require.Contains(t, r.stderr, `gpuload: -mode mma needs compute capability 8.0 or later (bf16 mma.sync); device 0 (Fake GPU) has 7.5`)
		require.Empty(t, r.stdout)
	})
	t.Run("xid store does not fault", func(t *testing.T) {
		r := gpuload(t, []string{"FAKECUDA_NO_FAULT=1"}, "-lib", fakeDriver(t), "-mode", "xid")
		require.Equal(t, exitCUDA, r.code, r.stderr)
		require.Contains(t, r.stderr, "gpuload: the store to 0x0 did not fault: cuCtxSynchronize succeeded, so no XID was raised")
		require.NotContains(t, r.stdout, "gpuload: done")
	})
	t.Run("symbol missing", func(t *testing.T) {
		r := gpuload(t, nil, "-lib", fakeDriver(t, "-DFAKECUDA_NO_LAUNCH"), "-mode", "alloc")
		require.Equal(t, exitNoDriver, r.code, r.stderr)
		require.Contains(t, r.stderr, "it lacks cuLaunchKernel (driver too old?)")
	})
}

// TestStopsOnSIGTERM: the hardware check stops each load with SIGTERM.
func TestStopsOnSIGTERM(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-lib", fakeDriver(t), "-mode", "fma", "-duration", "1m")
	cmd.Env = append(os.Environ(), "GPULOAD_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "gpuload: ready pid=")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit 0 after SIGTERM")
	case <-time.After(5 * time.Second):
		require.NoError(t, cmd.Process.Kill())
		<-done
		t.Fatal("gpuload did not stop within 5 s of SIGTERM")
	}
}
