package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// errNoDriver means libnvidia-ml could not be loaded: for backend auto that
// is a machine without NVIDIA GPUs, not a failure.
var errNoDriver = errors.New("NVIDIA driver library libnvidia-ml.so.1 not found")

// nvmlBackend reads GPUs through NVML. All access goes through
// nvml.Interface and nvml.Device so that tests can substitute go-nvml's
// mock; the real library is dlopen'ed by Init, so gpuscope builds and runs
// where no driver is installed.
type nvmlBackend struct {
	lib      nvml.Interface
	logger   *slog.Logger
	interval time.Duration
	devices  []string // globs of files that show NVIDIA GPUs are there
	procRoot string
	// foreignPIDNS: gpuscope is not in the host's pid namespace, so the
	// pids NVML reports cannot be joined to containers (see readProcesses).
	foreignPIDNS bool
	hostname     string
	withHost     bool
	fields       fieldSet

	initialised bool
	syms        nvmlSymbols
	driver      string
	// cycle counts Sample calls: retries are spaced in cycles.
	cycle uint64
	// gpus has one slot per NVML index, identified or not; counted says
	// whether the GPUs were counted since NVML was opened. The event loop
	// and the kernel-log reader read the slice, so it is replaced (never
	// changed in place) under gpusMu.
	gpusMu  sync.RWMutex
	gpus    []*nvmlGPU
	counted bool
	grouper *containerGrouper
	// readTimeout bounds one GPU's reads in a cycle; stale is how old a
	// GPU's last complete sample may be before it is served as absent.
	readTimeout time.Duration
	stale       time.Duration
	// xids keeps each GPU's XID record by UUID across re-initialisation;
	// GPUs are identified side by side, hence the lock.
	xidsMu sync.Mutex
	xids   map[string]*xidState

	// The XID event set (nvml_events.go): events is the set, eventsGen its
	// generation (a GPU is registered with the set of its xidState's
	// regGen), eventsErr why creating it failed and eventsRetry the cycle
	// it is tried again. eventsFailed is set by an event loop that gave up
	// (persistent Wait errors, a panic), rebuildEvents when the GPU count
	// changed: either makes the next cycle build a new set.
	eventWait     time.Duration
	eventErrPause time.Duration
	waitErrLimit  int
	events        nvml.EventSet
	eventsGen     uint64
	lastGen       uint64
	eventsErr     nvml.Return
	eventsRetry   uint64
	eventsFailed  atomic.Bool
	rebuildEvents bool
	stopEvents    context.CancelFunc
	eventsDone    chan struct{}
	eventErrMu    sync.Mutex
	eventErrs     []fieldError

	// kmsg reads XIDs from the kernel log (kmsg.go); kernelLog is its
	// path; kmsgActive says whether it reads; kernelLogDenied whether
	// the lack of access was logged (once per process).
	kernelLog       string
	kmsg            *kmsgReader
	kmsgActive      atomic.Bool
	kernelLogDenied bool
}

// retryEvery is how many cycles apart a GPU that failed identification
// or XID registration is tried again. A sick GPU's calls can each block
// for tens of seconds (GSP RPC timeouts, XID 119), and each try holds a
// goroutine until it returns: at 15 s intervals this is once a minute.
const retryEvery = 4

