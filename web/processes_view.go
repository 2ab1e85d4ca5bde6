package web

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gpuscope/gpuscope/gpu"
)

// processView is one process a GPU runs now, as the GPU page and the
// overview's card list it (nvitop's columns): from the collector's last
// cycle, the same list /api/v1/gpu/processes serves.
type processView struct {
	PID            uint32
	User, Command  string
	Instance       string // the MIG GPU instance (GPU_I_ID), "" for a whole GPU
	Workload, Href string // the workload label of its container, its page
	Mem, SM        float64
	HasMem, HasSM  bool
	Gone           bool
}

// processesView is a GPU's processes now, or why there is no list.
type processesView struct {
	// Read: the driver was asked in the cycle. A GPU whose processes
	// were not read (no driver answer, outside the host's pid
	// namespace, the processes family off) says so instead of "none".
	Read bool
	List []processView
	Err  string
	At   time.Time
}

// processesOf are the processes of GPU index gpuIndex in l, its GPU
// instances' included.
func processesOf(l gpu.ProcessList, gpuIndex string) *processesView {
	v := &processesView{At: l.Time}
	for _, g := range l.GPUs {
		if g.GPU != gpuIndex {
			continue
		}
		v.Read = v.Read || g.Read
		for _, p := range g.Processes {
			pv := processView{PID: p.PID, User: p.User, Command: p.Command, Instance: g.GPUInstance, Gone: p.Gone}
			if pv.Command == "" {
				pv.Command = p.Name
			}
			if p.Container != nil {
				pv.Workload = p.Container.Workload
				if pv.Workload != "" {
					pv.Href = workloadPath(pv.Workload)
				}
			}
			if p.MemoryBytes != nil {
				pv.Mem, pv.HasMem = float64(*p.MemoryBytes), true
			}
			if p.SMPercent != nil {
				pv.SM, pv.HasSM = *p.SMPercent, true
			}
			v.List = append(v.List, pv)
		}
	}
	return v
}

// processesAsked is the answer of a node's process source.
type processesAsked struct {
	list gpu.ProcessList
	err  error
}

// askProcesses asks src for each node's processes together, each
// question bounded by timeout: an agent that does not answer costs the
// page that long once, not once per node.
func askProcesses(ctx context.Context, src GPUProcessSource, nodes []string, timeout time.Duration) map[string]processesAsked {
	if timeout <= 0 {
		timeout = agentProcessesTimeout
	}
	out := make(map[string]processesAsked, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			l, err := src.GPUProcesses(ctx, n, "")
			mu.Lock()
			out[n] = processesAsked{l, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// processesFor is what a card or page shows for GPU gpuIndex of a node
// from its answer: nil where the node is not one processes can be asked
// of (a node only federated or remote-written here), which shows
// nothing rather than an error on every card.
func processesFor(a processesAsked, gpuIndex string) *processesView {
	if errors.Is(a.err, ErrNotFound) {
		return nil
	}
	if a.err != nil {
		return &processesView{Err: a.err.Error()}
	}
	return processesOf(a.list, gpuIndex)
}
