package doctor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

// unixSocket listens on a fresh socket; serve decides what happens to
// connections: nil serves an HTTP API that answers /_ping, "silent"
// accepts and says nothing, "closed" leaves a socket file nobody listens
// on.
func unixSocket(t *testing.T, mode string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dr") // short: socket paths are limited to 108 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	switch mode {
	case "http":
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("OK")) })}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	case "silent":
		done := make(chan struct{})
		go func() {
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for {
				c, err := l.Accept()
				if err != nil {
					close(done)
					return
				}
				conns = append(conns, c)
			}
		}()
		t.Cleanup(func() { l.Close(); <-done })
	case "closed":
		// Closing a unix listener removes its file; keep one behind.
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
	}
	return path
}

func TestRuntimeChecks(t *testing.T) {
	installed := func(string) (string, error) { return "/usr/bin/x", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	for _, tc := range []struct {
		name     string
		socket   string // http, silent, closed or "" for none
		endpoint func(path string) string
		lookPath func(string) (string, error)
		status   string
		summary  string
	}{
		{"answers", "http", func(p string) string { return "unix://" + p }, missing, StatusOK, "answers at unix://"},
		{"absent, not installed", "", func(p string) string { return "unix://" + p }, missing, StatusOK, "not installed (no socket at unix://"},
		{"absent, installed", "", func(p string) string { return "unix://" + p }, installed, StatusWarn, "/usr/bin/x is installed but unix://"},
		{"refused", "closed", func(p string) string { return "unix://" + p }, installed, StatusWarn, "refuses connections (the daemon is stopped)"},
		{"silent", "silent", func(p string) string { return "unix://" + p }, installed, StatusWarn, "accepts connections but does not answer"},
		{"off", "", func(string) string { return "" }, installed, StatusOK, "off (cadvisor.docker_endpoint is empty)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "absent.sock")
			if tc.socket != "" {
				path = unixSocket(t, tc.socket)
			}
			cfg := config.Default(nil)
			cfg.Cadvisor.DockerEndpoint = tc.endpoint(path)
			cfg.Cadvisor.PodmanEndpoint = ""
			cfg.Cadvisor.ContainerdEndpoint = ""
			o := Options{Config: cfg, LookPath: tc.lookPath, Timeout: 300 * time.Millisecond, CgroupRoot: t.TempDir()}.withDefaults()
			checks := runtimeChecks(context.Background(), &o)
			require.Len(t, checks, 4)
			c := checks[0]
			require.Equal(t, "docker", c.Name)
			require.Equal(t, tc.status, c.Status, c.Summary)
			require.Contains(t, c.Summary, tc.summary)
			if c.Status != StatusOK {
				require.NotEmpty(t, c.Hint)
			}
			require.Equal(t, "podman", checks[1].Name)
			require.Equal(t, "containerd", checks[2].Name)
			require.Equal(t, "slurm", checks[3].Name)
		})
	}
}

func TestContainerdSocket(t *testing.T) {
	for _, tc := range []struct {
		name, socket, status, summary string
	}{
		{"listening", "http", StatusOK, "answers at "},
		{"refused", "closed", StatusWarn, "refuses connections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default(nil)
			cfg.Cadvisor.DockerEndpoint, cfg.Cadvisor.PodmanEndpoint = "", ""
			cfg.Cadvisor.ContainerdEndpoint = unixSocket(t, tc.socket) // a bare path, as the default
			o := Options{Config: cfg, Timeout: time.Second, CgroupRoot: t.TempDir()}.withDefaults()
			c := runtimeChecks(context.Background(), &o)[2]
			require.Equal(t, tc.status, c.Status, c.Summary)
			require.Contains(t, c.Summary, tc.summary)
		})
	}
}

// Root passes every permission check, so a socket gpuscope may not open
// cannot be made here; the wording of EACCES is checked from the error.
func TestRuntimeCheckPermission(t *testing.T) {
	err := &os.SyscallError{Syscall: "connect", Err: syscall.EACCES}
	c := runtimeCheck("docker", "docker_endpoint", "unix:///var/run/docker.sock", "/usr/bin/dockerd", "systemctl start docker", err)
	require.Equal(t, StatusWarn, c.Status)
	require.Equal(t, "unix:///var/run/docker.sock: permission denied: its containers are measured as raw cgroups (no name, image or compose labels)", c.Summary)
	require.Contains(t, c.Hint, "docker group")
}

func TestRuntimesOff(t *testing.T) {
	cfg := config.Default(nil)
	cfg.Cadvisor.Enabled = false
	o := Options{Config: cfg}.withDefaults()
	requireChecks(t, []Check{{Name: "runtimes", Status: StatusOK, Summary: "cAdvisor off (cadvisor.enabled: false): no container metrics"}},
		runtimeChecks(context.Background(), &o))
}

func TestSlurmCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dirs    []string
		slurmd  bool
		summary string
	}{
		{"v1 cgroups", []string{"cpu/slurm/uid_1000/job_42"}, true, "Slurm cgroups at CG/cpu/slurm: jobs are workloads"},
		{"v2 cgroups", []string{"system.slice/slurmstepd.scope/job_42"}, false, "Slurm cgroups at CG/system.slice/slurmstepd.scope: jobs are workloads"},
		{"v2 multiple slurmd", []string{"system.slice/node1_slurmstepd.scope/job_7"}, false, "Slurm cgroups at CG/system.slice/node1_slurmstepd.scope"},
		{"slurmd, no job", nil, true, "/usr/sbin/slurmd installed, no Slurm job cgroup now"},
		{"none", []string{"system.slice/docker-abc.scope"}, false, "not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg := t.TempDir()
			for _, d := range tc.dirs {
				require.NoError(t, os.MkdirAll(filepath.Join(cg, d), 0o755))
			}
			look := func(string) (string, error) { return "", errors.New("not found") }
			if tc.slurmd {
				look = func(f string) (string, error) { return "/usr/sbin/" + f, nil }
			}
			o := Options{CgroupRoot: cg, LookPath: look}.withDefaults()
			c := slurmCheck(&o)
			require.Equal(t, StatusOK, c.Status)
			require.Contains(t, c.Summary, strings.ReplaceAll(tc.summary, "CG", cg))
		})
	}
}
