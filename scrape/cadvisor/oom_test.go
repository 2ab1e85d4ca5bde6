package cadvisor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOOMKillsRoot: the root cgroup counts the machine's OOM kills, from
// /proc/vmstat; other cgroups read the memory hierarchy.
func TestOOMKillsRoot(t *testing.T) {
	dir := t.TempDir()
	vmstat := filepath.Join(dir, "vmstat")
	require.NoError(t, os.WriteFile(vmstat, []byte("nr_free_pages 1234\noom_kill 7\nnr_unstable 0\n"), 0o644))
	// Not a cgroupfs: the cgroup reads fail (TestOOMKillCounted reads
	// real ones).
	cg := filepath.Join(dir, "cg")

	for _, tc := range []struct {
		name   string
		vmstat string
		cgroup string
		want   uint64
		ok     bool
	}{
		{"root from vmstat", vmstat, "/", 7, true},
		{"root without vmstat: no memory.events at the v2 root", "", "/", 0, false},
		{"a cgroup without the memory controller", vmstat, "/gone", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &oomKills{root: cg, file: "memory.events", vmstat: tc.vmstat}
			n, ok := o.count(tc.cgroup)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, n)
		})
	}

	for content, want := range map[string]bool{
		"nr_free_pages 1\n":              false, // before Linux 4.13
		"oom_kill x\n":                   false,
		"oom_kill_total 3\noom_kill 0\n": true,
	} {
		require.NoError(t, os.WriteFile(vmstat, []byte(content), 0o644))
		_, ok := vmstatOOMKills(vmstat)
		require.Equal(t, want, ok, content)
	}
	_, ok := vmstatOOMKills(filepath.Join(dir, "absent"))
	require.False(t, ok)
}