// nvmlGPU is one NVML index and the state its reads carry between cycles.
// Its reads, identification and XID registration run in a goroutine of
// their own under busy, within the cycle's readTimeout; the fields below
// ident are owned by that goroutine while busy, by the cycle otherwise.
type nvmlGPU struct {
	index int
	label string // gpu label value, for errors

	// ident is set once the GPU is identified; the event loop and the
	// kernel-log reader match events with it.
	ident atomic.Pointer[gpuIdent]
	// verify: the GPU count changed since the GPU was identified, so NVML
	// may have given its index to another GPU; its next read checks the
	// UUID at the index first.
	verify atomic.Bool
	// busy is set while a read of the GPU runs; a read still hung in the
	// driver keeps the GPU out of later cycles until it returns.
	busy atomic.Bool

	dev  nvml.Device
	info *Identity
	// identErr is why identification failed; identNext the cycle it is
	// tried again.
	identErr  error
	identNext uint64
	// lost: the last read found the GPU off the bus. It is not registered
	// for XID events until it answers again (a lost GPU in an event set
	// makes every Wait on it fail). Written by the cycle only.
	lost bool

	fieldValues []nvml.FieldValue // reused request for GetFieldValues
	fieldMap    []fieldValueSpec  // what each entry of fieldValues feeds

	// unifiedLogged: that the GPU has no framebuffer of its own was logged.
	unifiedLogged bool

	// lastTemp is the last GPU temperature at or below 200 °C (tempValid:
	// there was one), served in place of a higher reading as DCGM does.
	lastTemp  float64
	tempValid bool

	nvlinkPrevKiB float64
	nvlinkPrevAt  time.Time
	nvlinkPrimed  bool

	lastProcessSeen uint64 // newest GetProcessUtilization timestamp, µs
	// utilReadAt is when process utilisation was last read; utilPeriod the
	// driver's sample period as its timestamps show it (0: not yet seen).
	utilReadAt time.Time
	utilPeriod time.Duration
	// The GPU answered NOT_SUPPORTED for the MPS or graphics process list.
	noMPSList, noGraphicsList bool
	gpm                       *gpmState
	mig                       *migState // MIG mode and GPU instances (mig_nvml.go)

	xid *xidState

	// last is the GPU's last complete sample, served while a read hangs
	// until it is older than the backend's stale; lastAt is its time.
	// Written by the cycle only.
	last   *GPUSample
	lastAt time.Time
}

// gpuIdent is what identifies a GPU's events: its handle, its UUID as
// NVML gives it, and its PCI address (the kernel log names GPUs by it).
type gpuIdent struct {
	dev  nvml.Device
	uuid string
	pci  pciAddr
}

// pciAddr is a PCI domain, bus and device number.
type pciAddr struct{ domain, bus, device uint32 }

func newSlot(i int) *nvmlGPU { return &nvmlGPU{index: i, label: strconv.Itoa(i)} }

// xidState is a GPU's XID record: the last XID and the count by code,
// and the GPU's registration for NVML's XID events.
type xidState struct {
	mu     sync.Mutex
	last   uint64
	counts map[uint64]uint64
	// seen: an XID source has worked for the GPU (it registered for NVML's
	// events, or the kernel log named it); its XID series are published
	// from then on, through event set rebuilds and losses.
	seen bool
	// regGen is the generation of the event set the GPU is registered
	// with (0: none); regErr is the last registration's answer, regNext the
	// cycle a failed one is tried again.
	regGen  uint64
	regErr  nvml.Return
	regNext uint64
	// recent are the last XIDs recorded, by source, to count once an XID
	// that both NVML and the kernel log report (kmsg.go).
	recent []xidReport
}

func newNVMLBackend(lib nvml.Interface, o *Options, env *BackendEnv) *nvmlBackend {
	timeout := time.Duration(o.Config.Timeout)
	if timeout <= 0 {
		timeout = o.Interval
	}
	return &nvmlBackend{
		// The reads of all GPUs run side by side; what is left of the
		// cycle's deadline is for grouping processes and publishing.
		readTimeout:   timeout * 3 / 4,
		stale:         2 * o.Interval,
		xids:          map[string]*xidState{},
		eventErrPause: time.Second,
		waitErrLimit:  defaultWaitErrLimit,
		kernelLog:     o.KernelLog,
		lib:           lib,
		logger:        o.Logger,
		interval:      o.Interval,
		devices:       o.NVIDIADevices,
		procRoot:      o.ProcRoot,
		hostname:      env.hostname,
		withHost:      env.withHost,
		fields:        env.fields,
		eventWait:     defaultEventWait,
		grouper:       env.grouper,
	}
}

func (b *nvmlBackend) Name() string { return BackendNVML }

