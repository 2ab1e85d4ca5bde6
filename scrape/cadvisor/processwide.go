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
var processWide = &processSettings{interval: manager.HousekeepingInterval, flags: flag.CommandLine}

// processSettings are cAdvisor's process-wide settings: where they live
// (cAdvisor's variable and flag set; a test's own) and whether a collector
// has set them.
type processSettings struct {
	sync.Mutex
	interval *time.Duration // cAdvisor's manager.HousekeepingInterval
	flags    *flag.FlagSet  // holds cAdvisor's docker, podman and containerd flags
	set      bool
	claimed  time.Duration // the interval the first collector set
}

// claimProcessWide sets cAdvisor's process-wide flags from interval and
// c's endpoints, the first time in the process; later it returns what
// differs from the values in effect, which stay.
func claimProcessWide(interval time.Duration, c Config) (kept []string, err error) {
	return processWide.claim(interval, c)
}

func (p *processSettings) claim(interval time.Duration, c Config) (kept []string, err error) {
	var want [][2]string // cAdvisor flag, value
	for _, f := range [][2]string{{"docker", c.DockerEndpoint}, {"podman", c.PodmanEndpoint}, {"containerd", c.ContainerdEndpoint}} {
		if f[1] != "" { // empty: not from a config file (a test's zero Config): cAdvisor's default
			want = append(want, f)
		}
	}
	p.Lock()
	defer p.Unlock()
	if p.set {
		if interval != p.claimed {
			kept = append(kept, fmt.Sprintf("housekeeping interval %s (not %s)", p.claimed, interval))
		}
		for _, f := range want {
			if cur := p.flags.Lookup(f[0]).Value.String(); cur != f[1] {
				kept = append(kept, fmt.Sprintf("%s endpoint %s (not %s)", f[0], cur, f[1]))
			}
		}
		return kept, nil
	}
	*p.interval = interval
	for _, f := range want {
		if err := p.flags.Set(f[0], f[1]); err != nil {
			return nil, fmt.Errorf("set cAdvisor's --%s endpoint: %w", f[0], err)
		}
	}
	p.set, p.claimed = true, interval
	return nil, nil
}
