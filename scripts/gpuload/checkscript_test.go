package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeNvidiaSMI answers what check-real-gpu.sh asks nvidia-smi, for one
// GPU: -L, -q, nvlink -s, the queries, a dmon trace (a row a second until
// killed; with FAKE_DMON_NO_T, refusing -s ...t) and pmon (the running
// gpuload processes). --query-compute-apps
// lists every running gpuload and python3.
const fakeNvidiaSMI = `#!/usr/bin/env bash
loads() {
  local p c
  for p in /proc/[0-9]*; do
    read -r c 2>/dev/null <"$p/comm" || continue
    case $c in gpuload|python3) echo "${p#/proc/}" ;; esac
  done
}
case "$1" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)"; exit 0 ;;
  -q) echo "fake nvidia-smi -q"; exit 0 ;;
  nvlink) printf 'GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)\n\t Link 0: 26.562 GB/s\n'; exit 0 ;;
  dmon)
    if [[ -n $FAKE_DMON_NO_T && $* == *pucmt* ]]; then echo "Invalid metric group: t"; exit 1; fi
    echo "#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk     fb   bar1  rxpci  txpci"
    echo "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz     MB     MB   MB/s   MB/s"
    while :; do
      echo " $(date '+%Y%m%d   %H:%M:%S')      0     75     31     40      0      0      0      0   2619    345      0      1      0      0"
      sleep 1
    done ;;
  pmon)
    echo "# gpu         pid   type     sm    mem    enc    dec    command"
    echo "# Idx           #    C/G      %      %      %      %    name"
    for i in 1 2 3; do
      for p in $(loads); do echo "    0  $p     C     25      0      -      -    gpuload"; done
      sleep 1
    done
    exit 0 ;;
  --query-compute-apps=*)
    for p in $(loads); do echo "00000000:18:00.0, $p, 2600"; done
    exit 0 ;;
esac
IFS=, read -ra f <<<"${1#--query-gpu=}"
out=()
for x in "${f[@]}"; do
  case $x in
    index) out+=(0) ;;
    uuid) out+=(GPU-11111111-2222-3333-4444-555555555555) ;;
    pci.bus_id) out+=(00000000:18:00.0) ;;
    name) out+=("NVIDIA H200") ;;
    compute_cap) out+=(9.0) ;;
    persistence_mode) out+=(Disabled) ;;
    mig.mode.current) out+=("[N/A]") ;;
    *) out+=(42) ;;
  esac
done
[[ $2 == --format=csv ]] && (IFS=,; echo "${f[*]}")
(IFS=,; echo "${out[*]}" | sed 's/,/, /g')
`

// fakeDmesg prints one old XID; from its second call on, also the one the
// xid load raised.
const fakeDmesg = `#!/usr/bin/env bash
echo "[   10.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."
if [[ -f $FAKE_DMESG_STATE ]]; then
  echo "[ 2000.000000] NVRM: Xid (PCI:0000:18:00): 31, pid=4242, name=gpuload, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x0_00000000."
fi
touch "$FAKE_DMESG_STATE"
`

