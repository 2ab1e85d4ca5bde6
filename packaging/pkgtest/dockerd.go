package pkgtest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// DockerdOptions configures StartDockerd.
type DockerdOptions struct {
	// Background runs dockerd at nice 10, inherited by containerd, and
	// its containers (builds in them) under a cgroup of a low CPU weight:
	// throughput work that other packages' tests running beside it must
	// not starve. Tests that measure a container's CPU use leave it false.
	Background bool
	// StartTimeout bounds the wait for the daemon to answer; 2 minutes
	// when zero.
	StartTimeout time.Duration
}

// Dockerd is a dockerd started by the test with its own socket, data and
// state directories, no bridge and no iptables rules: it changes nothing
// on the machine and does not meet a daemon that may already run there.
// Its containers have no network but their own (run them with
// --network none, or host).
type Dockerd struct {
	// Dir holds the socket, data-root and exec-root; removed at cleanup.
	Dir string
	// Sock is the path of the daemon's API socket.
	Sock string
	// CLI is the docker client's path.
	CLI string
}

// Host is the daemon's address as DOCKER_HOST and cAdvisor take it.
func (d *Dockerd) Host() string { return "unix://" + d.Sock }

// Env is what a docker or docker-compose client needs in its environment
// to talk to this daemon.
func (d *Dockerd) Env() []string { return []string{"DOCKER_HOST=" + d.Host()} }

// Run runs the docker client against the daemon and returns its standard
// output; on failure the test fails with all its output.
func (d *Dockerd) Run(t testing.TB, args ...string) string {
	t.Helper()
	return Run(t, Cmd{Env: d.Env(), Timeout: 10 * time.Minute}, d.CLI, args...)
}

// Output runs the docker client against the daemon for a test that
// expects it may fail.
func (d *Dockerd) Output(args ...string) (stdout, stderr string, err error) {
	return Cmd{Env: d.Env(), Timeout: time.Minute}.Output(d.CLI, args...)
}

// ImportRoot makes an image called name of a root file system directory.
func (d *Dockerd) ImportRoot(t testing.TB, root, name string, importArgs ...string) {
	t.Helper()
	tarCmd := exec.Command("tar", "-C", root, "-c", ".")
	imp := exec.Command(d.CLI, append(append([]string{"import"}, importArgs...), "-", name)...)
	imp.Env = append(os.Environ(), d.Env()...)
	pipe, err := tarCmd.StdoutPipe()
	require.NoError(t, err)
	imp.Stdin = pipe
	var tarErr, impOut SyncBuffer
	tarCmd.Stderr = &tarErr
	imp.Stdout, imp.Stderr = &impOut, &impOut
	require.NoError(t, tarCmd.Start())
	require.NoError(t, imp.Run(), "docker import %s: %s", name, impOut.String())
	require.NoError(t, tarCmd.Wait(), "tar %s: %s", root, tarErr.String())
}

// BusyboxPath is Debian's busybox-static, the one binary of the tests'
// offline images.
const BusyboxPath = "/usr/bin/busybox"

// BusyboxImage makes an image called name, offline, of nothing but
// Debian's static busybox as /bin/busybox and a /bin/<applet> symlink for
// every applet it has (sh, sleep, yes, dd, head, cat, ...), like
// `FROM scratch` + COPY, and returns name. Its command is sh; PATH is /bin.
func (d *Dockerd) BusyboxImage(t testing.TB, name string) string {
	t.Helper()
	tarball := BusyboxTar(t)
	out, errOut, err := Cmd{Env: d.Env(), Timeout: 2 * time.Minute, Stdin: tarball}.Output(d.CLI, "import",
		"--change", "ENV PATH=/bin", "--change", `CMD ["sh"]`, "-", name)
	require.NoError(t, err, "docker import %s:\nstdout:\n%s\nstderr:\n%s", name, out, errOut)
	return name
}

// BusyboxTar is the root file system of BusyboxImage as a tar archive,
// for `docker import` and `podman import`.
func BusyboxTar(t testing.TB) []byte {
	t.Helper()
	Require(t, false, BusyboxPath)
	bin, err := os.ReadFile(BusyboxPath)
	require.NoError(t, err)
	// A dynamically linked busybox would need a libc the image lacks.
	exe, err := elf.NewFile(bytes.NewReader(bin))
	require.NoError(t, err, "%s", BusyboxPath)
	for _, p := range exe.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked: install busybox-static", BusyboxPath)
	}
	list := Run(t, Cmd{}, BusyboxPath, "--list")

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755, ModTime: now}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: now}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin)), ModTime: now}))
	_, err = tw.Write(bin)
	require.NoError(t, err)
	applets := 0
	for _, applet := range strings.Fields(list) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}))
		applets++
	}
	require.NoError(t, tw.Close())
	require.Positive(t, applets, "%s --list names no applets", BusyboxPath)
	return buf.Bytes()
}

