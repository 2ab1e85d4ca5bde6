package gpu

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// defaultEventWait bounds one NVML event wait, and so how long Run's end
// waits for the event loop.
const defaultEventWait = 500 * time.Millisecond

// registerEvents registers every GPU not yet registered for XID events
// and starts the loop that records them. It runs at open and in every
// cycle, so a failed registration (or event set) is retried; a GPU that
// cannot deliver XID events (NOT_SUPPORTED) has no such series.
// DCGM_FI_DEV_XID_ERRORS is the last XID seen, 0 before any.
func (b *nvmlBackend) registerEvents(ctx context.Context) {
	if !b.fields.has(FieldXID) || len(b.gpus) == 0 {
		return
	}
	pending := false
	for _, g := range b.gpus {
		if !g.xidRegistered && !xidUnsupported(g.xidErr) {
			pending = true
		}
	}
	if !pending {
		return
	}
	if b.events == nil {
		es, ret := b.lib.EventSetCreate()
		if ret != nvml.SUCCESS {
			for _, g := range b.gpus {
				b.setXIDErr(g, ret)
			}
			return
		}
		b.events = es
	}
	for _, g := range b.gpus {
		if g.xidRegistered || xidUnsupported(g.xidErr) {
			continue
		}
		ret := g.dev.RegisterEvents(nvml.EventTypeXidCriticalError, b.events)
		if ret == nvml.SUCCESS {
			g.xidRegistered = true
			if g.xidErr != nvml.SUCCESS {
				b.logger.Info("Registered for XID events", "gpu", g.label)
			}
		}
		b.setXIDErr(g, ret)
	}
	if b.stopEvents == nil {
		ectx, cancel := context.WithCancel(ctx)
		b.stopEvents, b.eventsDone = cancel, make(chan struct{})
		go b.eventLoop(ectx, b.events, b.eventsDone)
	}
}

// xidUnsupported reports whether a registration answer means the GPU
// cannot deliver XID events at all (not worth retrying).
func xidUnsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

func (b *nvmlBackend) setXIDErr(g *nvmlGPU, ret nvml.Return) {
	if ret != nvml.SUCCESS && ret != g.xidErr && !xidUnsupported(ret) {
		b.logger.Warn("Cannot register for XID events; retrying every cycle", "gpu", g.label, "err", ret)
	}
	g.xidErr = ret
}

// stopEventLoop ends the event loop and frees the event set. The wait is
// bounded: a Wait hung in the driver (it ignores its timeout, as a GPU
// stuck on XID 119 can) must not hold up shutdown; the loop is then left
// behind and the set not freed, and it reports false.
func (b *nvmlBackend) stopEventLoop() bool {
	if b.stopEvents == nil {
		if b.events != nil {
			b.events.Free()
			b.events = nil
		}
		return true
	}
	b.stopEvents()
	bound := time.NewTimer(b.eventWait + 250*time.Millisecond)
	defer bound.Stop()
	ok := true
	select {
	case <-b.eventsDone:
		b.events.Free()
	case <-bound.C:
		b.logger.Warn("NVML event wait still hung; leaving it behind")
		ok = false
	}
	b.events, b.stopEvents, b.eventsDone = nil, nil, nil
	return ok
}

func (b *nvmlBackend) eventLoop(ctx context.Context, es nvml.EventSet, done chan<- struct{}) {
	defer close(done)
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
	x := g.xid
	x.mu.Lock()
	changed := x.last != ed.EventData
	x.last = ed.EventData
	x.counts[ed.EventData]++
	x.mu.Unlock()
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
	b.gpusMu.RLock()
	gpus := b.gpus
	b.gpusMu.RUnlock()
	for _, g := range gpus {
		if g.dev == dev {
			return g
		}
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil
	}
	for _, g := range gpus {
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
		b.eventErrs = append(b.eventErrs, fieldError{field: fields[FieldXID].name, err: ret})
	}
}

func (b *nvmlBackend) readXID(r *reader, g *nvmlGPU) {
	if !b.fields.has(FieldXID) {
		return
	}
	if !g.xidRegistered {
		if g.xidErr == nvml.SUCCESS || xidUnsupported(g.xidErr) {
			r.s.unsupported.add(FieldXID)
		} else {
			*r.errs = append(*r.errs, fieldError{gpu: r.gpu, field: fields[FieldXID].name, err: fmt.Errorf("register for XID events: %w", g.xidErr)})
		}
		return
	}
	x := g.xid
	x.mu.Lock()
	r.s.Set(FieldXID, float64(x.last))
	if len(x.counts) > 0 {
		r.s.xidCounts = make([]xidCount, 0, len(x.counts))
		for code, n := range x.counts {
			r.s.xidCounts = append(r.s.xidCounts, xidCount{code: code, count: n})
		}
	}
	x.mu.Unlock()
	slices.SortFunc(r.s.xidCounts, func(a, b xidCount) int { return cmp.Compare(a.code, b.code) })
}
