package packaging_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestComposeMatchesREADME keeps the two ways to run the image in step:
// every host namespace and mount of compose.yaml's gpuscope service is in
// the README's docker run line, and Grafana reads provisioning where the
// provisioner writes it. (The image test runs both for real.)
func TestComposeMatchesREADME(t *testing.T) {
	repo := pkgtest.RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(repo, "packaging", "compose.yaml"))
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
			PID     string   `yaml:"pid"`
			Cgroup  string   `yaml:"cgroup"`
			UTS     string   `yaml:"uts"`
			Volumes []string `yaml:"volumes"`
			Ports   []string `yaml:"ports"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &compose))
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	require.NoError(t, err)
	// The docker run line, from `docker run` to the end of its code block.
	_, run, ok := strings.Cut(string(readme), "docker run -d --name gpuscope")
	require.True(t, ok, "README has no `docker run -d --name gpuscope` line")
	run, _, _ = strings.Cut(run, "```")

	svc := compose.Services["gpuscope"]
	for flag, v := range map[string]string{"--pid": svc.PID, "--cgroupns": svc.Cgroup, "--uts": svc.UTS} {
		require.Equal(t, "host", v, flag)
		require.Contains(t, run, flag+" host")
	}
	for _, v := range svc.Volumes {
		require.Contains(t, run, "-v "+v, "compose.yaml mounts %s; the README's docker run line must too", v)
	}
	require.Equal(t, []string{"9089:9089"}, svc.Ports)
	require.Contains(t, run, "-p 9089:9089")
	require.Contains(t, run, "--gpus all")

	prov := compose.Services["grafana-provision"]
	require.Equal(t, []string{"grafana", "provision", "/etc/grafana", "--url", "http://gpuscope:9089"}, prov.Command[:5])
	require.Equal(t, []string{"grafana-provisioning:/etc/grafana/provisioning"}, prov.Volumes)
	require.Contains(t, compose.Services["grafana"].Volumes, "grafana-provisioning:/etc/grafana/provisioning:ro")
}
