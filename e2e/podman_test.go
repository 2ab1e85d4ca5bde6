//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestPodman runs a rootful Podman with private storage and its API
// service on a private socket, which gpuscope's cAdvisor reaches through
// cadvisor.podman_endpoint: a container started with `podman run --name`
// has series with its name as workload, runtime="podman" and its image
// within a few scrapes, carries the --cpus and --memory limits it was
// given, and its series go stale once it is removed. Its user is root, as
// it runs; a second container run with --user 1000 has user="alice", the
// name the configured passwd gives uid 1000. (Rootless Podman is not run:
// on this cgroup v1 machine without systemd a rootless container gets no
// cgroup of its own; its layout, below user@<uid>.service, is workload's
// TestResolve.)
func TestPodman(t *testing.T) {
	pkgtest.Require(t, true, "podman", "conmon", pkgtest.BusyboxPath)
	t.Parallel()
	pd := startPodman(t)
	img := "localhost/gpuscope-e2e/busybox:1"
	pd.run(t, pkgtest.BusyboxTar(t), "import", "--change", "ENV PATH=/bin", "--change", `CMD ["sh"]`, "-", img)
	p := serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), fastConfig+`
cadvisor:
  podman_endpoint: unix://`+pd.sock+`
workloads:
  passwd_file: `+passwdFixture(t)+`
`))

	// cAdvisor starts a few seconds after /-/ready; the time to the
	// container's labels is measured from a running cAdvisor.
	eventually(t, 60*time.Second, "cAdvisor's root cgroup series", func() error {
		v, err := p.instant(`container_cpu_usage_seconds_total{id="/"}`)
		if err == nil && len(v) == 0 {
			err = errors.New("none yet")
		}
		return err
	})

	name := fmt.Sprintf("gpuscope-e2e-podman-%d", rand.IntN(1e6))
	// --ulimit: Podman 4.3 gives a rootful container nofile and nproc
	// limits above the caller's, and runc sets them on its init process;
	// where root lacks CAP_SYS_RESOURCE (in a container or VM that drops
	// it; capsh --print shows cap_sys_resource-ep) the kernel refuses the
	// raise ("error setting rlimit type 7: operation not permitted").
	// Lower limits are always allowed.
	id := strings.TrimSpace(pd.run(t, nil, "run", "-d", "--name", name, "--network", "none",
		"--cpus", "0.5", "--memory", "32m", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096",
		img, "sh", "-c", "yes >/dev/null"))
	require.Regexp(t, `^[0-9a-f]{64}$`, id, "podman run -d printed no container id")
	started := time.Now()

	cpuQuery := fmt.Sprintf(`container_cpu_usage_seconds_total{workload=%q}`, name)
	// Typically 1 to 2 s (cAdvisor sees the cgroup, asks the API, scrape);
	// the margin is for a loaded machine, where a 1 s scrape of cAdvisor
	// can miss its timeout several times in a row.
	eventually(t, 30*time.Second, "the container's series with its name, runtime and image", func() error {
		v, err := p.instant(cpuQuery)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			byID, _ := p.instant(`count by (id, runtime, workload) (container_memory_usage_bytes{id=~".*libpod.*"})`)
			return fmt.Errorf("%s: %d series, want 1: %v; libpod cgroups: %v", cpuQuery, len(v), v, byID)
		}
		m := v[0].Metric
		for k, want := range map[model.LabelName]string{"runtime": "podman", "name": name, "image": img, "user": "root"} {
			if string(m[k]) != want {
				return fmt.Errorf("%s=%q, want %q (%v)", k, m[k], want, m)
			}
		}
		if !strings.HasSuffix(string(m["id"]), "/libpod-"+id) && !strings.HasSuffix(string(m["id"]), "/libpod-"+id+".scope") {
			return fmt.Errorf("id %q is not the cgroup of container %s", m["id"], id)
		}
		return nil
	})
	t.Logf("series labelled %s after the container started", time.Since(started).Round(100*time.Millisecond))

	// The limits podman run was given are the cgroup's: 0.5 CPU as CFS
	// quota over period, 32 MiB of memory.
	for q, want := range map[string]float64{
		fmt.Sprintf(`container_spec_cpu_quota{workload=%q} / container_spec_cpu_period{workload=%q}`, name, name): 0.5,
		fmt.Sprintf(`container_spec_memory_limit_bytes{workload=%q}`, name):                                       32 << 20,
	} {
		v, err := p.instant(q)
		require.NoError(t, err, q)
		require.Len(t, v, 1, q)
		require.InDelta(t, want, float64(v[0].Value), 1e-9, q)
	}

	// Run as uid 1000: its processes are alice's on the host.
	userName := name + "-user"
	pd.run(t, nil, "run", "-d", "--name", userName, "--network", "none", "--user", "1000:1000",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", img, "sleep", "3600")
	eventually(t, 45*time.Second, "the --user container's series with user alice", func() error {
		q := fmt.Sprintf(`container_memory_usage_bytes{workload=%q}`, userName)
		v, err := p.instant(q)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Metric["user"] != "alice" || v[0].Metric["runtime"] != "podman" {
			return fmt.Errorf("%s: %v, want one series with user alice", q, v)
		}
		return nil
	})

	// cAdvisor's series (container_*) go stale; those the rules record
	// over 1- and 5-minute windows keep the workload until their windows
	// have passed, as in Prometheus.
	pd.run(t, nil, "rm", "-f", "-t", "0", name)
	eventually(t, 30*time.Second, "the removed container's series stale", func() error {
		v, err := p.instant(fmt.Sprintf(`{__name__=~"container_.*", workload=%q}`, name))
		if err != nil {
			return err
		}
		if len(v) != 0 {
			return fmt.Errorf("%d series still at now, e.g. %v", len(v), v[0].Metric)
		}
		return nil
	})
}