// fakeRealGPUTest stands in for the realgpu test binary. It checks what
// the script passes it (a running load's pid, the GPU, a writable output
// folder, the dmon trace, the load's log) and prints go test -v output:
// subtests, a skip with its reason, a testify failure under copy and a
// t.Errorf failure under h2d. FAKE_TEST_SLEEP_<load> makes it hang that
// long after starting TestRealGPUUnderLoad.
const fakeRealGPUTest = `#!/usr/bin/env bash
if [[ $1 == -test.list ]]; then echo TestRealGPUAgainstNvidiaSMI; echo TestRealGPUUnderLoad; echo TestRealGPUXID; exit 0; fi
run=""
while (($#)); do case $1 in -test.run) run=$2; shift 2 ;; *) shift ;; esac; done
env | grep '^GPUCHECK_' | sort >"$GPUCHECK_OUT/env-$GPUCHECK_LOAD.txt"
fail() {
  printf '    realgpu_test.go:3: \n        \tError Trace:\tx\n        \tError:      \tShould be true\n        \tTest:       \t%s\n        \tMessages:   \t%s\n' "$1" "$2"
  echo "--- FAIL: $1 (0.00s)"
  echo FAIL
  exit 1
}
if [[ $run == *XID* ]]; then
  echo "=== RUN   TestRealGPUXID"
  touch "$GPUCHECK_READY"
  for i in $(seq 60); do
    grep -q '^gpuload: done mode=xid' "$GPUCHECK_LOAD_LOG" 2>/dev/null && break
    sleep 0.25
  done
  grep -q '^gpuload: done mode=xid' "$GPUCHECK_LOAD_LOG" 2>/dev/null || fail TestRealGPUXID "no XID within 15 s"
  echo "    realgpu_test.go:9: gpucheck: load=xid uid=$(id -u) gpu=0 DCGM_FI_DEV_XID_ERRORS=31 err_code=31"
  echo "--- PASS: TestRealGPUXID (0.00s)"
  echo PASS
  exit 0
fi
if [[ $run == *AgainstNvidiaSMI* ]]; then
  echo "=== RUN   TestRealGPUAgainstNvidiaSMI"
  echo "    realgpu_test.go:1: gpucheck: gpu=0 DCGM_FI_DEV_FB_TOTAL (memory.total) gpuscope=143771 nvidia-smi=143771/143771"
  echo "--- PASS: TestRealGPUAgainstNvidiaSMI (0.00s)"
fi
echo "=== RUN   TestRealGPUUnderLoad"
v=FAKE_TEST_SLEEP_$GPUCHECK_LOAD
sleep "${!v:-0}"
why=""
if [[ $GPUCHECK_LOAD != idle ]]; then
  case $(cat "/proc/$GPUCHECK_LOAD_PID/comm" 2>/dev/null) in
    gpuload|python3) ;;
    *) why="GPUCHECK_LOAD_PID=$GPUCHECK_LOAD_PID is not a load" ;;
  esac
  grep -q '^gpuload: ready' "$GPUCHECK_LOAD_LOG" || why="GPUCHECK_LOAD_LOG=$GPUCHECK_LOAD_LOG has no ready line"
fi
[[ $GPUCHECK_GPU == 0 ]] || why="GPUCHECK_GPU=$GPUCHECK_GPU"
grep -q '^#Date' "$GPUCHECK_DMON" || why="GPUCHECK_DMON=$GPUCHECK_DMON is no dmon trace"
touch "$GPUCHECK_OUT/x.prom" || why="GPUCHECK_OUT not writable"
[[ $GPUCHECK_LOAD == copy ]] && why="planted failure under copy"
[[ -n $why ]] && fail TestRealGPUUnderLoad "$why"
echo "=== RUN   TestRealGPUUnderLoad/energy"
echo "    realgpu_test.go:2: gpucheck: load=$GPUCHECK_LOAD uid=$(id -u) median GPU_UTIL=99.0"
[[ $GPUCHECK_LOAD == fma ]] && echo "    realgpu_test.go:2: gpucheck: load=fma uid=$(id -u) container_sm_mean=97.5 samples=7 id=/gpucheck-fma"
echo "=== RUN   TestRealGPUUnderLoad/the_load's_process_and_container"
echo "    realgpu_test.go:5: pid namespace pid:[1] is not the host's"
echo "=== RUN   TestRealGPUUnderLoad/bounds"
if [[ $GPUCHECK_LOAD == h2d ]]; then
  echo "    realgpu_test.go:77: cycle 3: DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=0} = 42: a ratio outside [0, 1]"
  echo "    realgpu_test.go:78: cycle 4: another"
fi
echo "--- $([[ $GPUCHECK_LOAD == h2d ]] && echo FAIL || echo PASS): TestRealGPUUnderLoad (0.00s)"
echo "    --- PASS: TestRealGPUUnderLoad/energy (0.00s)"
echo "    --- SKIP: TestRealGPUUnderLoad/the_load's_process_and_container (0.00s)"
echo "    --- $([[ $GPUCHECK_LOAD == h2d ]] && echo FAIL || echo PASS): TestRealGPUUnderLoad/bounds (0.00s)"
[[ $GPUCHECK_LOAD == h2d ]] && { echo FAIL; exit 1; }
echo PASS
`

