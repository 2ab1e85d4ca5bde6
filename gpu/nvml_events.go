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

// defaultWaitErrLimit is how many Wait errors in a row make the event
// loop give up on its set. NVML's Wait errors are set-wide: once one GPU
// in the set is lost, Wait can answer GPU_IS_LOST for ever, and the
// healthy GPUs' XIDs would be lost with it (k8s-device-plugin's health
// loop marks every device unhealthy on any Wait error). A loop that gives
// up has the next cycle build a new set without the lost GPUs.
const defaultWaitErrLimit = 5

// eventSetRef is the event set a cycle's reads register GPUs with: the
// set (nil if there is none), its generation, and why creating it failed.
type eventSetRef struct {
	set nvml.EventSet
	gen uint64
	err nvml.Return
}

// eventSet returns the set this cycle's reads register with, making one
// if there is none: at the first cycle, after a failure to create one (at
// most every retryEvery cycles), after an event loop gave up, and after
// the GPU count changed (a handle must not be registered twice).
// DCGM_FI_DEV_XID_ERRORS is the last XID seen, 0 before any.
func (b *nvmlBackend) eventSet() eventSetRef {
	if !b.fields.has(FieldXID) || len(b.gpus) == 0 {
		return eventSetRef{}
	}
	if b.eventsFailed.Load() || b.rebuildEvents {
		if b.eventsFailed.Load() {
			b.logger.Warn("Rebuilding the XID event set without the lost GPUs")
		}
		b.rebuildEvents = false
		b.dropEventSet()
	}
	if b.events == nil && b.cycle >= b.eventsRetry && !xidUnsupported(b.eventsErr) {
		es, ret := b.lib.EventSetCreate()
		if ret != nvml.SUCCESS {
			b.eventsErr, b.eventsRetry = ret, b.cycle+retryEvery
			return eventSetRef{err: ret}
		}
		b.lastGen++
		b.events, b.eventsGen, b.eventsErr = es, b.lastGen, nvml.SUCCESS
	}
	return eventSetRef{set: b.events, gen: b.eventsGen, err: b.eventsErr}
}

// registerXID registers the GPU with this cycle's event set, unless it is
// registered with it already, cannot deliver XID events (NOT_SUPPORTED),
// may not (NO_PERMISSION: reported as denied, not retried), or failed
// less than retryEvery cycles ago. It runs in the GPU's read, under its
// deadline: a sick GPU's registration can block as long as its reads.
func (b *nvmlBackend) registerXID(g *nvmlGPU, es eventSetRef, cycle uint64) {
	if !b.fields.has(FieldXID) {
		return
	}
	x := g.xid
	x.mu.Lock()
	var due bool
	switch {
	case xidUnsupported(x.regErr), x.regErr == nvml.ERROR_NO_PERMISSION:
	case es.set != nil:
		due = x.regGen != es.gen && cycle >= x.regNext
	case es.err != nvml.SUCCESS:
		// No set to register with: the GPU's XIDs fail for the same reason.
		x.regGen, x.regErr = 0, es.err
	}
	x.mu.Unlock()
	if !due {
		return
	}
	ret := g.dev.RegisterEvents(nvml.EventTypeXidCriticalError, es.set)
	x.mu.Lock()
	prev := x.regErr
	x.regErr = ret
	if ret == nvml.SUCCESS {
		x.regGen, x.seen = es.gen, true
	} else {
		x.regNext = cycle + retryEvery
	}
	x.mu.Unlock()
	switch {
	case ret == nvml.SUCCESS && prev != nvml.SUCCESS:
		b.logger.Info("Registered for XID events", "gpu", g.label)
	case ret != prev && ret != nvml.SUCCESS && !xidUnsupported(ret) && ret != nvml.ERROR_NO_PERMISSION && ret != nvml.ERROR_GPU_IS_LOST:
		b.logger.Warn("Cannot register for XID events; retrying", "gpu", g.label, "every_cycles", retryEvery, "err", ret)
	}
}

// xidUnsupported reports whether a registration answer means the GPU
// cannot deliver XID events at all (not worth retrying).
func xidUnsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// startEventLoop starts the loop that records XID events once a GPU is
// registered with the set.
func (b *nvmlBackend) startEventLoop(ctx context.Context, es eventSetRef) {
	if es.set == nil || b.stopEvents != nil || es.set != b.events {
		return
	}
	registered := false
	for _, g := range b.gpus {
		if g.ident.Load() == nil { // g.xid is set before ident
			continue
		}
		g.xid.mu.Lock()
		registered = registered || g.xid.regGen == es.gen
		g.xid.mu.Unlock()
	}
	if !registered {
		return
	}
	ectx, cancel := context.WithCancel(ctx)
	b.stopEvents, b.eventsDone = cancel, make(chan struct{})
	go b.eventLoop(ectx, es.set, b.eventsDone)
}