func (b *nvmlBackend) Open(ctx context.Context) (err error) {
	if ret := b.lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			if dev := b.nvidiaDevice(); dev != "" {
				return fmt.Errorf("NVIDIA GPU present (%s) but libnvidia-ml.so.1 cannot be loaded: install the driver's libraries, or give the container the NVIDIA runtime", dev)
			}
			return errNoDriver
		}
		if ret == nvml.ERROR_LIB_RM_VERSION_MISMATCH {
			if why := restartWouldLoadMatch(b.procRoot); why != "" {
				return fmt.Errorf("initialise NVML: %w (%s): %w", ret, why, ErrRestartNeeded)
			}
		}
		return fmt.Errorf("initialise NVML: %w", ret)
	}
	b.initialised = true
	defer func() {
		if err != nil {
			err = errors.Join(err, b.shutdown())
		}
	}()
	b.syms = lookupSymbols(b.lib)
	driver, ret := b.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("read driver version: %w", ret)
	}
	b.driver = driver
	b.foreignPIDNS = foreignPIDNamespace(b.procRoot)
	if b.foreignPIDNS && b.fields.has(FieldContainerMemory) {
		b.logger.Warn("gpuscope is not in the host's pid namespace; per-container GPU metrics are off (run it with the host's pid namespace, e.g. docker --pid host)",
			"pid_namespace", filepath.Join(b.procRoot, "self/ns/pid"))
	}
	b.setGPUs(nil)
	b.counted = false
	// Only the count here: each GPU is identified in its own read, under
	// the cycle's deadline, so that one sick GPU delays no other.
	if err := b.recount(); err != nil {
		return err
	}
	b.startKernelLog(ctx)
	b.logger.Info("NVML opened", "driver", driver, "gpus", len(b.gpus))
	return nil
}

// nvmlSymbols says which NVML functions newer than the oldest supported
// driver (R450) the loaded libnvidia-ml has. go-nvml calls them as plain
// cgo functions on a library dlopen'ed RTLD_LAZY: calling one the library
// lacks aborts the process in the dynamic linker, beyond recover. So each
// is looked up once at open, and a field whose function is missing is
// reported unsupported (gpuscope_gpu_field_supported 0), as DCGM does for
// an older driver. go-nvml already picks the versioned process and event
// calls (_v2, _v3) the library has.
type nvmlSymbols struct {
	memoryV2       bool // R510: FB_RESERVED; else v1 memory, used includes reserved
	gpm            bool // R520: DCGM_FI_PROF_* (Hopper and newer)
	clocksEvent    bool // R535; before it the same bits from the throttle-reasons call
	clocksThrottle bool
	remappedRows   bool
	energy         bool
	fieldValues    bool
	processUtil    bool
	mps            bool
	graphics       bool
	gridLicense    bool
	pcieThroughput bool
	pcieReplay     bool
	// Older than R450, guarded all the same: a driver that lacks them
	// costs their field, not the process.
	fanSpeed           bool
	enforcedPowerLimit bool
}

