//go:build e2e

package e2e

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// binary is the gpuscope executable built once for the whole package.
var binary string

// defaultParallel is how many tests marked t.Parallel run at once when
// the command line does not say (go test's default is GOMAXPROCS). They
// wait on scrape and rule intervals more than on the CPU; the tests that
// measure CPU rates or scrape punctuality stay serial and run first,
// alone. On 2 cores, 6 took the package from about 560 s to about 320 s;
// all of them at once (32) was slower (370 s), as every gpuscope's
// cAdvisor walks every cgroup on the host each second, and scrapes began
// to miss their timeouts.
const defaultParallel = "6"

func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", defaultParallel); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// scripts/test builds the binary and the neighbour tools once for all
	// its tiers: $GPUSCOPE_TEST_BIN is their directory, kept; without it
	// each run builds into a directory of its own.
	dir, keep := os.Getenv(testBinEnv), true
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gpuscope-e2e-bin"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		keep = false
	}
	binary = filepath.Join(dir, "gpuscope")
	if _, err := os.Stat(binary); keep && err == nil {
		// Built by an earlier tier of this scripts/test run.
	} else if err := buildBinary(binary); err != nil {
		fmt.Fprintln(os.Stderr, "build gpuscope:", err)
		os.Exit(1)
	}
	code := m.Run()
	if !keep {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// testBinEnv names the directory scripts/test builds the test programs
// into once per run.
const testBinEnv = "GPUSCOPE_TEST_BIN"

// buildBinary builds gpuscope at path.
func buildBinary(path string) error {
	// Without the symbol table and DWARF, which no test reads: a quarter
	// less work for the linker.
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", path, "..")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	// go-nvml's header marks some NVML calls deprecated; the warnings
	// are noise. -O2 -g are cgo's defaults, which CGO_CFLAGS replaces.
	build.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	return build.Run()
}

// process is a running gpuscope.
type process struct {
	t       *testing.T
	cmd     *exec.Cmd
	URL     string
	DataDir string
	out     *pkgtest.SyncBuffer
	exited  chan struct{}
	exitErr error
}

// logOutput logs what a process printed, for a failed test
// (apptest.LogOutput).
var logOutput = apptest.LogOutput

// ports are the ports freePort handed out: the kernel may give a port
// freed by one test to the next, and tests running in parallel must not
// start two servers on one port (nor one on a port another test keeps
// free on purpose).
var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// freePort returns a loopback port nothing listens on, never the same one
// twice in a run.
func freePort(t *testing.T) int {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		require.NoError(t, l.Close())
		if !ports.given[port] {
			ports.given[port] = true
			return port
		}
	}
}

// writeConfig writes a config file into dir and returns its path.
var writeConfig = apptest.WriteConfig

// start runs the binary with args and returns at once; the process is
// killed at cleanup if still running.
func start(t *testing.T, args ...string) *process {
	t.Helper()
	return startCommand(t, exec.Command(binary, args...), args)
}

// startCommand is start for a command that runs gpuscope with args
// behind a wrapper (a shell that first joins a cgroup).
func startCommand(t *testing.T, cmd *exec.Cmd, args []string) *process {
	t.Helper()
	p := &process{t: t, cmd: cmd, out: &pkgtest.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		// SIGTERM first, so gpuscope removes what it created (the sim's
		// CPU-burner cgroups); SIGKILL if it does not stop in time.
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			logOutput(t, fmt.Sprintf("gpuscope %v", args), p.out.String())
		}
	})
	return p
}

// serve starts `gpuscope serve` on a free port with dataDir (created if
// empty) and waits until /-/ready answers 200.
func serve(t *testing.T, dataDir string, args ...string) *process {
	t.Helper()
	return serveWith(t, dataDir, func(all []string) *process { return start(t, all...) }, args)
}

// serveWith is serve with the process started by run, given serve's
// whole argument list.
func serveWith(t *testing.T, dataDir string, run func(all []string) *process, args []string) *process {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	port := freePort(t)
	all := append([]string{"serve",
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(port),
		"--storage.tsdb.path=" + dataDir,
		"--node.name=e2e-node",
	}, args...)
	p := run(all)
	p.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	p.DataDir = dataDir
	p.waitReady(90 * time.Second)
	return p
}

func (p *process) waitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			p.t.Fatalf("gpuscope exited before ready: %v\n%s", p.exitErr, p.out.String())
		default:
		}
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("gpuscope not ready after %s\n%s", timeout, p.out.String())
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("gpuscope did not exit within %s\n%s", timeout, p.out.String())
	}
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) {
		return ee.ExitCode()
	}
	require.NoError(p.t, p.exitErr)
	return 0
}

func (p *process) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
}

// client asks the process as Grafana and people do.
func (p *process) client() apptest.Client { return apptest.Client{T: p.t, URL: p.URL} }

func (p *process) api() promv1.API                        { return p.client().API() }
func (p *process) instant(q string) (model.Vector, error) { return p.client().Instant(q) }
func (p *process) queryAt(q string, ts time.Time) (model.Vector, error) {
	return p.client().QueryAt(q, ts)
}
func (p *process) get(path string) (int, string)        { return p.client().Get(path) }
func (p *process) post(path, form string) (int, string) { return p.client().Post(path, form) }

func apiFiring(p *process, alertname, gpu string) error { return p.client().Firing(alertname, gpu) }

// eventually polls f until it returns nil or timeout passes.
var eventually = apptest.Eventually

// The cgroups tests make, and the CPU weight that lets a burner have its
// CPU on a busy machine (apptest's).
var (
	newCgroup          = apptest.NewCgroup
	favourCPU          = apptest.FavourCPU
	favourContainerCPU = apptest.FavourContainerCPU
)

const cgroupRoot = apptest.CgroupRoot

// agentConfig is what the test agents run (apptest's).
const agentConfig = apptest.AgentConfig

// startAgent runs `gpuscope agent` with simulated GPUs on a free loopback
// port and waits until it is ready.
func startAgent(t *testing.T, name, cfg string) *process {
	t.Helper()
	port := freePort(t)
	p := start(t, "agent",
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		"--config.file="+cfg,
		"--gpu.backend=sim",
		"--node.name="+name,
	)
	p.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	p.waitReady(60 * time.Second)
	return p
}

func (p *process) addr() string { return strings.TrimPrefix(p.URL, "http://") }