// fakeGpuscope stands in for gpuscope: doctor prints a line; agent serves
// /metrics/gpu with a cycle counter that advances per scrape, and as a
// non-root user a planted collector error.
const fakeGpuscope = `#!/usr/bin/env python3
import http.server, os, sys
if sys.argv[1] == "doctor":
    print("fake gpuscope doctor", " ".join(sys.argv[2:]))
    sys.exit(0)
addr = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--web.listen-address=")][0]
host, port = addr.rsplit(":", 1)
n = [0]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n[0] += 1
        body = "gpuscope_gpu_collector_up 1\ngpuscope_gpu_collector_cycles_total %d\n" % n[0]
        body += 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 99\nDCGM_FI_DEV_FB_TOTAL{gpu="0",UUID="GPU-1"} 143771\n'
        if os.geteuid() != 0:
            body += 'gpuscope_gpu_collector_errors_total{gpu="0",field="DCGM_FI_PROF_SM_ACTIVE"} 3\n'
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())
    def log_message(self, *a):
        pass
http.server.HTTPServer((host, int(port)), H).serve_forever()
`

// scriptRun is one run of check-real-gpu.sh against fakes.
type scriptRun struct {
	bin, tools, out string
	cmd             *exec.Cmd
	log             bytes.Buffer
	marker          string // in every process's environment, to find leftovers
}

type scriptOptions struct {
	gpuscope bool     // a fake gpuscope in the binaries
	torch    bool     // python3 finds the stand-in torch
	env      []string // more environment
}

func newScriptRun(t *testing.T, o scriptOptions) *scriptRun {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the hardware check runs on Linux")
	}
	for _, tool := range []string{"bash", "timeout", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	lib := fakeDriver(t)
	r := &scriptRun{bin: t.TempDir(), tools: t.TempDir(), out: t.TempDir(), marker: fmt.Sprintf("GPUCHECK_TEST_MARKER=%d-%d", os.Getpid(), time.Now().UnixNano())}
	// Let an unprivileged user reach the fakes, as on a GPU machine.
	for _, d := range []string{r.bin, r.tools, filepath.Dir(r.bin), filepath.Dir(r.tools)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	write := func(dir, name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755))
	}
	write(r.tools, "nvidia-smi", fakeNvidiaSMI)
	write(r.tools, "dmesg", fakeDmesg)
	write(r.bin, "gpu.test", fakeRealGPUTest)
	if o.gpuscope {
		write(r.bin, "gpuscope", fakeGpuscope)
	}
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	write(r.bin, "gpuload", string(self))
	py, err := os.ReadFile("tensorload.py")
	require.NoError(t, err)
	write(r.bin, "tensorload.py", string(py))

	r.cmd = exec.Command("bash", filepath.Join("..", "check-real-gpu.sh"), r.bin)
	pythonPath := t.TempDir() // no torch there
	if o.torch {
		pythonPath = torchStub(t)
	}
	r.cmd.Env = append(os.Environ(),
		"OUT="+r.out,
		"PATH="+r.tools+":"+os.Getenv("PATH"),
		"LD_LIBRARY_PATH="+filepath.Dir(lib),
		"PYTHONPATH="+pythonPath,
		"GPULOAD_MAIN=1",            // the copied test binary is gpuload
		"PYTHONDONTWRITEBYTECODE=1", // no __pycache__ beside the stand-in torch
		"FAKE_DMESG_STATE="+filepath.Join(t.TempDir(), "dmesg-called"),
		"GPUCHECK_SETTLE_S=0",
		// Its work directory, which a SIGKILLed run cannot remove
		// (TestCheckRealGPUScriptKilled), goes where the test's go.
		"TMPDIR="+t.TempDir(),
		r.marker,
	)
	r.cmd.Env = append(r.cmd.Env, o.env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.log, &r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() { r.killLeftovers(t) })
	return r
}

