package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tensorload runs tensorload.py with python3 and, when stub, the stand-in
// torch of testdata/torchstub.
func tensorload(t *testing.T, stub bool, env []string, args ...string) result {
	t.Helper()
	py := python3(t)
	cmd := exec.Command(py, append([]string{"tensorload.py"}, args...)...)
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1"), env...) // no __pycache__ in the tree
	if stub {
		cmd.Env = append(cmd.Env, "PYTHONPATH="+torchStub(t))
	} else {
		cmd.Env = append(cmd.Env, "PYTHONPATH="+t.TempDir()) // no torch there, whatever this machine has
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func python3(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	return py
}

func torchStub(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "torchstub"))
	require.NoError(t, err)
	return dir
}

func TestTensorLoadProbe(t *testing.T) {
	r := tensorload(t, true, nil, "--probe")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "torch 2.9.0+stub cuda 12.8 devices 1\n", r.stdout)

	r = tensorload(t, true, []string{"TORCHSTUB_NO_CUDA=1"}, "--probe")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "torch 2.9.0+stub sees no CUDA device (a CPU-only build, or no driver)\n", r.stdout)

	r = tensorload(t, false, nil, "--probe")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "torch does not import: ModuleNotFoundError")
}

func TestTensorLoadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--duration", "0"}, "--duration must be positive, got 0"},
		{[]string{"--device", "-1"}, "--device must be 0 or more, got -1"},
		{[]string{"--n", "16"}, "--n must be at least 256, got 16"},
		{[]string{"--bogus"}, "unrecognized arguments: --bogus"},
	} {
		r := tensorload(t, true, nil, tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want)
	}
	r := tensorload(t, true, nil, "--device", "1", "--duration", "1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "gpuload: device 1: torch lists 1 CUDA devices")
}

func TestTensorLoadRuns(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	r := tensorload(t, true, []string{"TORCHSTUB_LOG=" + log}, "--duration", "0.5", "--n", "1024")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^gpuload: ready pid=\d+ mode=tensor device=0 bus_id=0000:18:00\.0 name="Stub H200" sms=132 cc=9\.0 torch=2\.9\.0\+stub n=1024 dtype=bfloat16 batch=\d+ matmul_ms=\S+\n`+
		`gpuload: done mode=tensor matmuls=\d+ seconds=0\.\d bf16_tflops=\S+\n$`, r.stdout)
	calls, err := os.ReadFile(log)
	require.NoError(t, err)
	require.GreaterOrEqual(t, bytes.Count(calls, []byte("synchronize\n")), 3, "warm-up, calibration and at least one batch")
}

// TestTensorLoadStopsOnSIGTERM: the hardware check stops each load with
// SIGTERM and wants exit 0.
func TestTensorLoadStopsOnSIGTERM(t *testing.T) {
	cmd := exec.Command(python3(t), "tensorload.py", "--duration", "60")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+torchStub(t), "PYTHONDONTWRITEBYTECODE=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	rd := bufio.NewReader(stdout)
	line, err := rd.ReadString('\n')
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
		t.Fatal("tensorload.py did not stop within 5 s of SIGTERM")
	}
}