// symbolNames maps each guarded function to its flag; tests use it to
// report each one missing in turn.
var symbolNames = []struct {
	name string
	flag func(*nvmlSymbols) *bool
}{
	{"nvmlDeviceGetMemoryInfo_v2", func(s *nvmlSymbols) *bool { return &s.memoryV2 }},
	{"nvmlGpmQueryDeviceSupport", func(s *nvmlSymbols) *bool { return &s.gpm }},
	{"nvmlGpmSampleAlloc", func(s *nvmlSymbols) *bool { return &s.gpm }},
	{"nvmlGpmSampleGet", func(s *nvmlSymbols) *bool { return &s.gpm }},
	{"nvmlGpmMetricsGet", func(s *nvmlSymbols) *bool { return &s.gpm }},
	{"nvmlGpmSampleFree", func(s *nvmlSymbols) *bool { return &s.gpm }},
	{"nvmlDeviceGetCurrentClocksEventReasons", func(s *nvmlSymbols) *bool { return &s.clocksEvent }},
	{"nvmlDeviceGetCurrentClocksThrottleReasons", func(s *nvmlSymbols) *bool { return &s.clocksThrottle }},
	{"nvmlDeviceGetRemappedRows", func(s *nvmlSymbols) *bool { return &s.remappedRows }},
	{"nvmlDeviceGetTotalEnergyConsumption", func(s *nvmlSymbols) *bool { return &s.energy }},
	{"nvmlDeviceGetFieldValues", func(s *nvmlSymbols) *bool { return &s.fieldValues }},
	{"nvmlDeviceGetProcessUtilization", func(s *nvmlSymbols) *bool { return &s.processUtil }},
	{"nvmlDeviceGetMPSComputeRunningProcesses", func(s *nvmlSymbols) *bool { return &s.mps }},
	{"nvmlDeviceGetGraphicsRunningProcesses", func(s *nvmlSymbols) *bool { return &s.graphics }},
	{"nvmlDeviceGetGridLicensableFeatures", func(s *nvmlSymbols) *bool { return &s.gridLicense }},
	{"nvmlDeviceGetPcieThroughput", func(s *nvmlSymbols) *bool { return &s.pcieThroughput }},
	{"nvmlDeviceGetPcieReplayCounter", func(s *nvmlSymbols) *bool { return &s.pcieReplay }},
	{"nvmlDeviceGetFanSpeed", func(s *nvmlSymbols) *bool { return &s.fanSpeed }},
	{"nvmlDeviceGetEnforcedPowerLimit", func(s *nvmlSymbols) *bool { return &s.enforcedPowerLimit }},
}

func lookupSymbols(lib nvml.Interface) nvmlSymbols {
	var s nvmlSymbols
	// A flag shared by several functions (GPM) is true only if all are there.
	seen := map[*bool]bool{}
	for _, sym := range symbolNames {
		f := sym.flag(&s)
		ok := hasSymbol(lib, sym.name)
		if !seen[f] {
			*f, seen[f] = ok, true
		} else {
			*f = *f && ok
		}
	}
	return s
}

// hasSymbol reports whether the loaded library exports name. A binding
// without the extension (a bare mock) is taken to have everything.
func hasSymbol(lib nvml.Interface, name string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	ext := lib.Extensions()
	if ext == nil {
		return true
	}
	return ext.LookupSymbol(name) == nil
}

// initPIDNamespace is how the kernel names the initial (host) pid
// namespace: its inode is PROC_PID_INIT_INO.
const initPIDNamespace = "pid:[4026531836]"

// foreignPIDNamespace reports whether the process reading procRoot runs
// in a pid namespace other than the host's. NVML then reports compute
// processes by their pids in gpuscope's namespace (dropping those it
// cannot see) but utilisation samples by host pid, so neither joins
// reliably to a cgroup. Unknown (unreadable) counts as the host's.
func foreignPIDNamespace(procRoot string) bool {
	ns, err := os.Readlink(filepath.Join(procRoot, "self", "ns", "pid"))
	return err == nil && ns != initPIDNamespace
}