// StartDockerd starts a private dockerd and waits until it answers. At
// cleanup it removes every container the daemon has (whoever started it),
// stops the daemon, unmounts what it left mounted below its directory and
// removes the directory.
func StartDockerd(t testing.TB, opts DockerdOptions) *Dockerd {
	t.Helper()
	Require(t, true, "dockerd", "docker")
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	// Not t.TempDir: the directory is removed only once the daemon is gone
	// and nothing is mounted below it (its overlay mounts).
	dir, err := os.MkdirTemp("", "gpuscope-dockerd")
	require.NoError(t, err)
	cli, err := exec.LookPath("docker")
	require.NoError(t, err)
	d := &Dockerd{Dir: dir, Sock: filepath.Join(dir, "docker.sock"), CLI: cli}
	newParents := missingCgroupParents()
	log := &SyncBuffer{}
	args := []string{"dockerd",
		"--host=" + d.Host(),
		"--data-root=" + filepath.Join(dir, "data"),
		"--exec-root=" + filepath.Join(dir, "exec"),
		"--pidfile=" + filepath.Join(dir, "docker.pid"),
		"--bridge=none", "--iptables=false", "--ip-masq=false"}
	background := ""
	if opts.Background {
		args = append([]string{"nice", "-n", "10"}, args...)
		background = filepath.Base(dir) + "-background"
		if err := makeBackgroundCgroup(background); err != nil {
			t.Logf("containers at the default CPU weight: %v", err)
			background = ""
		} else {
			args = append(args, "--cgroup-parent=/"+background)
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	// If go test kills this binary (timeout), no cleanup runs: dockerd gets
	// SIGTERM from the kernel and stops its containers itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		// Containers first (all of them: the test's, compose's, those of a
		// test that failed half way), then the daemon, then its directory.
		if ids, _, err := d.Output("ps", "-aq"); err == nil && strings.TrimSpace(ids) != "" {
			if out, errOut, err := d.Output(append([]string{"rm", "-f", "-v"}, strings.Fields(ids)...)...); err != nil {
				t.Errorf("remove the daemon's containers: %v\n%s%s", err, out, errOut)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("dockerd log:\n%s", log.String())
		}
		// The cgroupfs driver's parent cgroups, if this daemon made them;
		// rmdir fails on one that another daemon's container still uses.
		for _, p := range newParents {
			_ = syscall.Rmdir(p)
		}
		if background != "" {
			made, _ := filepath.Glob("/sys/fs/cgroup/*/" + background)
			for _, p := range made {
				_ = syscall.Rmdir(p)
			}
		}
		if mounts := MountsBelow(t, dir); len(mounts) > 0 {
			for _, m := range mounts {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
			if mounts = MountsBelow(t, dir); len(mounts) > 0 {
				t.Errorf("left %s in place: still mounted below it: %v", dir, mounts)
				return
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the daemon's directory: %v", err)
		}
	})

	deadline := time.Now().Add(opts.StartTimeout)
	for {
		_, _, err := Cmd{Env: d.Env(), Timeout: 10 * time.Second}.Output(cli, "version")
		if err == nil {
			return d
		}
		select {
		case err := <-done:
			// Say exactly why, so the report can say why nothing ran.
			t.Fatalf("dockerd exited at start: %v\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd not answering after %s: %v\n%s", opts.StartTimeout, err, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// backgroundShares is background containers' CPU weight (cgroup v1
// cpu.shares): a quarter of a default cgroup's.
const backgroundShares = "256"

// makeBackgroundCgroup makes the cgroup name at the top of the cgroup v1
// cpu hierarchy with a low CPU weight, for a daemon's --cgroup-parent
// (the cgroupfs driver makes it in the other hierarchies). Only on
// cgroup v1, where it was tried (these machines); elsewhere it says why
// not.
//
// Nice alone does not hold a container back: the kernel weighs each
// cgroup, and each session's autogroup, as one, so a container's build at
// nice 10 weighed as much as all of go test's other packages together
// (measured: its compiler took 93% of a core while e2e's thirty processes
// shared the rest, a load of 38 on two cores, and a process went
// unscheduled for 9 s).
func makeBackgroundCgroup(name string) error {
	hierarchy := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(hierarchy, "cpu.shares")); err != nil {
		return fmt.Errorf("no cgroup v1 cpu hierarchy: %w", err)
	}
	dir := filepath.Join(hierarchy, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("make cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(backgroundShares), 0o644); err != nil {
		_ = syscall.Rmdir(dir)
		return fmt.Errorf("set cpu.shares of %s: %w", dir, err)
	}
	return nil
}

// missingCgroupParents lists the cgroups a dockerd with the cgroupfs driver
// puts its containers under (/docker in each cgroup v1 hierarchy, or in
// the v2 one) that do not exist yet.
func missingCgroupParents() []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	dirs = append(dirs, "/sys/fs/cgroup/cgroup.procs")
	var out []string
	for _, procs := range dirs {
		if _, err := os.Stat(procs); err != nil {
			continue
		}
		p := filepath.Join(filepath.Dir(procs), "docker")
		if _, err := os.Stat(p); os.IsNotExist(err) {
			out = append(out, p)
		}
	}
	return out
}

// MountsBelow lists the mount points at or under dir.
func MountsBelow(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	require.NoError(t, s.Err(), "read /proc/self/mountinfo")
	return out
}

// Inspect returns one field of a container or image through docker
// inspect's --format template, e.g. "{{.State.Pid}}".
func (d *Dockerd) Inspect(t testing.TB, object, format string) string {
	t.Helper()
	return strings.TrimSpace(d.Run(t, "inspect", "--format", format, object))
}
