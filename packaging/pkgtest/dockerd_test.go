package pkgtest_test

import (
	"path/filepath"
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
