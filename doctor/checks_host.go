package doctor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The initial (host) namespaces' names, as the kernel gives them
// (PROC_PID_INIT_INO, PROC_CGROUP_INIT_INO).
const (
	hostPIDNamespace    = "pid:[4026531836]"
	hostCgroupNamespace = "cgroup:[4026531835]"
)

// privilegeChecks: the user gpuscope runs as, and its namespaces.
func privilegeChecks(_ context.Context, o *Options) []Check {
	return []Check{rootCheck(o), namespaceCheck(o)}
}

func rootCheck(o *Options) Check {
	uid := o.Geteuid()
	if uid == 0 {
		return ok("root", "running as root")
	}
	lost := []string{
		"NVML hides other users' GPU processes (their containers' gpuscope_gpu_container_* series are absent)",
		"DCGM_FI_PROF_* where the driver restricts profiling to admins (its default)",
	}
	if procHidden(o.ProcRoot) {
		lost = append(lost, "other users' /proc/<pid> (hidepid): their GPU processes are not joined to containers")
	}
	if o.Config.GPU.Sim.CPUBurn {
		lost = append(lost, "gpu.sim.cpu_burn cannot create its cgroups")
	}
	return warn("root", fmt.Sprintf("running as uid %d, not root; lost: %s", uid, strings.Join(lost, "; ")),
		"run as root (the container image does), or for profiling alone set `options nvidia NVreg_RestrictProfilingToAdminUsers=0` and reload the driver")
}

// namespaceCheck: NVML names GPU processes by host pid, and gpuscope
// joins them to cAdvisor's containers by their cgroup paths; both need the
// host's namespaces.
func namespaceCheck(o *Options) Check {
	pidNS, errPID := os.Readlink(filepath.Join(o.ProcRoot, "self", "ns", "pid"))
	cgNS, errCG := os.Readlink(filepath.Join(o.ProcRoot, "self", "ns", "cgroup"))
	if errPID != nil || errCG != nil {
		return warn("namespaces", "cannot read gpuscope's namespaces: "+firstErr(errPID, errCG).Error(),
			"mount the host's /proc; per-container GPU metrics need the host's pid and cgroup namespaces")
	}
	var problems, hints []string
	if pidNS != hostPIDNamespace {
		what := "private pid namespace"
		if o.Config.GPU.Families.Processes {
			what += ": per-container GPU memory and SM use are off"
		}
		problems = append(problems, what)
		hints = append(hints, "--pid host")
	}
	if cgNS != hostCgroupNamespace {
		what := "private cgroup namespace: GPU processes' cgroups do not match cAdvisor's container ids"
		if ownCgroupIsRoot(o.ProcRoot) {
			what = `private cgroup namespace (its own cgroup reads as "/"): cAdvisor sees only gpuscope's own container`
		}
		problems = append(problems, what)
		hints = append(hints, "--cgroupns host")
	}
	if len(problems) == 0 {
		return ok("namespaces", "host pid and cgroup namespaces")
	}
	return warn("namespaces", "gpuscope runs in a "+strings.Join(problems, "; and a "),
		"run the container with "+strings.Join(hints, " ")+" (docs/install.md, Docker)")
}

// ownCgroupIsRoot: every line of /proc/self/cgroup says "/", as inside a
// private cgroup namespace.
func ownCgroupIsRoot(procRoot string) bool {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return false
	}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && parts[2] != "/" {
			return false
		}
	}
	return true
}

// procHidden: /proc is mounted with hidepid, so a user other than root
// sees only its own processes there.
func procHidden(procRoot string) bool {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return false
	}
	procRoot = filepath.Clean(procRoot)
	for line := range strings.Lines(string(b)) {
		pre, post, found := strings.Cut(strings.TrimSpace(line), " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !found || len(fields) < 5 || len(after) < 3 || after[0] != "proc" || unescapeMount(fields[4]) != procRoot {
			continue
		}
		for _, opt := range strings.Split(after[2], ",") {
			switch opt {
			case "hidepid=1", "hidepid=2", "hidepid=invisible", "hidepid=noaccess":
				return true
			}
		}
	}
	return false
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// cgroupMount is one cgroup filesystem of /proc/self/mountinfo.
type cgroupMount struct {
	point       string
	v2          bool
	controllers []string // v1: from the super options; v2: cgroup.controllers
}

