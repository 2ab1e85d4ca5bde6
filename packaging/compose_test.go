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

// TestComposeMatchesREADME keeps the ways to run the image in step: every
// host namespace and mount of compose.yaml's gpuscope service is in the
// docker run line of docs/install.md and of the README, and Grafana reads
// provisioning where the provisioner writes it. (The image test runs both
// for real.)
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
	for _, doc := range []string{"docs/install.md", "README.md"} {
		t.Run(doc, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(repo, doc))
			require.NoError(t, err)
			// The docker run line, from `docker run` to the end of its code block.
			_, run, ok := strings.Cut(string(text), "docker run -d --name gpuscope")
			require.True(t, ok, "%s has no `docker run -d --name gpuscope` line", doc)
			run, _, _ = strings.Cut(run, "```")
			checkRunLine(t, doc, run, compose.Services["gpuscope"].PID, compose.Services["gpuscope"].Cgroup,
				compose.Services["gpuscope"].UTS, compose.Services["gpuscope"].Volumes, compose.Services["gpuscope"].Ports)
		})
	}

	prov := compose.Services["grafana-provision"]
	require.Equal(t, []string{"grafana", "provision", "/etc/grafana", "--url", "http://gpuscope:9089"}, prov.Command[:5])
	require.Equal(t, []string{"grafana-provisioning:/etc/grafana/provisioning"}, prov.Volumes)
	require.Contains(t, compose.Services["grafana"].Volumes, "grafana-provisioning:/etc/grafana/provisioning:ro")
}

func checkRunLine(t *testing.T, doc, run, pid, cgroup, uts string, volumes, ports []string) {
	t.Helper()
	for flag, v := range map[string]string{"--pid": pid, "--cgroupns": cgroup, "--uts": uts} {
		require.Equal(t, "host", v, flag)
		require.Contains(t, run, flag+" host")
	}
	for _, v := range volumes {
		require.Contains(t, run, "-v "+v, "compose.yaml mounts %s; the docker run line of %s must too", v, doc)
	}
	require.Equal(t, []string{"9089:9089"}, ports)
	require.Contains(t, run, "-p 9089:9089")
	require.Contains(t, run, "--gpus all")
}
