//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// doctor runs `gpuscope doctor args...` in dir and returns its stdout,
// stderr and exit code.
func doctor(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"doctor"}, args...)...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), code
}

// noNVIDIA says whether this machine has no NVIDIA GPU, as gpuscope
// tells (the device files of the driver).
func noNVIDIA() bool {
	for _, p := range []string{"/dev/nvidia[0-9]*", "/proc/driver/nvidia/gpus/*"} {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return false
		}
	}
	return true
}

// TestDoctorHere runs the doctor on this machine as a new user would,
// before starting serve: every check prints a status, a warn or fail says
// what to do, and the exit code is 0 unless a check fails.
func TestDoctorHere(t *testing.T) {
	t.Parallel()
	port := strconv.Itoa(freePort(t))
	out, stderr, code := doctor(t, t.TempDir(), "--web.listen-address=127.0.0.1:"+port)
	t.Logf("gpuscope doctor:\n%s%s", out, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Contains(t, lines[0], "gpuscope doctor: config embedded default, data data/, listen 127.0.0.1:"+port)

	check := regexp.MustCompile(`^(ok|warn|fail) +(\S+) +(.+)$`)
	statuses := map[string]string{}
	failed := false
	for i, l := range lines[1:] {
		m := check.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		statuses[m[2]] = m[1]
		failed = failed || m[1] == "fail"
		if m[1] != "ok" {
			require.Regexp(t, `^ +→ \S`, lines[i+2], "a %s check without a hint: %s", m[1], l)
		}
	}
	for _, name := range []string{"nvml", "root", "namespaces", "cgroups", "docker", "podman", "containerd", "slurm", "users", "data-dir", "listen", "appliance"} {
		require.Contains(t, statuses, name, "check %s missing", name)
	}
	require.Regexp(t, `(?m)^ok +data-dir +data/ \(to be created\) writable, `, out)
	require.Regexp(t, `(?m)^ok +listen +127\.0\.0\.1:`+port+` is free$`, out)
	require.Regexp(t, `(?m)^warn +appliance +no gpuscope answers at http://localhost:`+port+` `, out)
	require.Regexp(t, `(?m)^\d+ ok, \d+ warn, \d+ fail$`, out)
	if noNVIDIA() {
		require.Regexp(t, `(?m)^warn +nvml +no NVIDIA driver found, GPU metrics off$`, out)
	}
	if failed {
		require.Equal(t, 1, code)
	} else {
		require.Equal(t, 0, code)
	}
	require.Empty(t, stderr)
}

// TestDoctorJSON: --format json prints the same checks for a program,
// and --url= leaves out those of a running gpuscope.
func TestDoctorJSON(t *testing.T) {
	t.Parallel()
	out, _, code := doctor(t, t.TempDir(), "--format=json", "--url=", "--web.listen-address=127.0.0.1:"+strconv.Itoa(freePort(t)))
	var got struct {
		Status string `json:"status"`
		Checks []struct {
			Name, Status, Summary, Hint string
		} `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Contains(t, []string{"ok", "warn", "fail"}, got.Status)
	require.Equal(t, got.Status == "fail", code == 1)
	names := map[string]bool{}
	for _, c := range got.Checks {
		names[c.Name] = true
		if c.Status != "ok" {
			require.NotEmpty(t, c.Hint, c.Name)
		}
	}
	require.True(t, names["nvml"])
	require.False(t, names["appliance"], "--url= skips the running gpuscope")
}

// TestDoctorBadConfig: a config that serve would refuse stops the doctor
// with serve's own error (file, line, key) and exit code 2, before any
// check.
func TestDoctorBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := writeConfig(t, dir, "global:\n  scrape_interval: 15s\ngpu:\n  backend: quantum\n")
	out, stderr, code := doctor(t, dir, "--config.file="+bad)
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, stderr, "gpuscope doctor: load config: ")
	require.Contains(t, stderr, bad+":4")
	require.Contains(t, stderr, "quantum")

	out, stderr, code = doctor(t, dir, "--config.file="+filepath.Join(dir, "missing.yml"))
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, stderr, "gpuscope doctor: load config: read config file: open "+filepath.Join(dir, "missing.yml")+": no such file or directory")

	_, stderr, code = doctor(t, dir, "--web.listen-address=nonsense")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--web.listen-address: web.listen_address: "nonsense" is not host:port`)
}