// killLeftovers ends the processes this run started that are still there
// (timeout(1) puts its command in a process group of its own), found by
// the marker in their environment.
func (r *scriptRun) killLeftovers(t *testing.T) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !bytes.Contains(env, []byte(r.marker+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// exitCode runs the script to its end and returns its exit status.
func (r *scriptRun) exitCode(t *testing.T) int {
	t.Helper()
	err := r.cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	return r.cmd.ProcessState.ExitCode()
}

// summaryRow is one row of summary.tsv.
type summaryRow struct {
	t                   int
	check, user, result string
	detail, checkAsUser string
}

func readSummary(t *testing.T, path string) []summaryRow {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	require.Equal(t, "t_s\tcheck\tuser\tresult\tdetail", lines[0])
	var rows []summaryRow
	for _, line := range lines[1:] {
		f := strings.Split(line, "\t")
		require.Len(t, f, 5, "%q", line)
		ts, err := strconv.Atoi(f[0])
		require.NoError(t, err, "%q", line)
		require.Contains(t, []string{"PASS", "FAIL", "SKIP", "CUT", "INFO"}, f[3], "%q", line)
		rows = append(rows, summaryRow{t: ts, check: f[1], user: f[2], result: f[3], detail: f[4], checkAsUser: f[1] + " as " + f[2]})
	}
	return rows
}

func byCheck(rows []summaryRow) map[string]summaryRow {
	m := map[string]summaryRow{}
	for _, r := range rows {
		m[r.checkAsUser] = r
	}
	return m
}

func rawNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
}

// TestCheckRealGPUScript runs scripts/check-real-gpu.sh against fakes (an
// nvidia-smi script, a realgpu test script, this gpuload on a fake
// libcuda, tensorload.py on a stand-in torch, a gpuscope script): the
// orchestration, the loads' pids and cgroups, the rows, the report and the
// exit status, which a GPU day should not be the first to try.
func TestCheckRealGPUScript(t *testing.T) {
	r := newScriptRun(t, scriptOptions{gpuscope: true, torch: true})
	sums := exec.Command("sh", "-c", "sha256sum gpu.test gpuload tensorload.py gpuscope >SHA256SUMS")
	sums.Dir = r.bin
	out, err := sums.CombinedOutput()
	require.NoError(t, err, "%s", out)
	start := time.Now()
	code := r.exitCode(t)
	log := r.log.String()
	require.Equal(t, 1, code, "planted failures: exit 1\n%s", log)
	t.Logf("the run took %s", time.Since(start).Round(time.Second))

	rows := readSummary(t, filepath.Join(r.out, "summary.tsv"))
	m := byCheck(rows)
	users := []string{"root"}
	if _, ok := m["[idle] TestRealGPUUnderLoad as nobody"]; ok {
		users = append(users, "nobody")
	} else {
		t.Logf("no nobody rows: %+v", m["run as nobody as nobody"])
	}
	want := []string{
		"nvidia-smi answers as root", "nvidia-smi dmon reference trace as root", "binaries match SHA256SUMS as root",
		"tensor load starts as root", "[tensor] TestRealGPUUnderLoad as root", "tensor load stops on SIGTERM as root",
		"copy load starts as root", "copy load stops on SIGTERM as root",
		"h2d load starts as root", "d2h load starts as root", "[d2h] TestRealGPUUnderLoad as root",
		"alloc load starts as root", "[alloc] TestRealGPUUnderLoad as root", "alloc load stops on SIGTERM as root",
		"duty load starts as root", "[duty] TestRealGPUUnderLoad as root", "duty load stops on SIGTERM as root",
		"xid load faults as root", "[xid] kernel log as root", "nvidia-smi answers after the XID as root",
		"fma load starts as root", "fma load stops on SIGTERM as root",
	}
	for _, u := range users {
		want = append(want,
			"[idle] TestRealGPUAgainstNvidiaSMI as "+u, "[idle] TestRealGPUUnderLoad as "+u, "[idle] TestRealGPUUnderLoad/energy as "+u,
			"[fma] TestRealGPUAgainstNvidiaSMI as "+u, "[fma] TestRealGPUUnderLoad as "+u,
			"[fma] agent: /metrics/gpu as "+u, "[fma] agent: cycles advance as "+u, "[fma] agent: FB_TOTAL as the test's as "+u,
			"[fma] agent: stops on SIGTERM as "+u, "[xid] TestRealGPUXID as "+u)
	}
	for _, w := range want {
		require.Contains(t, m, w, "%s", log)
		require.Equal(t, "PASS", m[w].result, "%s: %s\n%s", w, m[w].detail, log)
	}

	require.Contains(t, m["nvidia-smi dmon reference trace as root"].detail, "dmon -s pucmt,")

	// Failures and skips carry the test's own words.
	require.Equal(t, "FAIL", m["[copy] TestRealGPUUnderLoad as root"].result)
	require.Equal(t, "planted failure under copy (Should be true)", m["[copy] TestRealGPUUnderLoad as root"].detail)
	require.Equal(t, "see its failing subtests", m["[h2d] TestRealGPUUnderLoad as root"].detail)
	require.Equal(t, "FAIL", m["[h2d] TestRealGPUUnderLoad/bounds as root"].result)
	require.Equal(t, "cycle 3: DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=0} = 42: a ratio outside [0, 1]", m["[h2d] TestRealGPUUnderLoad/bounds as root"].detail)
	require.Equal(t, "SKIP", m["[fma] TestRealGPUUnderLoad/the_load's_process_and_container as root"].result)
	require.Equal(t, "pid namespace pid:[1] is not the host's", m["[fma] TestRealGPUUnderLoad/the_load's_process_and_container as root"].detail)
	if len(users) == 2 {
		require.Equal(t, "FAIL", m["[fma] agent: no collector errors as nobody"].result)
		require.Contains(t, m["[fma] agent: no collector errors as nobody"].detail, `gpuscope_gpu_collector_errors_total{gpu="0",field="DCGM_FI_PROF_SM_ACTIVE"} 3`)
	}
	require.Equal(t, "PASS", m["[fma] agent: no collector errors as root"].result)
	for _, row := range rows {
		if row.result == "FAIL" || row.result == "CUT" {
			require.Contains(t, []string{"[copy] TestRealGPUUnderLoad as root", "[h2d] TestRealGPUUnderLoad as root",
				"[h2d] TestRealGPUUnderLoad/bounds as root", "[fma] agent: no collector errors as nobody"},
				row.checkAsUser, "only the planted failures fail: %+v\n%s", row, log)
		}
	}

	// The facts the run depends on.
	require.Contains(t, m["fma load starts as root"].detail, "on GPU 0 (0000:18:00.0)")
	require.Contains(t, m["alloc load stops on SIGTERM as root"].detail, "gpuload: done mode=alloc bytes=2147483648")
	require.Contains(t, m["h2d load stops on SIGTERM as root"].detail, "gpuload: done mode=h2d copies=")
	require.Contains(t, m["tensor load as root"].detail, "torch bf16 8192^3 matmul (cuBLAS): torch 2.9.0+stub cuda 12.8 devices 1")
	require.Contains(t, m["tensor load stops on SIGTERM as root"].detail, "gpuload: done mode=tensor matmuls=")
	require.Contains(t, m["xid load faults as root"].detail, "gpuload: done mode=xid fault_address=0x0")
	require.Contains(t, m["[xid] kernel log as root"].detail, "XID 31 logged")
	require.Contains(t, m["pmon under the duty cycle as root"].detail, "mean sm 25.0 % over")
	require.Contains(t, m["pid namespace as root"].detail, "pid:[")
	require.Contains(t, m["profiling restriction as root"].detail, "RmProfilingAdminOnly")
	require.Equal(t, "INFO", m["gpuscope doctor as root"].result)
	for _, s := range []string{"preflight", "idle", "fma", "tensor", "copy", "h2d", "d2h", "alloc", "duty", "xid"} {
		require.Equal(t, "INFO", m["step "+s+" as root"].result, "step %s", s)
		require.Regexp(t, `^took \d+ s \(estimated \d+ s\); -?\d+ s left$`, m["step "+s+" as root"].detail)
	}
	for i := 1; i < len(rows); i++ {
		require.LessOrEqual(t, rows[i-1].t, rows[i].t, "rows in the order they were recorded")
	}

	report, err := os.ReadFile(filepath.Join(r.out, "report.txt"))
	require.NoError(t, err)
	if testing.Verbose() {
		t.Logf("report.txt:\n%s", report)
	}
	require.NotContains(t, string(report), "IN PROGRESS")
	require.Regexp(t, `\[copy\] TestRealGPUUnderLoad +root +FAIL +planted failure under copy`, string(report))
	require.Contains(t, string(report), "load=fma uid=0 median GPU_UTIL=99.0")
	require.Contains(t, string(report), "fake gpuscope doctor --url= --storage.tsdb.path=")
	require.Contains(t, string(report), "pid namespace: pid:[")
	require.Contains(t, string(report), "profiling restriction: RmProfilingAdminOnly")
	require.Contains(t, string(report), "nvidia-smi nvlink -s:\nGPU 0: NVIDIA H200")
	require.Regexp(t, fmt.Sprintf(`PASS \d+, FAIL %d, SKIP \d+, CUT 0, INFO \d+`, 2+len(users)), string(report), "copy, h2d and its subtest, and the agent as nobody")
	_, err = os.Stat(filepath.Join(r.out, "raw"))
	require.ErrorIs(t, err, os.ErrNotExist, "raw/ is archived at the end")

	names := rawNames(t, filepath.Join(r.out, "raw.tar.gz"))
	for _, w := range []string{"raw/check.log", "raw/env.txt", "raw/dmon.txt", "raw/load-fma.log", "raw/load-h2d.log",
		"raw/load-xid.log", "raw/pmon-duty.txt", "raw/test-copy-root/test.log", "raw/test-fma-root/x.prom",
		"raw/test-xid-root/ready", "raw/xid-kernel-log.txt", "raw/agent-fma-root-2.prom"} {
		require.Contains(t, names, w)
	}

	// What the script passed the tests.
	envOf := func(load string) string {
		t.Helper()
		dir := t.TempDir()
		out, err := exec.Command("tar", "-C", dir, "-xzf", filepath.Join(r.out, "raw.tar.gz")).CombinedOutput()
		require.NoError(t, err, "%s", out)
		b, err := os.ReadFile(filepath.Join(dir, "raw", "test-"+load+"-root", "env-"+load+".txt"))
		require.NoError(t, err)
		return string(b)
	}
	duty := envOf("duty")
	require.Contains(t, duty, "GPUCHECK_FMA_CONTAINER_SM=97.5\n", "the fma run's container SM share reaches the duty run")
	require.Regexp(t, `GPUCHECK_PMON=\S+/raw/pmon-duty.txt\n`, duty)
	require.Regexp(t, `GPUCHECK_DMON=\S+/raw/dmon.txt\n`, duty)
	require.Regexp(t, `GPUCHECK_LOAD_LOG=\S+/raw/load-duty.log\n`, duty)
	xid := envOf("xid")
	require.Regexp(t, `GPUCHECK_READY=\S+/raw/test-xid-root/ready\n`, xid)
	require.Contains(t, xid, "GPUCHECK_XID_WAIT=20s\n")
}

// TestCheckRealGPUScriptBudget: a test run that hangs is cut when the
// budget runs out, the steps after it are skipped for want of time, the
// XID step still runs in the time kept for it, and the script ends within
// its budget with exit 2 (cut, nothing failed).
func TestCheckRealGPUScriptBudget(t *testing.T) {
	const budget = 40
	r := newScriptRun(t, scriptOptions{env: []string{
		"GPUCHECK_BUDGET_S=" + strconv.Itoa(budget), "GPUCHECK_RESERVE_END_S=2", "GPUCHECK_RESERVE_XID_S=14",
		"GPUCHECK_STEP_MIN_S=8", "GPUCHECK_TEST_MIN_S=3", "FAKE_TEST_SLEEP_fma=100", "FAKE_DMON_NO_T=1",
	}})
	start := time.Now()
	code := r.exitCode(t)
	took := time.Since(start)
	log := r.log.String()
	require.Equal(t, 2, code, "cut, nothing failed: exit 2\n%s", log)
	require.Less(t, took, (budget+8)*time.Second, "the script keeps to its budget (and the kill grace)\n%s", log)

	m := byCheck(readSummary(t, filepath.Join(r.out, "summary.tsv")))
	require.Equal(t, "PASS", m["nvidia-smi dmon reference trace as root"].result, "%s", log)
	require.Contains(t, m["nvidia-smi dmon reference trace as root"].detail, "dmon -s pucm,", "without t where nvidia-smi refuses it")
	require.Equal(t, "PASS", m["[idle] TestRealGPUUnderLoad as root"].result, "%s", log)
	require.Equal(t, "PASS", m["[fma] TestRealGPUAgainstNvidiaSMI as root"].result, "%s", log)
	cut := m["[fma] TestRealGPUUnderLoad as root"]
	require.Equal(t, "CUT", cut.result, "%+v\n%s", cut, log)
	require.Regexp(t, `^no result: the time budget stopped the test binary after \d+ s$`, cut.detail)
	require.Equal(t, "PASS", m["fma load stops on SIGTERM as root"].result, "the load is stopped even so")
	for _, s := range []string{"tensor", "copy", "h2d", "d2h", "alloc", "duty"} {
		row := m["step "+s+" as root"]
		require.Equal(t, "SKIP", row.result, "step %s: %+v\n%s", s, row, log)
		require.Regexp(t, `^time budget: -?\d+ s left of 40 s, the step needs at least 8 s \(estimated \d+ s\)$`, row.detail)
	}
	require.Equal(t, "PASS", m["xid load faults as root"].result, "%s", log)
	require.Equal(t, "PASS", m["[xid] TestRealGPUXID as root"].result, "%s", log)
	require.Equal(t, "SKIP", m["[fma] agent: /metrics/gpu as root"].result)
	require.NotContains(t, m, "tensor load as root", "the tensor step did not run")

	report, err := os.ReadFile(filepath.Join(r.out, "report.txt"))
	require.NoError(t, err)
	require.Regexp(t, `PASS \d+, FAIL 0, SKIP \d+, CUT 1, INFO \d+`, string(report))
}

// TestCheckRealGPUScriptKilled: a run killed with SIGKILL (the device
// tool's timeout) still leaves its rows, the report as of the last step,
// the log and the raw files in $OUT.
func TestCheckRealGPUScriptKilled(t *testing.T) {
	r := newScriptRun(t, scriptOptions{env: []string{"FAKE_TEST_SLEEP_fma=60"}})
	require.NoError(t, r.cmd.Start())
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	summary := filepath.Join(r.out, "summary.tsv")
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(summary)
		if bytes.Contains(b, []byte("\tfma load starts\troot\tPASS\t")) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the script ended (%v) before the fma load started:\n%s", err, r.log.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "the fma load did not start within 60 s:\n%s", b)
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // into the fma test
	require.NoError(t, syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL))
	<-done
	r.killLeftovers(t)

	m := byCheck(readSummary(t, summary))
	require.Equal(t, "PASS", m["[idle] TestRealGPUUnderLoad as root"].result)
	require.Equal(t, "PASS", m["fma load starts as root"].result)
	require.Equal(t, "INFO", m["step idle as root"].result)
	require.NotContains(t, m, "step fma as root", "killed during the fma step")

	report, err := os.ReadFile(filepath.Join(r.out, "report.txt"))
	require.NoError(t, err)
	require.Contains(t, string(report), "IN PROGRESS: written after step 'idle'")
	require.Regexp(t, `\[idle\] TestRealGPUUnderLoad +root +PASS`, string(report))
	for _, f := range []string{"check.log", "raw/env.txt", "raw/dmon.txt", "raw/test-idle-root/test.log"} {
		_, err := os.Stat(filepath.Join(r.out, f))
		require.NoError(t, err, "%s is in $OUT after a SIGKILL", f)
	}
	_, err = os.Stat(filepath.Join(r.out, "raw.tar.gz"))
	require.ErrorIs(t, err, os.ErrNotExist, "no archive: the EXIT trap never ran")
	b, err := os.ReadFile(filepath.Join(r.out, "check.log"))
	require.NoError(t, err)
	require.Contains(t, string(b), "step fma: estimated 65 s", "the log is written as it goes")
}

