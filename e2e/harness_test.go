// Package e2e builds the gpuscope binary and tests it from the outside, the
// way users and Grafana meet it: as a process with flags, a config file, a
// data directory and an HTTP API.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
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
	dir, err := os.MkdirTemp("", "gpuscope-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "gpuscope")
	// Without the symbol table and DWARF, which no test reads: a quarter
	// less work for the linker.
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", binary, "..")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	// go-nvml's header marks some NVML calls deprecated; the warnings
	// are noise. -O2 -g are cgo's defaults, which CGO_CFLAGS replaces.
	build.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build gpuscope:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// process is a running gpuscope.
type process struct {
	t       *testing.T
	cmd     *exec.Cmd
	URL     string
	DataDir string
	out     *syncBuffer
	exited  chan struct{}
	exitErr error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logOutput logs what a process printed, for a failed test: its first
// and last lines, a run of lines that differ only in their time= stamp
// (cAdvisor's "closed pipe" warning at each cut scrape) written once with
// its count, and the whole output in a file in the temporary directory.
// CI's record keeps the head and tail of the run's output; whole dumps
// pushed the failing assertions of the tests after the first out of it.
func logOutput(t *testing.T, what, out string) {
	t.Helper()
	const head, tail = 10, 20
	var lines []string
	var last string
	repeats := 0
	flush := func() {
		if repeats > 0 {
			lines = append(lines, fmt.Sprintf("[the line above %d more times]", repeats))
			repeats = 0
		}
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		msg := timeStamp.ReplaceAllString(line, "")
		if msg == last && len(lines) > 0 {
			repeats++
			continue
		}
		flush()
		lines, last = append(lines, line), msg
	}
	flush()
	program, _, _ := strings.Cut(what, " ")
	file, err := writeTemp(strings.ReplaceAll(t.Name(), "/", "_")+"-"+program+"-*.log", out)
	if err != nil {
		file = fmt.Sprintf("not written: %v", err)
	}
	if len(lines) > head+tail {
		left := fmt.Sprintf("[%d lines left out; the whole output: %s]", len(lines)-head-tail, file)
		lines = append(append(lines[:head:head], left), lines[len(lines)-tail:]...)
	}
	t.Logf("%s output:\n%s", what, strings.Join(lines, "\n"))
}

// writeTemp writes content to a new file named after pattern (as
// os.CreateTemp) in the temporary directory and returns its path.
func writeTemp(pattern, content string) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(content)
	return f.Name(), errors.Join(err, f.Close())
}

// timeStamp is slog's time attribute at the start of a log line.
var timeStamp = regexp.MustCompile(`^time=\S+ `)

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
func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "gpuscope.yml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

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
	p := &process{t: t, cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
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

// api is a Prometheus API client for the process, as Grafana would use it.
func (p *process) api() promv1.API {
	p.t.Helper()
	c, err := api.NewClient(api.Config{Address: p.URL})
	require.NoError(p.t, err)
	return promv1.NewAPI(c)
}

// eventually polls f until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s: %v", what, timeout, err)
}

// instant runs an instant query and returns its vector.
func (p *process) instant(q string) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _, _, err := p.api().Query(ctx, q, time.Now())
	if err != nil {
		return nil, err
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("%s: result is %s, not a vector", q, v.Type())
	}
	return vec, nil
}

// get fetches a URL path of the process and returns status and body.
func (p *process) get(path string) (int, string) {
	p.t.Helper()
	resp, err := http.Get(p.URL + path)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	return resp.StatusCode, string(b)
}

// post sends a form-encoded body to path (with its own query string, if
// any) as Grafana does.
func (p *process) post(path, form string) (int, string) {
	p.t.Helper()
	resp, err := http.Post(p.URL+path, "application/x-www-form-urlencoded", strings.NewReader(form))
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	return resp.StatusCode, string(b)
}
