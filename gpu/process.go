package gpu

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscope/gpuscope/workload"
)

// containerGrouper turns a GPU's processes into per-container usage. One
// grouper serves all GPUs of a backend; GPUs are read concurrently, so its
// methods lock.
type containerGrouper struct {
	mu    sync.Mutex
	pids  *pidResolver
	namer *containerNamer
	// Scratch space reused across GPUs and cycles.
	perPID map[uint32]pidUsage
	byID   map[string]int
}

type pidUsage struct {
	memoryBytes   float64
	memoryUnknown bool
	smSum         float64
	smSamples     int
}

func newContainerGrouper(procRoot string, namer *containerNamer) *containerGrouper {
	return &containerGrouper{
		pids:   newPIDResolver(procRoot),
		namer:  namer,
		perPID: map[uint32]pidUsage{},
		byID:   map[string]int{},
	}
}

func (g *containerGrouper) beginCycle() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pids.beginCycle()
	g.namer.beginCycle()
}

func (g *containerGrouper) endCycle() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pids.endCycle()
}

// group sums memory and SM utilisation per container. procs are the
// processes the driver lists as running on the GPU (compute, graphics,
// MPS clients); only they count: a utilisation sample of a pid not in
// procs is of a process that has ended (the driver keeps a history), and
// its pid may now belong to anything. A pid listed twice (a process with a
// compute and a graphics context) counts once, with the larger memory.
// A process's SM utilisation is its average over the sampling interval
// (smWindow): NVML returns a sample only for each of the driver's sample
// periods in which the process used the GPU, so the samples' SM
// percentages times the period, over the interval, are the interval's
// average with idle periods counted as 0. Until the driver's timestamps
// have shown its period (and for a driver that returns one sample per
// process and call), it is the mean of its samples. A container's is the
// sum over its processes, capped at 100. A container with a process whose memory the driver withholds
// (NVML_VALUE_NOT_AVAILABLE, e.g. another user's process without
// privileges) has no memory value rather than a partial one. Processes
// whose cgroup cannot be read (exited meanwhile, or in another pid
// namespace) are left out and counted in unresolved.
//
// Processes that are gone (no /proc/<pid>, or a zombie) are left out of
// the containers too: the memory the driver lists for them is held for
// nobody. Once found gone in two consecutive cycles (pidResolver) they
// are orphans, summed in orphans; in the first cycle one counts in
// unresolved, as a process may exit between the driver's list and the
// /proc read. Orphan memory the driver withholds is not summed
// (the process is still counted).
func (g *containerGrouper) group(procs []nvml.ProcessInfo, utils []nvml.ProcessUtilizationSample, w smWindow) (out []Container, orphans Orphans, unresolved int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.perPID)
	for _, p := range procs {
		u := g.perPID[p.Pid]
		if p.UsedGpuMemory == ^uint64(0) {
			u.memoryUnknown = true
		} else {
			u.memoryBytes = max(u.memoryBytes, float64(p.UsedGpuMemory))
		}
		g.perPID[p.Pid] = u
	}
	for _, s := range utils {
		u, ok := g.perPID[s.Pid]
		if !ok {
			continue
		}
		u.smSum += float64(s.SmUtil)
		u.smSamples++
		g.perPID[s.Pid] = u
	}
	if len(g.perPID) == 0 {
		return nil, orphans, 0
	}
	clear(g.byID)
	users := g.namer.cache.Users()
	for pid, u := range g.perPID {
		id, state, err := g.pids.resolve(pid)
		p := gpuProc{pid: pid, memoryBytes: uint64(u.memoryBytes), memoryUnknown: u.memoryUnknown, smPercent: w.share(u)}
		if state != pidLive {
			if state == pidZombie {
				// A zombie's /proc/<pid>/status still names its owner; a
				// pid that is gone altogether names nobody.
				p.info = g.pids.readInfo(pid)
				if p.info.uid != "" {
					p.user = workload.Clean(users.Name(p.info.uid), workload.MaxValueBytes)
				}
			}
			if g.pids.orphaned(pid) {
				orphans.processes++
				orphans.memoryBytes += u.memoryBytes
				if p.user != "" {
					orphans.addUser(p.user, u.memoryBytes)
				}
			} else {
				unresolved++
			}
			p.gone = true
			orphans.procs = append(orphans.procs, p)
			continue
		}
		p.info = g.pids.info(pid)
		if p.info.uid != "" {
			// passwd is the admin's, but a label value must still be
			// valid UTF-8.
			p.user = workload.Clean(users.Name(p.info.uid), workload.MaxValueBytes)
		}
		if err != nil {
			unresolved++
			orphans.procs = append(orphans.procs, p)
			continue
		}
		i, ok := g.byID[id]
		if !ok {
			i = len(out)
			g.byID[id] = i
			out = append(out, g.namer.usage(id))
		}
		c := &out[i]
		c.memoryBytes += u.memoryBytes
		c.memoryUnknown = c.memoryUnknown || u.memoryUnknown
		c.smPercent += p.smPercent
		c.processes++
		c.procs = append(c.procs, p)
	}
	for i := range out {
		out[i].smPercent = min(out[i].smPercent, 100)
		slices.SortFunc(out[i].procs, byPID)
	}
	slices.SortFunc(orphans.procs, byPID)
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, orphans, unresolved
}

