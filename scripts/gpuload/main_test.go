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
		{nil, `-mode must be fma, copy or alloc, got ""`},
		{[]string{"-mode", "burn"}, `-mode must be fma, copy or alloc, got "burn"`},
		{[]string{"-mode", "fma", "-duration", "-1s"}, "-duration must be positive, got -1s"},
		{[]string{"-mode", "fma", "-device", "-1"}, "-device must be 0 or more, got -1"},
		{[]string{"-mode", "alloc", "-bytes", "2TB"}, `invalid value "2TB" for flag -bytes`},
		{[]string{"-mode", "alloc", "-bytes", "1KiB"}, "-bytes must be at least 2MiB, got 1024"},
		{[]string{"-mode", "alloc", "extra"}, `unexpected arguments ["extra"]`},
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
		mode string
		want []string // lines of the fake driver's call log
	}{
		{"fma", []string{"module load bytes=", "alloc bytes=32768", "launch grid=32 block=256 iters=16384", "launch grid=32 block=256 iters=", "module unload"}},
		{"copy", []string{"alloc bytes=104857600", "alloc bytes=104857600", "memset words=26214400", "copy bytes=104857600"}},
		{"alloc", []string{"alloc bytes=209715200", "memset words=52428800", "free"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "calls")
			r := gpuload(t, []string{"FAKECUDA_LOG=" + log}, "-lib", lib, "-mode", tc.mode, "-duration", "300ms", "-bytes", "200MiB")
			require.Equal(t, exitOK, r.code, r.stderr)
			require.Regexp(t, `^gpuload: ready pid=\d+ mode=`+tc.mode+` device=0 bus_id=0000:18:00.0 name="Fake GPU" sms=4 cuda_driver_api=13.0 `, r.stdout)
			require.Contains(t, r.stdout, "gpuload: done mode="+tc.mode+" ")
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