// podman is a rootful Podman with storage, run state and events in a
// private directory, and its API service on a private socket.
type podman struct {
	dir  string
	sock string
	args []string // global flags of every podman command
}

// startPodman starts `podman system service` on a private socket. At
// cleanup it removes every container of its storage, stops the service,
// unmounts what is left mounted below its directory, removes the
// directory, the cgroupfs parent cgroups (libpod_parent) and the global
// directories Podman made.
func startPodman(t *testing.T) *podman {
	t.Helper()
	// Not t.TempDir: removed only once nothing is mounted below it.
	dir, err := os.MkdirTemp("", "gpuscope-podman")
	require.NoError(t, err)
	pd := &podman{dir: dir, sock: filepath.Join(dir, "podman.sock"), args: []string{
		"--root=" + filepath.Join(dir, "root"),
		"--runroot=" + filepath.Join(dir, "run"),
		"--tmpdir=" + filepath.Join(dir, "tmp"),
		"--network-config-dir=" + filepath.Join(dir, "networks"),
		// No systemd here (nor in CI's containers): cgroupfs, and events
		// in a file instead of the journal.
		"--cgroup-manager=cgroupfs",
		"--events-backend=file",
	}}
	before := existingCgroups("libpod_parent")
	// What Podman writes outside its flags' reach, to remove if it is new:
	// image copies' blob cache and netavark's run directory.
	var globals []string
	for _, g := range []string{"/var/lib/containers", "/run/containers"} {
		if _, err := os.Stat(g); errors.Is(err, fs.ErrNotExist) {
			globals = append(globals, g)
		}
	}
	t.Cleanup(func() {
		// conmon runs `podman container cleanup` when a container ends,
		// after the service has stopped; while one runs, the storage's
		// mounts are busy (a run failed to remove root/overlay: "device or
		// resource busy").
		if left := waitProcessesUsing(dir, 30*time.Second); len(left) > 0 {
			t.Logf("still running after 30 s, with %s in their command lines: %v", dir, left)
		}
		if mounts := pkgtest.MountsBelow(t, dir); len(mounts) > 0 {
			for _, m := range mounts {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
			if mounts = pkgtest.MountsBelow(t, dir); len(mounts) > 0 {
				t.Errorf("left %s in place: still mounted below it: %v", dir, mounts)
				return
			}
		}
		// conmon, which outlives podman's commands by a moment, may
		// still be writing below libpod/ ("directory not empty").
		err := os.RemoveAll(dir)
		for try := 0; err != nil && try < 40; try++ {
			time.Sleep(250 * time.Millisecond)
			err = os.RemoveAll(dir)
		}
		if err != nil {
			t.Errorf("remove podman's directory: %v", err)
		}
		for _, g := range globals {
			_ = os.RemoveAll(g)
		}
		for _, top := range existingCgroups("libpod_parent") {
			if !slices.Contains(before, top) {
				removeEmptyCgroups(t, top)
			}
		}
	})

	log := &pkgtest.SyncBuffer{}
	cmd := exec.Command("podman", append(slices.Clone(pd.args), "system", "service", "--time=0", "unix://"+pd.sock)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		if ids, _, err := pd.output(nil, "ps", "-aq"); err == nil && strings.TrimSpace(ids) != "" {
			if out, errOut, err := pd.output(nil, append([]string{"rm", "-f", "-t", "0"}, strings.Fields(ids)...)...); err != nil {
				t.Errorf("remove podman's containers: %v\n%s%s", err, out, errOut)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("podman system service output:\n%s", log)
		}
	})
	eventually(t, 60*time.Second, "podman's API socket answers", func() error {
		select {
		case <-done:
			t.Fatalf("podman system service exited at start:\n%s", log)
		default:
		}
		c, err := net.Dial("unix", pd.sock)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return pd
}

// waitProcessesUsing waits up to timeout until no process has dir in its
// command line (conmon, podman) or as its root (a container's, in a
// mount namespace that holds dir's mounts), and returns those that still
// do.
func waitProcessesUsing(dir string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var using []string
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, proc := range procs {
			cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
			if err != nil {
				continue // gone
			}
			root, _ := os.Readlink(filepath.Join(proc, "root"))
			if bytes.Contains(cmdline, []byte(dir)) || strings.HasPrefix(root, dir+"/") {
				using = append(using, strings.Join(strings.Fields(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))), " "))
			}
		}
		if len(using) == 0 || time.Now().After(deadline) {
			return using
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// output runs podman with the private flags; stdin, when not nil, is its
// input.
func (pd *podman) output(stdin []byte, args ...string) (stdout, stderr string, err error) {
	return pkgtest.Cmd{Timeout: 2 * time.Minute, Stdin: stdin}.Output("podman", append(slices.Clone(pd.args), args...)...)
}

// run is output that fails the test on an error.
func (pd *podman) run(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	out, errOut, err := pd.output(stdin, args...)
	require.NoError(t, err, "podman %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, errOut)
	return out
}

// existingCgroups lists the directories matching pattern at the top of
// every cgroup hierarchy: /sys/fs/cgroup/<controller>/<pattern> on cgroup
// v1, /sys/fs/cgroup/<pattern> on v2.
func existingCgroups(pattern string) []string {
	v1, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", pattern))
	v2, _ := filepath.Glob(filepath.Join(cgroupRoot, pattern))
	var out []string
	for _, d := range append(v1, v2...) {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// removeEmptyCgroups removes top and the directories below it, deepest
// first; a cgroup that still holds a process is an error.
func removeEmptyCgroups(t *testing.T, top string) {
	t.Helper()
	var dirs []string
	_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	// WalkDir lists a parent before its children.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("remove cgroup %s: %v", dirs[i], err)
		}
	}
}
