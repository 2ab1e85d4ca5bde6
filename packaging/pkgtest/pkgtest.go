// Package pkgtest holds what gpuscope's packaging tests share: the rule for
// missing tools (skip on a workstation, fail in CI), running commands with
// their output in the failure message, and a Debian root file system made
// with debootstrap, for installing packages and building images without
// touching the machine the tests run on.
package pkgtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// DebianMirror is where debootstrap fetches packages from;
// $GPUSCOPE_DEBIAN_MIRROR overrides it.
const DebianMirror = "http://deb.debian.org/debian"

// Suite is the Debian release of the test root file systems: the one the
// release binary is built on, so its glibc matches.
const Suite = "bookworm"

// InCI reports whether the tests run in CI (.ci/run sets CI=true). There a
// missing tool is a broken CI machine, not a reason to skip.
func InCI() bool {
	return os.Getenv("CI") == "true"
}

// Require skips the test, or fails it in CI, unless it runs as root (when
// root is true) and every tool is on PATH.
func Require(t testing.TB, root bool, tools ...string) {
	t.Helper()
	var missing []string
	if root && os.Geteuid() != 0 {
		missing = append(missing, "root (installs packages into a chroot, runs a Docker daemon)")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" (not on PATH)")
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "needs " + strings.Join(missing, ", ")
	if InCI() {
		t.Fatal(msg + "; CI=true, so this is a failure: .ci/run installs the tools and runs as root")
	}
	t.Skip(msg)
}

// RepoRoot is the root of the gpuscope checkout the test runs in.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "packaging", "build.sh")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no gpuscope checkout above the test's directory")
		dir = parent
	}
}

// Cmd describes one command to run.
type Cmd struct {
	Dir     string
	Env     []string // added to the test's environment
	Timeout time.Duration
	Stdin   []byte
	// Background runs the command at nice 10: builds and debootstrap are
	// throughput work, and other packages' tests running beside them
	// (e2e's timing checks) must not starve.
	Background bool
}

// Run runs name with args and returns its standard output; on failure the
// test fails with the command, its exit status and all its output.
func Run(t testing.TB, c Cmd, name string, args ...string) string {
	t.Helper()
	out, errOut, err := c.Output(name, args...)
	require.NoError(t, err, "%s %s\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), out, errOut)
	return out
}

// Output runs the command and returns its standard output and error
// separately, for tests that expect a failure.
func (c Cmd) Output(name string, args ...string) (stdout, stderr string, err error) {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	if c.Background {
		name, args = "nice", append([]string{"-n", "10", name}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	// A test binary killed by go test's -timeout runs no cleanup: take the
	// command down with it rather than leave it running on the machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), c.Env...)
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (killed after %s)", err, c.Timeout)
	}
	return o.String(), e.String(), err
}

// Debootstrap creates a minimal Debian (variant minbase, plus include)
// under a new directory of the test's temporary dir and returns it. Nothing
// is mounted into it, so removing it can never reach the host.
func Debootstrap(t testing.TB, include ...string) string {
	t.Helper()
	return StartDebootstrap(t, include...)()
}

// StartDebootstrap starts Debootstrap's work in the background, so it
// downloads while the test does something else, and returns a function
// that waits for it and returns the root.
func StartDebootstrap(t testing.TB, include ...string) func() string {
	t.Helper()
	Require(t, true, "debootstrap")
	dir := filepath.Join(t.TempDir(), "rootfs")
	mirror := os.Getenv("GPUSCOPE_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = DebianMirror
	}
	args := []string{"--variant=minbase"}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	args = append(args, Suite, dir, mirror)
	type result struct {
		out, errOut string
		err         error
		took        time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		out, errOut, err := Cmd{Timeout: 15 * time.Minute, Background: true}.Output("debootstrap", args...)
		done <- result{out, errOut, err, time.Since(start)}
	}()
	// A test that fails before waiting must not leave debootstrap writing
	// into a directory that is being removed.
	waited := false
	var r result
	wait := func() result {
		if !waited {
			r, waited = <-done, true
		}
		return r
	}
	t.Cleanup(func() { wait() })
	return func() string {
		t.Helper()
		r := wait()
		require.NoError(t, r.err, "debootstrap %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.out, r.errOut)
		t.Logf("debootstrap %s %v: %s", Suite, include, r.took.Round(time.Second))
		RefuseMounts(t, dir)
		return dir
	}
}

// RefuseMounts fails the test if anything is mounted at or below dir: the
// tests never mount into their root file systems, and a mount there would
// make removing the directory remove host files.
func RefuseMounts(t testing.TB, dir string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		if mp := fields[4]; mp == dir || strings.HasPrefix(mp, dir+"/") {
			t.Fatalf("%s is mounted inside the test root %s; unmount it before the test's temporary directory is removed", mp, dir)
		}
	}
	require.NoError(t, s.Err())
}

// RequireTime skips the test, or fails it in CI, when go test's -timeout
// leaves less than need: a test killed by the timeout runs no cleanup.
func RequireTime(t testing.TB, need time.Duration) {
	t.Helper()
	tt, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return
	}
	deadline, ok := tt.Deadline()
	if !ok || time.Until(deadline) >= need {
		return
	}
	msg := fmt.Sprintf("needs up to %s and go test's -timeout leaves %s: run it with -timeout 30m, as .ci/run does",
		need, time.Until(deadline).Round(time.Second))
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// SyncBuffer collects a process's output while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Chroot runs a command inside root.
func Chroot(t testing.TB, root string, name string, args ...string) string {
	t.Helper()
	return Run(t, Cmd{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive"}},
		"chroot", append([]string{root, name}, args...)...)
}

// FreePort is a TCP port free on the loopback interface now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// WaitReady polls url/-/ready until it answers 200. exited, when not nil,
// is closed if the process under test ends, which ends the wait at once.
func WaitReady(t testing.TB, url string, timeout time.Duration, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("gpuscope exited before %s/-/ready answered", url)
		default:
		}
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s/-/ready not 200 after %s: %s", url, timeout, last)
}

// Get fetches url, requires 200 and returns the body.
func Get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, b)
	return string(b)
}
