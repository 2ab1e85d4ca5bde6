package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Run puts every group's checks in a fixed order, whatever order the
// groups finish in.
func TestRun(t *testing.T) {
	cfg := config.Default(nil)
	cfg.Cadvisor.DockerEndpoint = "unix://" + filepath.Join(t.TempDir(), "docker.sock")
	cfg.Cadvisor.PodmanEndpoint = ""
	cfg.Cadvisor.ContainerdEndpoint = ""
	o := Options{
		Config:        cfg,
		NVML:          h100s(2),
		NVIDIADevices: []string{},
		DataDir:       filepath.Join(t.TempDir(), "data"),
		ListenAddress: "127.0.0.1:0",
		ProcRoot:      fakeProc(t, hostPIDNamespace, hostCgroupNamespace, "0::/\n", "1 0 0:1 / CG rw - cgroup2 cgroup2 rw\n"),
		Geteuid:       func() int { return 0 },
		LookPath:      func(string) (string, error) { return "", errors.New("not found") },
		Timeout:       time.Second,
		KernelLog:     filepath.Join(t.TempDir(), "kmsg"),
	}
	var names []string
	checks := Run(context.Background(), o)
	for _, c := range checks {
		names = append(names, c.Name)
		require.Contains(t, []string{StatusOK, StatusWarn, StatusFail}, c.Status)
		require.NotEmpty(t, c.Summary, c.Name)
	}
	require.Equal(t, []string{"nvml", "driver", "gpus", "gpm", "mig", "xid-kernel-log", "root", "namespaces", "cgroups",
		"docker", "podman", "containerd", "slurm", "users", "data-dir", "listen", "alerts"}, names)
}

func TestWorst(t *testing.T) {
	for _, tc := range []struct {
		statuses []string
		want     string
	}{
		{nil, StatusOK},
		{[]string{StatusOK, StatusOK}, StatusOK},
		{[]string{StatusOK, StatusWarn}, StatusWarn},
		{[]string{StatusFail, StatusWarn, StatusOK}, StatusFail},
	} {
		var checks []Check
		for _, s := range tc.statuses {
			checks = append(checks, Check{Status: s})
		}
		require.Equal(t, tc.want, Worst(checks))
	}
}

func TestWrite(t *testing.T) {
	checks := []Check{
		ok("root", "running as root"),
		warn("nvml", "no NVIDIA driver found, GPU metrics off", "install it"),
		fail("listen", ":9089 is in use", "stop it"),
	}
	var text bytes.Buffer
	require.NoError(t, WriteText(&text, checks))
	require.Equal(t, `ok    root    running as root
warn  nvml    no NVIDIA driver found, GPU metrics off
              → install it
fail  listen  :9089 is in use
              → stop it

1 ok, 1 warn, 1 fail
`, text.String())

	var js bytes.Buffer
	require.NoError(t, WriteJSON(&js, checks))
	var got struct {
		Status string  `json:"status"`
		Checks []Check `json:"checks"`
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &got))
	require.Equal(t, StatusFail, got.Status)
	require.Equal(t, checks, got.Checks)
	require.Contains(t, js.String(), `"hint": "install it"`)
	require.NotContains(t, js.String()[:bytes.Index(js.Bytes(), []byte(`"nvml"`))], `"hint"`, "an ok check has no hint key")

	js.Reset()
	require.NoError(t, WriteJSON(&js, nil))
	require.JSONEq(t, `{"status":"ok","checks":[]}`, js.String())
}