// readCgroupMounts lists the cgroup filesystems mounted at or below root,
// and the type of the filesystem at root itself.
func readCgroupMounts(procRoot, root string) (mounts []cgroupMount, rootType string, err error) {
	f, err := os.Open(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	root = filepath.Clean(root)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, found := strings.Cut(sc.Text(), " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !found || len(fields) < 5 || len(after) < 3 {
			continue
		}
		point := unescapeMount(fields[4])
		if point != root && !strings.HasPrefix(point, root+"/") {
			continue
		}
		fstype := after[0]
		if point == root {
			rootType = fstype
		}
		switch fstype {
		case "cgroup":
			m := cgroupMount{point: point}
			for _, opt := range strings.Split(after[2], ",") {
				if isV1Controller(opt) {
					m.controllers = append(m.controllers, opt)
				}
			}
			mounts = append(mounts, m)
		case "cgroup2":
			m := cgroupMount{point: point, v2: true}
			if b, err := os.ReadFile(filepath.Join(point, "cgroup.controllers")); err == nil {
				m.controllers = strings.Fields(string(b))
			}
			mounts = append(mounts, m)
		}
	}
	return mounts, rootType, sc.Err()
}

// isV1Controller tells controllers from the other super options of a v1
// cgroup mount (rw, relatime, name=systemd, xattr, ...).
func isV1Controller(opt string) bool {
	switch opt {
	case "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls", "blkio",
		"perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc":
		return true
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// cgroupChecks: the cgroup version and whether the controllers cAdvisor
// reads are there.
func cgroupChecks(_ context.Context, o *Options) []Check {
	return []Check{cgroupCheck(o)}
}

func cgroupCheck(o *Options) Check {
	mounts, rootType, err := readCgroupMounts(o.ProcRoot, o.CgroupRoot)
	if err != nil {
		return warn("cgroups", "cannot read the mount table: "+err.Error(), "mount the host's /proc")
	}
	if len(mounts) == 0 {
		return fail("cgroups", fmt.Sprintf("no cgroup filesystem at %s: cAdvisor sees no container", o.CgroupRoot),
			"mount the host's /sys (docker run -v /sys:/sys:ro)")
	}
	var version string
	have := map[string]bool{}
	switch {
	case rootType == "cgroup2":
		version = "cgroup v2 (unified)"
	default:
		version = "cgroup v1"
		for _, m := range mounts {
			if m.v2 {
				version = fmt.Sprintf("cgroup v1 (hybrid: v2 at %s", m.point)
				if len(m.controllers) == 0 {
					version += " with no controllers"
				}
				version += ")"
			}
		}
	}
	for _, m := range mounts {
		if rootType != "cgroup2" && m.v2 && m.point != o.CgroupRoot {
			// A hybrid machine's unified hierarchy only tracks
			// processes; cAdvisor reads the v1 controllers.
			continue
		}
		for _, c := range m.controllers {
			have[c] = true
		}
	}
	var names []string
	for c := range have {
		names = append(names, c)
	}
	slices.Sort(names)
	summary := version + ", controllers " + strings.Join(names, " ")
	// What cAdvisor's default metric sets read: CPU, memory, block I/O.
	needed := []struct{ v1, v2, metrics string }{
		{"cpu", "cpu", "container CPU"},
		{"cpuacct", "cpu", "container CPU usage"},
		{"memory", "memory", "container memory"},
		{"blkio", "io", "container disk I/O"},
	}
	var missing []string
	for _, n := range needed {
		c := n.v1
		if rootType == "cgroup2" {
			c = n.v2
		}
		if !have[c] && !slices.Contains(missing, c+" ("+n.metrics+")") {
			missing = append(missing, c+" ("+n.metrics+")")
		}
	}
	if len(missing) > 0 {
		hint := "enable the controllers (e.g. boot with cgroup_enable=memory); on cgroup v2 they must be in the root's cgroup.subtree_control"
		return warn("cgroups", summary+"; missing "+strings.Join(missing, ", ")+": those metrics are absent", hint)
	}
	return ok("cgroups", summary)
}
