package gpu

import (
	"cmp"
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
	// gpus are the identified GPUs by index; the event loop reads the
	// slice, so it is replaced (never changed in place) under gpusMu.
	gpusMu       sync.RWMutex
	gpus         []*nvmlGPU
	unidentified []fieldError // GPUs that failed identification this cycle
	grouper      *containerGrouper
	// readTimeout bounds one GPU's reads in a cycle; stale is how old a
	// GPU's last complete sample may be before it is served as absent.
	readTimeout time.Duration
	stale       time.Duration
	// xids keeps each GPU's XID record by UUID across re-initialisation.
	xids map[string]*xidState

	eventWait  time.Duration
	events     nvml.EventSet
	stopEvents context.CancelFunc
	eventsDone chan struct{}
	eventErrMu sync.Mutex
	eventErrs  []fieldError
}

// nvmlGPU is one device and the state its reads carry between cycles.
type nvmlGPU struct {
	dev   nvml.Device
	info  *Identity
	label string // gpu label value, for errors

	fieldValues []nvml.FieldValue // reused request for GetFieldValues
	fieldMap    []fieldValueSpec  // what each entry of fieldValues feeds

	nvlinkPrevKiB float64
	nvlinkPrevAt  time.Time
	nvlinkPrimed  bool

	lastProcessSeen uint64 // newest GetProcessUtilization timestamp, µs
	// The GPU answered NOT_SUPPORTED for the MPS or graphics process list.
	noMPSList, noGraphicsList bool
	gpm                       *gpmState
	mig                       *migState // MIG mode and GPU instances (mig_nvml.go)

	xidRegistered bool
	xidErr        nvml.Return // why registration failed, SUCCESS if it did not
	xid           *xidState

	// busy is set while a read of the GPU runs; a read still hung in the
	// driver keeps the GPU out of later cycles until it returns.
	busy atomic.Bool
	// last is the GPU's last complete sample, served while a read hangs
	// until it is older than the backend's stale; lastAt is its time.
	last   *GPUSample
	lastAt time.Time
}

// xidState is a GPU's XID record: the last XID and the count by code.
type xidState struct {
	mu     sync.Mutex
	last   uint64
	counts map[uint64]uint64
}

func newNVMLBackend(lib nvml.Interface, o *Options, env *BackendEnv) *nvmlBackend {
	timeout := time.Duration(o.Config.Timeout)
	if timeout <= 0 {
		timeout = o.Interval
	}
	return &nvmlBackend{
		// The reads of all GPUs run side by side; what is left of the
		// cycle's deadline is for grouping processes and publishing.
		readTimeout: timeout * 3 / 4,
		stale:       2 * o.Interval,
		xids:        map[string]*xidState{},
		lib:         lib,
		logger:      o.Logger,
		interval:    o.Interval,
		devices:     o.NVIDIADevices,
		procRoot:    o.ProcRoot,
		hostname:    env.hostname,
		withHost:    env.withHost,
		fields:      env.fields,
		eventWait:   defaultEventWait,
		grouper:     env.grouper,
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
	if err := b.refresh(ctx); err != nil {
		return err
	}
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

// refresh counts the GPUs and identifies those not yet known: at open, a
// GPU that could not be identified then (fallen off the bus before
// gpuscope started, or a transient failure) and a GPU that appeared later.
// A GPU that fails identification is counted as a device error in every
// cycle and retried in the next; the others are monitored meanwhile. It
// costs one NVML call a cycle when every GPU is known. It also retries
// XID registration that failed.
func (b *nvmlBackend) refresh(ctx context.Context) error {
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("count GPUs: %w", ret)
	}
	b.unidentified = b.unidentified[:0]
	known := make(map[int]bool, len(b.gpus))
	for _, g := range b.gpus {
		known[g.info.index] = true
	}
	var added []*nvmlGPU
	for i := range n {
		if known[i] {
			continue
		}
		g, err := b.openGPU(i, b.driver)
		if err != nil {
			b.unidentified = append(b.unidentified, fieldError{gpu: strconv.Itoa(i), field: "device", err: err})
			continue
		}
		added = append(added, g)
	}
	if len(added) > 0 {
		gpus := append(append([]*nvmlGPU(nil), b.gpus...), added...)
		slices.SortFunc(gpus, func(x, y *nvmlGPU) int { return cmp.Compare(x.info.index, y.info.index) })
		b.setGPUs(gpus)
	}
	b.registerEvents(ctx)
	return nil
}

func (b *nvmlBackend) openGPU(i int, driver string) (*nvmlGPU, error) {
	dev, ret := b.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get handle: %w", ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("read UUID: %w", ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("read name: %w", ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("read PCI info: %w", ret)
	}
	xid := b.xids[uuid]
	if xid == nil {
		xid = &xidState{counts: map[uint64]uint64{}}
		b.xids[uuid] = xid
	}
	g := &nvmlGPU{
		dev:   dev,
		info:  newIdentity(i, uuid, pciBusID(pci), name, driver, b.hostname, b.withHost),
		label: strconv.Itoa(i),
		xid:   xid,
	}
	g.fieldValues, g.fieldMap = fieldValueRequest(b.fields)
	if b.fields.has(FieldProfGrEngineActive) && b.syms.gpm {
		g.gpm = b.openGPM(dev)
	}
	return g, nil
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
	gone     nvml.Return
}

// Sample reads the GPUs side by side, each within readTimeout, so that one
// hung NVML call stalls neither the other GPUs nor shutdown. A GPU whose
// read does not finish is counted as a device error, and served from its
// last complete sample until that is older than stale; then only its XID
// series and last-sample time are.
func (b *nvmlBackend) Sample(ctx context.Context, now time.Time) *Sample {
	s := &Sample{time: now}
	if err := b.refresh(ctx); err != nil {
		s.errs = append(s.errs, fieldError{field: "driver", err: err})
		if driverGoneErr(err) {
			s.reinit = err
		}
	}
	gpus := b.gpus
	results := make(chan gpuRead, len(gpus))
	done := make([]*gpuRead, len(gpus))
	running := 0
	for i, g := range gpus {
		if !g.busy.CompareAndSwap(false, true) {
			continue // still hung from an earlier cycle
		}
		running++
		go func() {
			res := gpuRead{i: i, gs: GPUSample{info: g.info}}
			res.answered, res.gone = b.readGPU(g, &res.gs, &res.errs, now)
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

	s.gpus = make([]GPUSample, len(gpus))
	for i, g := range gpus {
		res := done[i]
		if res == nil {
			s.errs = append(s.errs, fieldError{gpu: g.label, field: "timeout", err: errReadHung{b.readTimeout}})
			s.gpus[i] = b.staleSample(g, now)
			continue
		}
		s.errs = append(s.errs, res.errs...)
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
		s.gpus[i] = res.gs
	}
	s.errs = append(s.errs, b.unidentified...)
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

// busyAny reports whether a GPU read is still running (tests).
func (b *nvmlBackend) busyAny() bool {
	b.gpusMu.RLock()
	defer b.gpusMu.RUnlock()
	for _, g := range b.gpus {
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
	hung := !b.stopEventLoop()
	for _, g := range b.gpus {
		hung = hung || g.busy.Load()
	}
	gpus := b.gpus
	b.setGPUs(nil)
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
