package cadvisor

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/google/cadvisor/lib/manager"
)

// cAdvisor keeps its housekeeping interval and its runtime clients'
// endpoints in flags of its own packages, read by its goroutines while
// they run and dialled once per process: one value each per process, as
// the kubelet has them. A process runs one collector (the binary), or
// several at once (tests running appliances and agents side by side):
// processWide is what the first collector of the process set, under a
// lock, and is never written again, so that no running cAdvisor reads a
// flag another collector writes. A later collector with other values
// keeps these, and says so.
var processWide struct {
	sync.Mutex
	set      bool
	interval time.Duration
}

// claimProcessWide sets cAdvisor's process-wide flags from interval and
// c's endpoints, the first time in the process; later it returns what
// differs from the values in effect, which stay.
func claimProcessWide(interval time.Duration, c Config) (kept []string, err error) {
	var want [][2]string // cAdvisor flag, value
	for _, f := range [][2]string{{"docker", c.DockerEndpoint}, {"podman", c.PodmanEndpoint}, {"containerd", c.ContainerdEndpoint}} {
		if f[1] != "" { // empty: not from a config file (a test's zero Config): cAdvisor's default
			want = append(want, f)
		}
	}
	processWide.Lock()
	defer processWide.Unlock()
	if processWide.set {
		if interval != processWide.interval {
			kept = append(kept, fmt.Sprintf("housekeeping interval %s (not %s)", processWide.interval, interval))
		}
		for _, f := range want {
			if cur := flag.Lookup(f[0]).Value.String(); cur != f[1] {
				kept = append(kept, fmt.Sprintf("%s endpoint %s (not %s)", f[0], cur, f[1]))
			}
		}
		return kept, nil
	}
	*manager.HousekeepingInterval = interval
	for _, f := range want {
		if err := flag.CommandLine.Set(f[0], f[1]); err != nil {
			return nil, fmt.Errorf("set cAdvisor's --%s endpoint: %w", f[0], err)
		}
	}
	processWide.set, processWide.interval = true, interval
	return nil, nil
}
