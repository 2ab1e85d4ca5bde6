package gpu

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// defaultEventWait bounds one NVML event wait, and so how long Run's end
// waits for the event loop.
const defaultEventWait = 500 * time.Millisecond

// startEvents registers every GPU for XID events and starts the loop that
// records them. DCGM_FI_DEV_XID_ERRORS is the last XID seen, 0 before any;
// a GPU that cannot deliver XID events has no such series.
func (b *nvmlBackend) startEvents(ctx context.Context) {
	if !b.fields.has(fXID) || len(b.gpus) == 0 {
		return
	}
	es, ret := b.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		b.logger.Warn("Cannot create NVML event set; XID errors will not be reported", "err", ret)
		return
	}
	registered := 0
	for _, g := range b.gpus {
		switch ret := g.dev.RegisterEvents(nvml.EventTypeXidCriticalError, es); ret {
		case nvml.SUCCESS:
			g.xidRegistered = true
			registered++
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			b.logger.Warn("Cannot register for XID events", "gpu", g.label, "err", ret)
		}
	}
	if registered == 0 {
		es.Free()
		return
	}
	ectx, cancel := context.WithCancel(ctx)
	b.events, b.stopEvents, b.eventsDone = es, cancel, make(chan struct{})
	go b.eventLoop(ectx, es)
}

func (b *nvmlBackend) stopEventLoop() {
	if b.stopEvents == nil {
		return
	}
	b.stopEvents()
	<-b.eventsDone
	b.events.Free()
	b.events, b.stopEvents, b.eventsDone = nil, nil, nil
}

func (b *nvmlBackend) eventLoop(ctx context.Context, es nvml.EventSet) {
	defer close(b.eventsDone)
	for ctx.Err() == nil {
		ed, ret := es.Wait(uint32(b.eventWait / time.Millisecond))
		switch ret {
		case nvml.SUCCESS:
			if ed.EventType&nvml.EventTypeXidCriticalError != 0 {
				b.recordXID(ed)
			}
		case nvml.ERROR_TIMEOUT:
		default:
			b.eventError(ret)
			// Don't spin on a persistent failure.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (b *nvmlBackend) recordXID(ed nvml.EventData) {
	g := b.gpuOf(ed.Device)
	if g == nil {
		return
	}
	g.xidMu.Lock()
	changed := g.lastXID != ed.EventData
	g.lastXID = ed.EventData
	g.xidCounts[ed.EventData]++
	g.xidMu.Unlock()
	// Some XIDs come in storms; the counter has them all, the log the changes.
	if changed {
		b.logger.Warn("XID error", "gpu", g.label, "xid", ed.EventData, "msg", xidMessage(ed.EventData))
	}
}

// gpuOf finds the GPU an event belongs to. Events on a MIG instance carry
// the parent device, so they count for the whole GPU.
func (b *nvmlBackend) gpuOf(dev nvml.Device) *nvmlGPU {
	if dev == nil {
		return nil
	}
	for _, g := range b.gpus {
		if g.dev == dev {
			return g
		}
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil
	}
	for _, g := range b.gpus {
		if g.info.uuid == uuid {
			return g
		}
	}
	return nil
}

func (b *nvmlBackend) eventError(ret nvml.Return) {
	b.eventErrMu.Lock()
	defer b.eventErrMu.Unlock()
	if len(b.eventErrs) < 64 {
		b.eventErrs = append(b.eventErrs, fieldError{field: fields[fXID].name, err: ret})
	}
}

func (b *nvmlBackend) readXID(r *reader, g *nvmlGPU) {
	if !b.fields.has(fXID) {
		return
	}
	if !g.xidRegistered {
		r.s.unsupported.add(fXID)
		return
	}
	g.xidMu.Lock()
	r.s.setValue(fXID, float64(g.lastXID))
	if len(g.xidCounts) > 0 {
		r.s.xidCounts = make([]xidCount, 0, len(g.xidCounts))
		for code, n := range g.xidCounts {
			r.s.xidCounts = append(r.s.xidCounts, xidCount{code: code, count: n})
		}
	}
	g.xidMu.Unlock()
	slices.SortFunc(r.s.xidCounts, func(a, b xidCount) int { return cmp.Compare(a.code, b.code) })
}