// smWindow is how a GPU's process utilisation samples cover the sampling
// interval: period is the driver's sample period (0: unknown), window the
// time since the previous read.
type smWindow struct {
	period, window time.Duration
}

// share is a process's SM utilisation over the window, 0 to 100.
func (w smWindow) share(u pidUsage) float64 {
	switch {
	case u.smSamples == 0:
		return 0
	case w.period > 0 && w.window > 0:
		return min(u.smSum*w.period.Seconds()/w.window.Seconds(), 100)
	}
	return u.smSum / float64(u.smSamples)
}

// Orphans is what the driver lists on a GPU (or GPU instance) for
// processes that are gone: gpuscope_gpu_orphaned_memory_bytes and
// gpuscope_gpu_orphaned_processes. A backend gets it from
// BackendEnv.GroupProcesses.
type Orphans struct {
	memoryBytes float64
	processes   int
	// byUser is the part of memoryBytes and processes whose owner is
	// known (zombies), by user, sorted; the rest is nobody's known.
	byUser []userOrphans
	// procs are the processes the driver lists that are in no container:
	// gone (orphans from their second cycle), or whose cgroup could not
	// be read; for the process list.
	procs []gpuProc
}

// userOrphans is one user's gone processes on a GPU and the memory the
// driver holds for them.
type userOrphans struct {
	user        string
	memoryBytes float64
	processes   int
}

func (o *Orphans) addUser(user string, memoryBytes float64) {
	i, found := slices.BinarySearchFunc(o.byUser, user, func(u userOrphans, name string) int { return strings.Compare(u.user, name) })
	if !found {
		o.byUser = slices.Insert(o.byUser, i, userOrphans{user: user})
	}
	o.byUser[i].memoryBytes += memoryBytes
	o.byUser[i].processes++
}

// containerNamer gives a container its labels besides its id: cAdvisor's
// name and the workload identity, from the cache shared with cAdvisor's
// collector. Each id is looked up once per cycle; not safe for concurrent
// use (the grouper and BackendEnv.Container call it under the grouper's lock).
type containerNamer struct {
	lookup func(id string) (workload.Metadata, bool)
	cache  *workload.Cache
	// This cycle's answers: an index into labels by id. The labels live
	// in a slice reused across cycles, as a map would allocate each of
	// these values (too large to be stored in its buckets).
	index  map[string]int
	labels []containerLabels
}

type containerLabels struct {
	id       string // the id label: the cgroup path as a valid label value
	name     string
	workload workload.Identity
}

func newContainerNamer(lookup func(string) (workload.Metadata, bool), cache *workload.Cache) *containerNamer {
	if cache == nil {
		cache = workload.NewCache(nil)
	}
	return &containerNamer{lookup: lookup, cache: cache, index: map[string]int{}}
}

func (n *containerNamer) beginCycle() {
	clear(n.index)
	clear(n.labels) // let the strings of the previous cycle go
	n.labels = n.labels[:0]
}

// usage returns a Container of id with its labels and no use yet.
// Where cAdvisor knows the container, the identity is resolved from the
// same metadata its collector's labels are (one cache entry, the same
// labels on both sides); else from the path alone. The id is looked up as
// the kernel spells it, and labelled as workload.LabelValue writes it, as
// cAdvisor's side labels it (scrape/cadvisor): a cgroup name need not be
// valid UTF-8, and a label value that is not would cost the sample.
func (n *containerNamer) usage(id string) Container {
	i, ok := n.index[id]
	if !ok {
		var md workload.Metadata
		if n.lookup != nil {
			if m, found := n.lookup(id); found {
				md = m
			}
		}
		i = len(n.labels)
		n.labels = append(n.labels, containerLabels{
			id:       workload.LabelValue(id),
			name:     workload.LabelValue(md.Name),
			workload: n.cache.Get(id, md),
		})
		n.index[id] = i
	}
	l := &n.labels[i]
	return Container{id: l.id, name: l.name, workload: l.workload}
}

func byPID(a, b gpuProc) int { return cmp.Compare(a.pid, b.pid) }