// TestCheckRealGPUScriptCrash: a command the script does not expect to
// fail (here mkdir, of $OUT/raw after the first step) ends the run with a
// FAIL row that names the step and the line, and the report and archive
// as usual.
func TestCheckRealGPUScriptCrash(t *testing.T) {
	r := newScriptRun(t, scriptOptions{})
	mkdir, err := exec.LookPath("mkdir")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(r.tools, "mkdir"), []byte(`#!/bin/sh
case "$*" in *"$OUT/raw") echo "fake mkdir: refused" >&2; exit 1 ;; esac
exec `+mkdir+` "$@"
`), 0o755))
	code := r.exitCode(t)
	log := r.log.String()
	require.Equal(t, 1, code, "%s", log)
	m := byCheck(readSummary(t, filepath.Join(r.out, "summary.tsv")))
	crash := m["check-real-gpu.sh runs to its end as root"]
	require.Equal(t, "FAIL", crash.result, "%s", log)
	require.Regexp(t, `^exit 1 during step 'preflight', after line \d+: mkdir -p "\$out/raw"$`, crash.detail)
	require.Equal(t, "PASS", m["nvidia-smi dmon reference trace as root"].result)
	require.NotContains(t, m, "[idle] TestRealGPUUnderLoad as root")
	report, err := os.ReadFile(filepath.Join(r.out, "report.txt"))
	require.NoError(t, err)
	require.Contains(t, string(report), "check-real-gpu.sh runs to its end")
	require.NotContains(t, string(report), "IN PROGRESS")
	require.Contains(t, rawNames(t, filepath.Join(r.out, "raw.tar.gz")), "raw/env.txt")
}

