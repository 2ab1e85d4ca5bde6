package cadvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/cadvisor/lib/manager"
	info "github.com/google/cadvisor/lib/model"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fscommon"
)

// oomKills reads the kernel's count of OOM kills of each cgroup into
// cAdvisor's container_oom_events_total. The cAdvisor library counts
// nothing there (its kernel-log OOM watcher is not part of it; the stat
// stays 0 forever), while the kernel keeps an exact counter per memory
// cgroup: oom_kill in memory.events (v2) or memory.oom_control (v1, Linux
// 4.13 and later), which includes the cgroup's descendants and lives as
// long as the cgroup, so it needs no privileges, no /dev/kmsg and survives
// gpuscope's restarts.
//
// The root cgroup (id "/", the whole machine) gets the kernel's count of
// every OOM kill on the machine, oom_kill in /proc/vmstat: the v2 root has
// no memory.events, and the v1 root's count is only of the processes in
// the root cgroup itself. A kill by the machine's own OOM killer (out of
// memory, not a cgroup at its limit) shows there, whichever cgroup the
// victim was in.
type oomKills struct {
	root string // the memory hierarchy's mount point (v1) or the unified one (v2)
	file string
	// vmstat is /proc/vmstat where it has oom_kill, else "".
	vmstat string
}

// newOOMKills finds where the kernel keeps the counter, or says why it
// cannot be read here.
func newOOMKills() (*oomKills, error) {
	o := &oomKills{root: "/sys/fs/cgroup", file: "memory.events"}
	if _, ok := vmstatOOMKills("/proc/vmstat"); ok {
		o.vmstat = "/proc/vmstat"
	}
	if !cgroups.IsCgroup2UnifiedMode() {
		mnt, err := cgroups.FindCgroupMountpoint("", "memory")
		if err != nil {
			return nil, fmt.Errorf("find the memory cgroup hierarchy: %w", err)
		}
		o.root, o.file = mnt, "memory.oom_control"
	}
	// The v2 root has no memory.events to check; v1's root has its
	// memory.oom_control, where kernels before 4.13 lack the count.
	if o.file == "memory.oom_control" {
		content, err := cgroups.ReadFile(o.root, o.file)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", filepath.Join(o.root, o.file), err)
		}
		if !strings.Contains(content, "\noom_kill ") {
			return nil, fmt.Errorf("%s has no oom_kill count (Linux before 4.13)", filepath.Join(o.root, o.file))
		}
	}
	return o, nil
}

// count is the OOM kills of the cgroup cAdvisor names name (its path in
// the hierarchy); ok is false where the cgroup has no memory controller or
// is gone.
func (o *oomKills) count(name string) (n uint64, ok bool) {
	if name == "/" && o.vmstat != "" {
		return vmstatOOMKills(o.vmstat)
	}
	dir := filepath.Join(o.root, filepath.Clean("/"+name))
	n, err := fscommon.GetValueByKey(dir, o.file, "oom_kill")
	return n, err == nil
}

// oomInfoProvider is the manager as cAdvisor's Prometheus collector sees
// it, with each container's latest stats carrying the kernel's OOM kill
// count where oom is set.
type oomInfoProvider struct {
	manager.Manager
	oom *oomKills
}

func (p oomInfoProvider) GetRequestedContainersInfo(name string, options info.RequestOptions) (map[string]*info.ContainerInfo, error) {
	infos, err := p.Manager.GetRequestedContainersInfo(name, options)
	if p.oom == nil {
		return infos, err
	}
	for id, ci := range infos {
		if ci == nil || len(ci.Stats) == 0 {
			continue
		}
		n, ok := p.oom.count(id)
		if !ok {
			continue
		}
		// The stats are the manager's cached ones, shared with other
		// readers; the slice holding them is this call's own.
		latest := *ci.Stats[len(ci.Stats)-1]
		latest.OOMEvents = n
		ci.Stats[len(ci.Stats)-1] = &latest
	}
	return infos, err
}

// vmstatOOMKills reads the machine's OOM kills, the oom_kill line of
// /proc/vmstat (Linux 4.13 and later).
func vmstatOOMKills(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