// nvidiaDevice returns a file that shows NVIDIA GPUs are there, or "".
func (b *nvmlBackend) nvidiaDevice() string {
	for _, pattern := range b.devices {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// setGPUs replaces the GPU list the event loop reads.
func (b *nvmlBackend) setGPUs(gpus []*nvmlGPU) {
	b.gpusMu.Lock()
	b.gpus = gpus
	b.gpusMu.Unlock()
}

// gpuList is the GPU list, for readers outside the cycle.
func (b *nvmlBackend) gpuList() []*nvmlGPU {
	b.gpusMu.RLock()
	defer b.gpusMu.RUnlock()
	return b.gpus
}

// recount counts the GPUs: one NVML call a cycle, which asks no GPU. When
// the count changes (a GPU hot-removed, drained or added), NVML may give
// the remaining GPUs other indexes; each identified GPU then checks, in
// its next read, that its index still names it (its UUID), and is
// identified afresh where it does not. Slots past the new count go, and
// the XID event set is rebuilt, so that no handle stays registered twice.
func (b *nvmlBackend) recount() error {
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("count GPUs: %w", ret)
	}
	old := b.gpus
	if b.counted && n == len(old) {
		return nil
	}
	if b.counted {
		b.logger.Info("The number of GPUs changed; checking that each GPU's index still names it", "was", len(old), "now", n)
		b.rebuildEvents = true
	}
	gpus := make([]*nvmlGPU, n)
	for i := range gpus {
		if i < len(old) {
			gpus[i] = old[i]
			if b.counted && old[i].ident.Load() != nil {
				old[i].verify.Store(true)
			}
			continue
		}
		gpus[i] = newSlot(i)
	}
	for _, g := range old[min(n, len(old)):] {
		b.retire(g)
	}
	b.counted = true
	b.setGPUs(gpus)
	return nil
}

// retire releases what a GPU that left its slot holds, unless a read of
// it still runs: freeing under a call in the driver could crash the
// process, so that is left behind.
func (b *nvmlBackend) retire(g *nvmlGPU) {
	if g.busy.Load() {
		return
	}
	if g.gpm != nil {
		g.gpm.free()
	}
	g.mig.free()
}

// identify reads what identifies the GPU at its index (handle, UUID, name,
// PCI address) and prepares its reads.
func (b *nvmlBackend) identify(g *nvmlGPU) error {
	dev, ret := b.lib.DeviceGetHandleByIndex(g.index)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("get handle: %w", ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("read UUID: %w", ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("read name: %w", ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("read PCI info: %w", ret)
	}
	g.dev = dev
	g.info = newIdentity(g.index, uuid, pciBusID(pci), name, b.driver, b.hostname, b.withHost)
	g.xid = b.xidState(uuid)
	// A GPU identified afresh (a new NVML session, or another GPU at its
	// index) registers afresh.
	g.xid.mu.Lock()
	g.xid.regGen, g.xid.regErr, g.xid.regNext = 0, nvml.SUCCESS, 0
	g.xid.mu.Unlock()
	g.fieldValues, g.fieldMap = fieldValueRequest(b.fields)
	if b.fields.has(FieldProfGrEngineActive) && b.syms.gpm {
		g.gpm = b.openGPM(dev)
	}
	g.ident.Store(&gpuIdent{dev: dev, uuid: uuid, pci: pciAddr{pci.Domain, pci.Bus, pci.Device}})
	return nil
}

// xidState is the XID record of the GPU with uuid, kept across NVML
// sessions.
func (b *nvmlBackend) xidState(uuid string) *xidState {
	b.xidsMu.Lock()
	defer b.xidsMu.Unlock()
	x := b.xids[uuid]
	if x == nil {
		x = &xidState{counts: map[uint64]uint64{}}
		b.xids[uuid] = x
	}
	return x
}

// verifyIndex checks, after the GPU count changed, that NVML's index still
// names the GPU: moved is the UUID now at the index where it is another
// GPU's.
func (b *nvmlBackend) verifyIndex(g *nvmlGPU) (moved string, err error) {
	dev, ret := b.lib.DeviceGetHandleByIndex(g.index)
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("get handle: %w", ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("read UUID: %w", ret)
	}
	if uuid != g.ident.Load().uuid {
		return uuid, nil
	}
	return "", nil
}

// pciBusID formats the bus id the way NVML and dcgm-exporter print it,
// 00000000:64:00.0, falling back to the numeric fields when the driver
// leaves the string empty.
func pciBusID(p nvml.PciInfo) string {
	var buf [len(p.BusId)]byte
	n := 0
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		buf[n] = byte(c)
		n++
	}
	if n > 0 {
		return string(buf[:n])
	}
	return fmt.Sprintf("%08X:%02X:%02X.0", p.Domain, p.Bus, p.Device)
}

// errReadHung is the device error of a GPU whose read did not finish in
// time; the GPU is left out until the read returns.
type errReadHung struct{ after time.Duration }

func (e errReadHung) Error() string {
	return fmt.Sprintf("NVML read of the GPU still running after %s", e.after)
}

// gpuRead is one GPU's outcome in a cycle.
type gpuRead struct {
	i        int
	gs       GPUSample
	errs     []fieldError
	answered bool
	lost     bool
	gone     nvml.Return
	// identErr: the GPU could not be identified, so nothing was read.
	identErr error
	// moved is the UUID now at the GPU's index, where NVML gave the index
	// to another GPU; nothing was read.
	moved string
}

// slotState is what a cycle did with a GPU's slot.
type slotState uint8

const (
	slotStarted slotState = iota // a read started this cycle
	slotHung                     // a read from an earlier cycle still runs
	slotWaiting                  // not identified, and not due to be tried again
)

// Sample reads the GPUs side by side, each within readTimeout, so that one
// hung NVML call stalls neither the other GPUs nor shutdown. What a GPU
// needs before it can be read, identification (at open, or when it
// appears or failed before) and XID registration, runs in the same read
// under the same deadline, at most every retryEvery cycles after a
// failure. A GPU whose read does not finish is counted as a timeout, and
// served from its last complete sample until that is older than stale;
// then only its XID series and last-sample time are.
func (b *nvmlBackend) Sample(ctx context.Context, now time.Time) *Sample {
	b.cycle++
	cycle := b.cycle
	s := &Sample{time: now}
	if err := b.recount(); err != nil {
		s.errs = append(s.errs, fieldError{field: "driver", err: err})
		if driverGoneErr(err) {
			s.reinit = err
		}
	}
	es := b.eventSet()
	gpus := b.gpus
	results := make(chan gpuRead, len(gpus))
	done := make([]*gpuRead, len(gpus))
	states := make([]slotState, len(gpus))
	running := 0
	for i, g := range gpus {
		if g.ident.Load() == nil && !g.busy.Load() && cycle < g.identNext {
			states[i] = slotWaiting
			continue
		}
		if !g.busy.CompareAndSwap(false, true) {
			states[i] = slotHung
			continue
		}
		running++
		go func() {
			res := gpuRead{i: i}
			b.readSlot(g, &res, es, cycle, now)
			g.busy.Store(false) // before the send: the next cycle may start at once
			results <- res
		}()
	}
	timer := time.NewTimer(b.readTimeout)
wait:
	for running > 0 {
		select {
		case res := <-results:
			running--
			done[res.i] = &res
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	timer.Stop()

	s.gpus = make([]GPUSample, 0, len(gpus))
	for i, g := range gpus {
		res := done[i]
		switch {
		case states[i] == slotWaiting:
			s.errs = append(s.errs, fieldError{gpu: g.label, field: "device", err: g.identErr})
			continue
		case res == nil:
			s.errs = append(s.errs, fieldError{gpu: g.label, field: "timeout", err: errReadHung{b.readTimeout}})
			if g.ident.Load() != nil {
				s.gpus = append(s.gpus, b.staleSample(g, now))
			}
			continue
		case res.identErr != nil:
			s.errs = append(s.errs, res.errs...)
			s.errs = append(s.errs, fieldError{gpu: g.label, field: "device", err: res.identErr})
			continue
		case res.moved != "":
			b.replaceSlot(i, res.moved)
			continue
		}
		s.errs = append(s.errs, res.errs...)
		g.lost = res.lost
		if res.answered {
			s.read++
			res.gs.at = now
			g.last, g.lastAt = &res.gs, now
		} else {
			res.gs.at = g.lastAt
		}
		if res.gone != nvml.SUCCESS && s.reinit == nil {
			s.reinit = fmt.Errorf("GPU %s: %w", g.label, res.gone)
		}
		s.gpus = append(s.gpus, res.gs)
	}
	b.startEventLoop(ctx, es)
	b.eventErrMu.Lock()
	s.errs = append(s.errs, b.eventErrs...)
	b.eventErrs = b.eventErrs[:0]
	b.eventErrMu.Unlock()
	if s.read == 0 && s.reinit == nil {
		// Every call failed: unless every GPU is merely off the bus (they
		// come back by answering again) or hung (NVML must not be shut
		// down under a running call), start NVML afresh.
		for _, e := range s.errs {
			var hung errReadHung
			if !errors.Is(e.err, nvml.ERROR_GPU_IS_LOST) && !errors.As(e.err, &hung) {
				s.reinit = fmt.Errorf("every NVML call failed; GPU %s: %w", e.gpu, e.err)
				break
			}
		}
	}
	return s
}

// readSlot is one GPU's part of a cycle, in its own goroutine: it
// identifies the GPU if it is not yet, checks its index after the count
// changed, registers it for XID events if it is not yet, and reads it.
func (b *nvmlBackend) readSlot(g *nvmlGPU, res *gpuRead, es eventSetRef, cycle uint64, now time.Time) {
	defer func() {
		// A misbehaving driver binding must cost one GPU's cycle, not the process.
		if p := recover(); p != nil {
			res.answered = false
			if g.ident.Load() == nil {
				res.identErr = fmt.Errorf("panic: %v", p)
				g.identErr, g.identNext = res.identErr, cycle+retryEvery
				return
			}
			res.errs = append(res.errs, fieldError{gpu: g.label, field: "device", err: fmt.Errorf("panic: %v", p)})
		}
	}()
	switch {
	case g.ident.Load() == nil:
		if err := b.identify(g); err != nil {
			res.identErr = err
			g.identErr, g.identNext = err, cycle+retryEvery
			return
		}
		g.identErr = nil
	case g.verify.Load():
		moved, err := b.verifyIndex(g)
		switch {
		case err != nil:
			// Read it all the same: the handle names the same GPU
			// whatever its index, and its read says whether it is lost.
		case moved != "":
			res.moved = moved
			return
		default:
			g.verify.Store(false)
		}
	}
	if !g.lost {
		b.registerXID(g, es, cycle)
	}
	res.gs = GPUSample{info: g.info}
	res.answered, res.lost, res.gone = b.readGPU(g, &res.gs, &res.errs, now)
}

// replaceSlot gives slot i, whose index NVML now gives the GPU with UUID
// now, a fresh slot: the GPU there is identified at the next cycle, with
// its own state; the XID record of each stays with its UUID.
func (b *nvmlBackend) replaceSlot(i int, now string) {
	old := b.gpus[i]
	b.logger.Info("NVML gave the GPU's index to another GPU; identifying it again",
		"gpu", old.label, "uuid", old.ident.Load().uuid, "now", now)
	b.retire(old)
	gpus := slices.Clone(b.gpus)
	gpus[i] = newSlot(i)
	b.setGPUs(gpus)
	b.rebuildEvents = true
}

// staleSample is what is served for a GPU whose read is hung: its last
// complete sample while that is recent enough, else its XID series only.
func (b *nvmlBackend) staleSample(g *nvmlGPU, now time.Time) GPUSample {
	if g.last != nil && now.Sub(g.lastAt) <= b.stale {
		gs := *g.last
		return gs
	}
	gs := GPUSample{info: g.info, at: g.lastAt}
	var errs []fieldError
	b.readXID(&reader{s: &gs, errs: &errs, gpu: g.label}, g)
	return gs
}

// busyAny reports whether a GPU read is still running.
func (b *nvmlBackend) busyAny() bool {
	for _, g := range b.gpuList() {
		if g.busy.Load() {
			return true
		}
	}
	return false
}

// driverGoneErr reports whether err carries a driverGone return.
func driverGoneErr(err error) bool {
	var ret nvml.Return
	return errors.As(err, &ret) && driverGone(ret)
}

func (b *nvmlBackend) Close() error { return b.shutdown() }

func (b *nvmlBackend) shutdown() error {
	if !b.initialised {
		return nil
	}
	b.stopKernelLog()
	hung := !b.dropEventSet()
	gpus := b.gpuList()
	for _, g := range gpus {
		hung = hung || g.busy.Load()
	}
	b.setGPUs(nil)
	b.counted = false
	b.initialised = false
	if hung {
		// Freeing or shutting down under a call still running in the
		// driver could crash the process; leave NVML as it is.
		b.logger.Warn("An NVML call is still hung; leaving NVML initialised")
		return nil
	}
	for _, g := range gpus {
		if g.gpm != nil {
			g.gpm.free()
		}
		g.mig.free()
	}
	if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shut down NVML: %w", ret)
	}
	return nil
}