// TestCheckScriptTestRows: the script's reading of go test -v output: a
// skip's reason is its last message, a failure's testify's Messages and
// Error or its first message, figures ("gpucheck:") are never a detail,
// and a test killed before its result is NONE.
func TestCheckScriptTestRows(t *testing.T) {
	const log = `=== RUN   TestA
=== RUN   TestA/sub
    x_test.go:10: nvidia-smi compute apps: []
    x_test.go:11: gpucheck: figure
    x_test.go:12: the real skip reason
=== RUN   TestA/dut
    x_test.go:20: pmon trace: none
    x_test.go:21: 
        \tError Trace:\t/x
        \tError:      \tMax difference between 25 and 50 allowed is 15
        \tTest:       \tTestA/dut
        \tMessages:   \tmean GPU_UTIL under duty
=== RUN   TestA/errf
    x_test.go:30: cycle 3: a ratio outside [0, 1]
    x_test.go:31: cycle 4: another
=== NAME  TestA/sub
    x_test.go:13: said later
=== RUN   TestB
    x_test.go:40: started
    x_test.go:41: still going
--- FAIL: TestA (0.00s)
    --- SKIP: TestA/sub (0.00s)
    --- FAIL: TestA/dut (0.00s)
    --- FAIL: TestA/errf (0.00s)
`
	dir := t.TempDir()
	logPath := filepath.Join(dir, "test.log")
	require.NoError(t, os.WriteFile(logPath, []byte(strings.ReplaceAll(log, `\t`, "\t")), 0o644))
	script := `source <(sed -n '/^test_rows() {/,/^}/p' "$1") && test_rows "$2"`
	out, err := exec.Command("bash", "-c", script, "bash", filepath.Join("..", "check-real-gpu.sh"), logPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "FAIL\tTestA\t\n"+
		"SKIP\tTestA/sub\tsaid later\n"+
		"FAIL\tTestA/dut\tmean GPU_UTIL under duty (Max difference between 25 and 50 allowed is 15)\n"+
		"FAIL\tTestA/errf\tcycle 3: a ratio outside [0, 1]\n"+
		"NONE\tTestB\tstill going\n", string(out))
}

