//go:build e2e

package e2e

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDemoKeepsApart is what a newcomer meets with `gpuscope serve --demo`
// in a directory of their own: the demo's series go to data-demo/, never
// to the data/ a real appliance started there later would use; the log
// names each GPU's scenario; the status page counts GPUs, targets and
// alerts; and at SIGTERM the demo's CPU burner and the cgroups it created
// are gone. Not parallel: the demo's cgroups have fixed names.
func TestDemoKeepsApart(t *testing.T) {
	// A demo killed with SIGKILL (here, or by a person) leaves its empty
	// cgroups behind, and a demo removes only the cgroups it created:
	// clear such leftovers first, so that this demo creates its own.
	// rmdir fails on a cgroup in use, which is then left alone and not
	// checked.
	leftover := false
	for _, controller := range []string{"cpu", "cpuacct", "memory", "pids", "unified"} {
		root := filepath.Join("/sys/fs/cgroup", controller, "gpuscope-demo")
		for _, d := range []string{filepath.Join(root, "input-bound"), root} {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				leftover = true
			}
		}
	}
	cwd := t.TempDir()
	port := freePort(t)
	args := []string{"serve", "--demo", "--web.listen-address=127.0.0.1:" + strconv.Itoa(port), "--node.name=e2e-demo"}
	cmd := exec.Command(binary, args...)
	cmd.Dir = cwd
	p := startCommand(t, cmd, args)
	p.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	p.waitReady(90 * time.Second)

	require.DirExists(t, filepath.Join(cwd, "data-demo"))
	require.NoDirExists(t, filepath.Join(cwd, "data"), "the demo writes nothing where a real appliance keeps its data")
	for gpu, scenario := range []string{"training", "training", "leak", "input-bound", "memory-bound", "thermal", "mig", "xid"} {
		require.Contains(t, p.out.String(), `msg="Demo GPU" gpu=`+strconv.Itoa(gpu)+" scenario="+scenario+" ")
	}

	eventually(t, 60*time.Second, "the status page counts the demo's GPUs and the built-in targets", func() error {
		_, body := p.get("/")
		for _, want := range []string{"8 on e2e-demo", "3 up, 0 down", "data-demo/", "api/dashboards"} {
			if !strings.Contains(body, want) {
				return &missingError{want: want, in: body}
			}
		}
		return nil
	})

	burning := !leftover && os.Geteuid() == 0 && strings.Contains(p.out.String(), "Burning CPU in the input-bound scenario's container")
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.wait(30*time.Second))
	if burning {
		for _, controller := range []string{"cpu", "cpu,cpuacct", "memory", "unified"} {
			require.NoDirExists(t, filepath.Join("/sys/fs/cgroup", controller, "gpuscope-demo", "input-bound"), "the demo removes the cgroups it created")
		}
	}
}

type missingError struct{ want, in string }

func (e *missingError) Error() string { return "missing " + strconv.Quote(e.want) + " in " + e.in }

// TestStopFreesPortAndLock is the README's quick start (build, then run
// the binary) stopped the two ways a person stops it: Ctrl-C (SIGINT) and
// SIGTERM. Either way the process exits 0 and leaves nothing holding the
// port or the data directory's lock: the same command starts again at
// once.
func TestStopFreesPortAndLock(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	port := freePort(t)
	args := []string{"serve", "--web.listen-address=127.0.0.1:" + strconv.Itoa(port), "--storage.tsdb.path=" + data, "--node.name=e2e-stop", "--gpu.backend=none"}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		p := start(t, args...)
		p.URL = "http://127.0.0.1:" + strconv.Itoa(port)
		p.waitReady(90 * time.Second)
		p.signal(sig)
		require.Equal(t, 0, p.wait(30*time.Second), "exit after %s", sig)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		require.NoError(t, err, "port free after %s", sig)
		require.NoError(t, l.Close())
	}
	// And the lock: a third start on the same directory is ready.
	p := start(t, args...)
	p.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	p.waitReady(90 * time.Second)
}

// TestHelpAndBareCommand: --help is asked for, so it goes to stdout with
// exit 0; a bare `gpuscope` says that it runs serve.
func TestHelpAndBareCommand(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "--help")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run())
	require.Contains(t, stdout.String(), "usage: gpuscope")
	require.Contains(t, stdout.String(), "check config")
	require.Empty(t, stderr.String())

	// It says so before it listens, so the test holds whatever happens
	// to be on :9089.
	bare := exec.Command(binary)
	bare.Dir = t.TempDir()
	p := startCommand(t, bare, nil)
	eventually(t, 30*time.Second, "bare gpuscope says what it does", func() error {
		if !strings.Contains(p.out.String(), "No command given: running `gpuscope serve`") {
			return &missingError{want: "No command given", in: p.out.String()}
		}
		return nil
	})
}