// stopEventLoop ends the event loop. The wait is bounded: a Wait hung in
// the driver (it ignores its timeout, as a GPU stuck on XID 119 can) must
// not hold up shutdown; the loop is then left behind and it reports false.
func (b *nvmlBackend) stopEventLoop() bool {
	if b.stopEvents == nil {
		return true
	}
	b.stopEvents()
	bound := time.NewTimer(b.eventWait + 250*time.Millisecond)
	defer bound.Stop()
	ok := true
	select {
	case <-b.eventsDone:
	case <-bound.C:
		b.logger.Warn("NVML event wait still hung; leaving it behind")
		ok = false
	}
	b.stopEvents, b.eventsDone = nil, nil
	return ok
}

// dropEventSet ends the event loop and frees the set, unless a call may
// still use it (a hung Wait, a registration in a hung read): freeing it
// under a running call could crash the process, so it is then left
// behind. It reports false if the Wait is hung.
func (b *nvmlBackend) dropEventSet() bool {
	ok := b.stopEventLoop()
	if b.events != nil {
		if ok && !b.busyAny() {
			b.events.Free()
		}
		b.events = nil
	}
	b.eventsFailed.Store(false)
	b.eventsGen, b.eventsErr, b.eventsRetry = 0, nvml.SUCCESS, 0
	return ok
}

// eventLoop records the XID events of es until ctx ends, or until Wait
// has failed waitErrLimit times in a row: the next cycle then builds a
// new set (eventSet).
func (b *nvmlBackend) eventLoop(ctx context.Context, es nvml.EventSet, done chan<- struct{}) {
	defer close(done)
	defer func() {
		if p := recover(); p != nil {
			b.logger.Error("The XID event loop panicked; the event set is rebuilt at the next cycle", "panic", p)
			b.eventsFailed.Store(true)
		}
	}()
	failures := 0
	for ctx.Err() == nil {
		ed, ret := es.Wait(uint32(b.eventWait / time.Millisecond))
		switch ret {
		case nvml.SUCCESS:
			failures = 0
			if ed.EventType&nvml.EventTypeXidCriticalError != 0 {
				if g := b.gpuOf(ed.Device); g != nil {
					b.recordXID(g, ed.EventData, xidFromNVML, time.Now())
				}
			}
		case nvml.ERROR_TIMEOUT:
			failures = 0
		default:
			b.eventError(ret)
			if failures++; failures >= b.waitErrLimit {
				b.logger.Warn("NVML's event wait keeps failing; the XID event set is rebuilt without the lost GPUs", "errors", failures, "err", ret)
				b.eventsFailed.Store(true)
				return
			}
			// Don't spin on a persistent failure.
			select {
			case <-ctx.Done():
			case <-time.After(b.eventErrPause):
			}
		}
	}
}

// gpuOf finds the GPU an event belongs to. Events on a MIG instance carry
// the parent device, so they count for the whole GPU.
func (b *nvmlBackend) gpuOf(dev nvml.Device) *nvmlGPU {
	if dev == nil {
		return nil
	}
	gpus := b.gpuList()
	for _, g := range gpus {
		if id := g.ident.Load(); id != nil && id.dev == dev {
			return g
		}
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil
	}
	for _, g := range gpus {
		if id := g.ident.Load(); id != nil && id.uuid == uuid {
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

// readXID sets the GPU's XID series from its record. They are published
// once an XID source has worked for the GPU (x.seen) or while the kernel
// log is read, and stay through event set rebuilds and losses. A
// registration that failed is an error each cycle (NO_PERMISSION is
// denied, NOT_SUPPORTED unsupported, GPU_IS_LOST the device error's).
func (b *nvmlBackend) readXID(r *reader, g *nvmlGPU) {
	if !b.fields.has(FieldXID) {
		return
	}
	x := g.xid
	x.mu.Lock()
	regErr, publish := x.regErr, x.seen || b.kernelLogActive()
	if publish {
		r.s.Set(FieldXID, float64(x.last))
		if len(x.counts) > 0 {
			r.s.xidCounts = make([]xidCount, 0, len(x.counts))
			for code, n := range x.counts {
				r.s.xidCounts = append(r.s.xidCounts, xidCount{code: code, count: n})
			}
		}
	}
	x.mu.Unlock()
	slices.SortFunc(r.s.xidCounts, func(a, b xidCount) int { return cmp.Compare(a.code, b.code) })
	switch {
	case regErr == nvml.ERROR_GPU_IS_LOST:
		// The device error says it; the GPU registers when it answers.
	case regErr == nvml.SUCCESS, xidUnsupported(regErr):
		if !publish {
			r.s.unsupported.add(FieldXID)
		}
	case regErr == nvml.ERROR_NO_PERMISSION:
		if !publish {
			r.s.unsupported.add(FieldXID)
			r.s.denied.add(FieldXID)
		}
	default:
		*r.errs = append(*r.errs, fieldError{gpu: r.gpu, field: fields[FieldXID].name, err: fmt.Errorf("register for XID events: %w", regErr)})
	}
}