// TestBuildGPUCheckSizeGuard: build-gpu-check.sh fails when the working
// tree and the built folder would carry more than the limit.
func TestBuildGPUCheckSizeGuard(t *testing.T) {
	for _, tool := range []string{"bash", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	if err := exec.Command("git", "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not in a git work tree")
	}
	dest := t.TempDir()
	blob := make([]byte, 3<<20)
	for i := range blob {
		blob[i] = byte(i*7919 ^ i>>8) // not compressible into nothing, not that it matters to du
	}
	require.NoError(t, os.WriteFile(filepath.Join(dest, "gpu.test.gz"), blob, 0o644))
	run := func(limit string) (int, string) {
		cmd := exec.Command("bash", filepath.Join("..", "build-gpu-check.sh"), "--check-size", dest)
		cmd.Env = append(os.Environ(), "GPUCHECK_CARRY_MAX_MIB="+limit)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			require.NoError(t, err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := run("1")
	require.Equal(t, 1, code, out)
	require.Regexp(t, `carry: the working tree [\d.]+ MiB \+ \S+ 3\.0 MiB = [\d.]+ MiB \(limit 1 MiB; the device tool takes 64\)`, out)
	require.Contains(t, out, "build-gpu-check.sh: the carry would be ")
	require.Contains(t, out, ", over 1 MiB: remove large untracked files")

	code, out = run("1000")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "over")

	code, out = run("60MiB")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "GPUCHECK_CARRY_MAX_MIB must be a whole number of MiB, got '60MiB'")
}

// TestScriptsLint: bash -n on every script, and shellcheck where it is
// installed.
func TestScriptsLint(t *testing.T) {
	scripts := []string{filepath.Join("..", "check-real-gpu.sh"), filepath.Join("..", "build-gpu-check.sh")}
	for _, s := range scripts {
		out, err := exec.Command("bash", "-n", s).CombinedOutput()
		require.NoError(t, err, "bash -n %s: %s", s, out)
	}
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Skip("no shellcheck (apt-get install shellcheck)")
	}
	out, err := exec.Command("shellcheck", scripts...).CombinedOutput()
	require.NoError(t, err, "shellcheck:\n%s", out)
}
