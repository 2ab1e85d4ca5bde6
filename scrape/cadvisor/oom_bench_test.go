package cadvisor

import "testing"

// BenchmarkOOMKillsCount is what each container adds to a cAdvisor scrape
// for container_oom_events_total: one read of its cgroup's counter file.
func BenchmarkOOMKillsCount(b *testing.B) {
	o, err := newOOMKills()
	if err != nil {
		b.Skipf("the kernel's OOM kill counts cannot be read here: %v", err)
	}
	name := "/"
	if o.file == "memory.events" {
		name = "/system.slice" // the v2 root has no memory.events
	}
	if _, ok := o.count(name); !ok {
		b.Skipf("no %s for cgroup %s", o.file, name)
	}
	for b.Loop() {
		o.count(name)
	}
}
