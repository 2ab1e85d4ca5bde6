//go:build e2e

package pkgtest_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestDockerd starts the private daemon, builds the busybox image offline,
// runs a container in it, and checks that the daemon's cleanup removes a
// container it did not start by name.
func TestDockerd(t *testing.T) {
	pkgtest.Require(t, true, "dockerd", "docker")
	var dir string
	before, _ := filepath.Glob("/sys/fs/cgroup/*/docker")
	t.Run("daemon", func(t *testing.T) {
		d := pkgtest.StartDockerd(t, pkgtest.DockerdOptions{})
		dir = d.Dir
		img := d.BusyboxImage(t, "gpuscope-test/busybox")
		require.Equal(t, "hello\n", d.Run(t, "run", "--rm", "--network", "none", img, "echo", "hello"))
		out := d.Run(t, "run", "--rm", "--network", "none", img, "sh", "-c", "ls /bin | wc -l; dd if=/dev/zero bs=1k count=1 2>/dev/null | head -c 3 | wc -c")
		fields := strings.Fields(out)
		require.Len(t, fields, 2, out)
		require.NotEqual(t, "0", fields[0])
		require.Equal(t, "3", fields[1])
		// Left running: cleanup must remove it.
		d.Run(t, "run", "-d", "--network", "none", "--name", "left.behind_1", img, "sleep", "600")
	})
	require.NotEmpty(t, dir)
	require.NoDirExists(t, dir, "the daemon's directory is removed at cleanup")
	require.Empty(t, pkgtest.MountsBelow(t, dir))
	if parents, _ := filepath.Glob("/sys/fs/cgroup/*/docker"); len(before) == 0 {
		require.Empty(t, parents, "the daemon's parent cgroups are removed at cleanup")
	}
}

// TestDockerdBackground: a Background daemon's containers run under a
// cgroup of its own with a low CPU weight (so that a build in one does
// not starve the other packages' tests), which is gone after cleanup.
func TestDockerdBackground(t *testing.T) {
	pkgtest.Require(t, true, "dockerd", "docker")
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err != nil {
		t.Skipf("Background weighs containers on cgroup v1 only, and this machine has no v1 cpu hierarchy: %v", err)
	}
	var parent string
	t.Run("daemon", func(t *testing.T) {
		d := pkgtest.StartDockerd(t, pkgtest.DockerdOptions{Background: true})
		parent = "/" + filepath.Base(d.Dir) + "-background"
		img := d.BusyboxImage(t, "gpuscope-test/busybox")
		cgroups := d.Run(t, "run", "--rm", "--network", "none", img, "cat", "/proc/self/cgroup")
		require.Regexp(t, `(?m)^\d+:cpu(,cpuacct)?:`+regexp.QuoteMeta(parent)+`/[0-9a-f]{64}$`, cgroups)
		// So does a build's RUN step (the build in packaging/imagetest).
		ctx := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM "+img+"\nRUN cat /proc/self/cgroup\n"), 0o644))
		build, errOut, err := d.Output("build", "--network=none", "--no-cache", ctx)
		require.NoError(t, err, "%s%s", build, errOut)
		require.Regexp(t, `(?m)\d+:cpu(,cpuacct)?:`+regexp.QuoteMeta(parent)+`/[0-9a-f]{64}$`, build+errOut)
		shares, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", parent, "cpu.shares"))
		require.NoError(t, err)
		require.Equal(t, "256", strings.TrimSpace(string(shares)))
	})
	require.NotEmpty(t, parent)
	made, _ := filepath.Glob("/sys/fs/cgroup/*" + parent)
	require.Empty(t, made, "the background cgroup is removed at cleanup")
}
