package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeNvidiaSMI answers the queries check-real-gpu.sh and the realgpu test
// make, for one GPU; --query-compute-apps lists every running gpuload.
const fakeNvidiaSMI = `#!/usr/bin/env bash
case "$1" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)"; exit 0 ;;
  -q) echo "fake nvidia-smi -q"; exit 0 ;;
  --query-compute-apps=*)
    for p in /proc/[0-9]*; do
      [[ $(cat "$p/comm" 2>/dev/null) == gpuload ]] && echo "00000000:18:00.0, ${p#/proc/}, 2600"
    done
    exit 0 ;;
esac
IFS=, read -ra f <<<"${1#--query-gpu=}"
out=()
for x in "${f[@]}"; do
  case $x in
    index) out+=(0) ;;
    uuid) out+=(GPU-11111111-2222-3333-4444-555555555555) ;;
    pci.bus_id) out+=(00000000:18:00.0) ;;
    *) out+=(42) ;;
  esac
done
(IFS=,; echo "${out[*]}" | sed 's/,/, /g')
`

// fakeRealGPUTest stands in for the realgpu test binary: it checks what the
// script passes it (a running gpuload's pid, the GPU, a writable output
// folder) and fails the copy load, the way testify reports.
const fakeRealGPUTest = `#!/usr/bin/env bash
if [[ $1 == -test.list ]]; then echo TestRealGPUAgainstNvidiaSMI; echo TestRealGPUUnderLoad; exit 0; fi
echo "=== RUN   TestRealGPUAgainstNvidiaSMI"
echo "    realgpu_test.go:1: gpucheck: gpu=0 DCGM_FI_DEV_FB_TOTAL gpuscope=143771 nvidia-smi=143771"
echo "--- PASS: TestRealGPUAgainstNvidiaSMI (0.00s)"
echo "=== RUN   TestRealGPUUnderLoad"
ok=1
if [[ $GPUCHECK_LOAD != idle ]] && [[ $(cat "/proc/$GPUCHECK_LOAD_PID/comm" 2>/dev/null) != gpuload ]]; then ok=0; why="GPUCHECK_LOAD_PID=$GPUCHECK_LOAD_PID is not gpuload"; fi
[[ $GPUCHECK_GPU == 0 ]] || { ok=0; why="GPUCHECK_GPU=$GPUCHECK_GPU"; }
touch "$GPUCHECK_OUT/x.prom" || { ok=0; why="GPUCHECK_OUT not writable"; }
[[ $GPUCHECK_LOAD == copy ]] && { ok=0; why="planted failure under copy"; }
if ((ok)); then
  echo "    realgpu_test.go:2: gpucheck: load=$GPUCHECK_LOAD uid=$(id -u) median GPU_UTIL=99.0"
  echo "--- PASS: TestRealGPUUnderLoad (0.00s)"
  echo PASS
  exit 0
fi
printf '    realgpu_test.go:3: \n        \tError Trace:\tx\n        \tError:      \tShould be true\n        \tTest:       \tTestRealGPUUnderLoad\n        \tMessages:   \t%s\n' "$why"
echo "--- FAIL: TestRealGPUUnderLoad (0.00s)"
echo FAIL
exit 1
`

// TestCheckRealGPUScript runs scripts/check-real-gpu.sh against fakes (an
// nvidia-smi script, a realgpu test script, this gpuload on a fake
// libcuda): the orchestration, the loads' pids and cgroups, the report and
// the exit status, which a GPU day should not be the first to try.
func TestCheckRealGPUScript(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the hardware check runs on Linux")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	lib := fakeDriver(t)
	bin, tools, out := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tools, "nvidia-smi"), []byte(fakeNvidiaSMI), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "gpu.test"), []byte(fakeRealGPUTest), 0o755))
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "gpuload"), self, 0o755))

	cmd := exec.Command("bash", filepath.Join("..", "check-real-gpu.sh"), bin)
	cmd.Env = append(os.Environ(),
		"OUT="+out,
		"PATH="+tools+":"+os.Getenv("PATH"),
		"LD_LIBRARY_PATH="+filepath.Dir(lib),
		"GPULOAD_MAIN=1", // the copied test binary is gpuload
	)
	log, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", log)
	require.Equal(t, 1, ee.ExitCode(), "one planted failure: exit 1\n%s", log)

	summary, err := os.ReadFile(filepath.Join(out, "summary.tsv"))
	require.NoError(t, err, "%s", log)
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(summary)), "\n")[1:] {
		f := strings.SplitN(line, "\t", 4)
		require.Len(t, f, 4, line)
		rows[f[0]+" as "+f[1]] = f[2] + " " + f[3]
	}
	for _, want := range []string{
		"nvidia-smi answers as root",
		"[idle] TestRealGPUAgainstNvidiaSMI as root", "[idle] TestRealGPUUnderLoad as root",
		"gpuload fma starts as root", "[fma] TestRealGPUUnderLoad as root", "gpuload fma stops on SIGTERM as root",
		"gpuload copy starts as root", "gpuload copy stops on SIGTERM as root",
		"gpuload alloc starts as root", "[alloc] TestRealGPUUnderLoad as root", "gpuload alloc stops on SIGTERM as root",
	} {
		require.Contains(t, rows, want, "%s", summary)
		require.True(t, strings.HasPrefix(rows[want], "PASS"), "%s: %s\n%s", want, rows[want], log)
	}
	require.Equal(t, "FAIL planted failure under copy", rows["[copy] TestRealGPUUnderLoad as root"])
	require.Contains(t, rows["gpuload fma starts as root"], "on GPU 0 (0000:18:00.0)")
	require.Contains(t, rows["gpuload alloc stops on SIGTERM as root"], "gpuload: done mode=alloc bytes=2147483648")
	require.Equal(t, "SKIP no gpuscope binary in "+bin, rows["[fma] gpuscope agent /metrics/gpu as root"])

	for row, res := range rows {
		if strings.HasPrefix(res, "FAIL") {
			require.True(t, strings.HasPrefix(row, "[copy] TestRealGPUUnderLoad as "), "only the planted failure fails: %s: %s", row, res)
		}
	}

	report, err := os.ReadFile(filepath.Join(out, "report.txt"))
	require.NoError(t, err)
	require.Regexp(t, `\[copy\] TestRealGPUUnderLoad +root +FAIL +planted failure under copy`, string(report))
	require.Contains(t, string(report), "load=fma uid=0 median GPU_UTIL=99.0")

	// raw.tar.gz holds every log.
	f, err := os.Open(filepath.Join(out, "raw.tar.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	for _, want := range []string{"raw/check.log", "raw/env.txt", "raw/load-fma.log", "raw/test-copy-root/test.log", "raw/test-fma-root/x.prom"} {
		require.Contains(t, names, want)
	}
}
