package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

func touch(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, nil, 0o644))
}

func TestRootCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		uid     int
		cpuBurn bool
		procOpt string // super options of the /proc mount
		status  string
		has     []string
		hasNot  []string
	}{
		{"root", 0, false, "rw,hidepid=2", StatusOK, []string{"running as root"}, nil},
		{"user", 998, false, "rw", StatusWarn, []string{"uid 998, not root", "other users' GPU processes", "DCGM_FI_PROF_*"}, []string{"hidepid", "cpu_burn"}},
		{"user with cpu_burn", 1000, true, "rw", StatusWarn, []string{"gpu.sim.cpu_burn cannot create its cgroups"}, nil},
		{"user, /proc with hidepid", 1000, false, "rw,hidepid=invisible", StatusWarn, []string{"other users' /proc/<pid> (hidepid)"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default(nil)
			cfg.GPU.Sim.CPUBurn = tc.cpuBurn
			proc := fakeProc(t, "", "", "", "")
			mountinfo := "22 27 0:21 / " + proc + " rw,relatime - proc proc " + tc.procOpt + "\n"
			require.NoError(t, os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte(mountinfo), 0o644))
			o := Options{Config: cfg, Geteuid: func() int { return tc.uid }, ProcRoot: proc}.withDefaults()
			c := rootCheck(&o)
			require.Equal(t, tc.status, c.Status)
			for _, s := range tc.has {
				require.Contains(t, c.Summary, s)
			}
			for _, s := range tc.hasNot {
				require.NotContains(t, c.Summary, s)
			}
			if tc.status != StatusOK {
				require.Contains(t, c.Hint, "run as root")
			}
		})
	}
}

// fakeProc makes a /proc with self/ns/pid, self/ns/cgroup, self/cgroup
// and self/mountinfo.
func fakeProc(t *testing.T, pidNS, cgroupNS, cgroup, mountinfo string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "self", "ns"), 0o755))
	if pidNS != "" {
		require.NoError(t, os.Symlink(pidNS, filepath.Join(root, "self", "ns", "pid")))
	}
	if cgroupNS != "" {
		require.NoError(t, os.Symlink(cgroupNS, filepath.Join(root, "self", "ns", "cgroup")))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "self", "cgroup"), []byte(cgroup), 0o644))
	if mountinfo != "" {
		require.NoError(t, os.WriteFile(filepath.Join(root, "self", "mountinfo"), []byte(mountinfo), 0o644))
	}
	return root
}

func TestNamespaceCheck(t *testing.T) {
	const privatePID, privateCgroup = "pid:[4026532301]", "cgroup:[4026532302]"
	for _, tc := range []struct {
		name               string
		pid, cgroupNS, cg  string
		status             string
		summary, hintsWith string
	}{
		{"host", hostPIDNamespace, hostCgroupNamespace, "0::/system.slice/gpuscope.service\n", StatusOK, "host pid and cgroup namespaces", ""},
		{"private pid", privatePID, hostCgroupNamespace, "0::/docker/abc\n", StatusWarn,
			"gpuscope runs in a private pid namespace: per-container GPU memory and SM use are off", "--pid host"},
		{"private cgroup, own cgroup is /", hostPIDNamespace, privateCgroup, "0::/\n", StatusWarn,
			`gpuscope runs in a private cgroup namespace (its own cgroup reads as "/"): cAdvisor sees only gpuscope's own container`, "--cgroupns host"},
		{"private cgroup on v1", hostPIDNamespace, privateCgroup, "4:memory:/\n2:cpuacct:/\n1:cpu:/\n0::/\n", StatusWarn,
			`private cgroup namespace (its own cgroup reads as "/")`, "--cgroupns host"},
		{"private cgroup, nested path", hostPIDNamespace, privateCgroup, "0::/init.scope\n", StatusWarn,
			"private cgroup namespace: GPU processes' cgroups do not match cAdvisor's container ids", "--cgroupns host"},
		{"both private", privatePID, privateCgroup, "0::/\n", StatusWarn, "private pid namespace", "--pid host --cgroupns host"},
		{"unreadable", "", "", "", StatusWarn, "cannot read gpuscope's namespaces", "mount the host's /proc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{ProcRoot: fakeProc(t, tc.pid, tc.cgroupNS, tc.cg, "")}.withDefaults()
			c := namespaceCheck(&o)
			require.Equal(t, tc.status, c.Status, c.Summary)
			require.Contains(t, c.Summary, tc.summary)
			require.Contains(t, c.Hint, tc.hintsWith)
		})
	}
}

func TestCgroupCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// mountinfo lines; CG stands for the cgroup root.
		mounts      []string
		controllers string // cgroup.controllers of the v2 hierarchy
		status      string
		summary     string
	}{
		{
			name:        "v2",
			mounts:      []string{"35 25 0:30 / CG rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"},
			controllers: "cpuset cpu io memory hugetlb pids rdma misc\n",
			status:      StatusOK,
			summary:     "cgroup v2 (unified), controllers cpu cpuset hugetlb io memory misc pids rdma",
		},
		{
			name:        "v2 without memory",
			mounts:      []string{"35 25 0:30 / CG rw,nosuid - cgroup2 cgroup2 rw"},
			controllers: "cpu io pids\n",
			status:      StatusWarn,
			summary:     "cgroup v2 (unified), controllers cpu io pids; missing memory (container memory): those metrics are absent",
		},
		{
			name: "hybrid",
			mounts: []string{
				"31 23 0:28 / CG rw,relatime - tmpfs tmpfs rw,mode=755",
				"32 31 0:29 / CG/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct",
				"34 31 0:31 / CG/memory rw,relatime - cgroup cgroup rw,memory",
				"35 31 0:32 / CG/blkio rw,relatime - cgroup cgroup rw,blkio",
				"36 31 0:33 / CG/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd",
				"37 31 0:34 / CG/unified rw,relatime - cgroup2 cgroup2 rw",
			},
			status:  StatusOK,
			summary: "cgroup v1 (hybrid: v2 at CG/unified with no controllers), controllers blkio cpu cpuacct memory",
		},
		{
			name: "v1 without memory",
			mounts: []string{
				"31 23 0:28 / CG rw,relatime - tmpfs tmpfs rw,mode=755",
				"32 31 0:29 / CG/cpu rw,relatime - cgroup cgroup rw,cpu",
				"33 31 0:30 / CG/cpuacct rw,relatime - cgroup cgroup rw,cpuacct",
				"35 31 0:32 / CG/blkio rw,relatime - cgroup cgroup rw,blkio",
			},
			status:  StatusWarn,
			summary: "cgroup v1, controllers blkio cpu cpuacct; missing memory (container memory): those metrics are absent",
		},
		{
			name:    "nothing mounted",
			mounts:  []string{"22 27 0:21 / /proc rw,relatime - proc proc rw"},
			status:  StatusFail,
			summary: "no cgroup filesystem at CG: cAdvisor sees no container",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg := t.TempDir()
			if tc.controllers != "" {
				require.NoError(t, os.WriteFile(filepath.Join(cg, "cgroup.controllers"), []byte(tc.controllers), 0o644))
			}
			require.NoError(t, os.MkdirAll(filepath.Join(cg, "unified"), 0o755))
			mountinfo := strings.ReplaceAll(strings.Join(tc.mounts, "\n")+"\n", "CG", cg)
			o := Options{ProcRoot: fakeProc(t, "", "", "", mountinfo), CgroupRoot: cg}.withDefaults()
			c := cgroupCheck(&o)
			require.Equal(t, tc.status, c.Status, c.Summary)
			require.Equal(t, strings.ReplaceAll(tc.summary, "CG", cg), c.Summary)
			if c.Status != StatusOK {
				require.NotEmpty(t, c.Hint)
			}
		})
	}
	t.Run("no mountinfo", func(t *testing.T) {
		o := Options{ProcRoot: t.TempDir()}.withDefaults()
		require.Equal(t, StatusWarn, cgroupCheck(&o).Status)
	})
}
