package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
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
	hostname string
	withHost bool
	fields   fieldSet

	initialised  bool
	syms         nvmlSymbols
	gpus         []*nvmlGPU
	unidentified []fieldError // GPUs that failed at open
	grouper      *containerGrouper

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
	info  *gpuInfo
	label string // gpu label value, for errors

	fieldValues []nvml.FieldValue // reused request for GetFieldValues
	fieldMap    []fieldValueSpec  // what each entry of fieldValues feeds

	nvlinkPrevKiB float64
	nvlinkPrevAt  time.Time
	nvlinkPrimed  bool

	lastProcessSeen uint64 // newest GetProcessUtilization timestamp, µs
	gpm             *gpmState
	mig             *migState // MIG mode and GPU instances (mig_nvml.go)

	xidRegistered bool
	xidMu         sync.Mutex
	lastXID       uint64
	xidCounts     map[uint64]uint64
}

func newNVMLBackend(lib nvml.Interface, o *Options, fields fieldSet, withHost bool) *nvmlBackend {
	return &nvmlBackend{
		lib:       lib,
		logger:    o.Logger,
		interval:  o.Interval,
		devices:   o.NVIDIADevices,
		hostname:  o.Hostname,
		withHost:  withHost,
		fields:    fields,
		eventWait: defaultEventWait,
		grouper:   newContainerGrouper(o.ProcRoot, o.ContainerLookup),
	}
}

func (b *nvmlBackend) name() string { return BackendNVML }

func (b *nvmlBackend) open(ctx context.Context) (err error) {
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
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("count GPUs: %w", ret)
	}
	b.gpus, b.unidentified = b.gpus[:0], nil
	for i := range n {
		g, err := b.openGPU(i, driver)
		if err != nil {
			// A GPU that cannot even be identified (fallen off the bus
			// before gpuscope started) is left out and counted at every
			// cycle; the others are still worth monitoring.
			b.unidentified = append(b.unidentified, fieldError{gpu: strconv.Itoa(i), field: "device", err: err})
			continue
		}
		b.gpus = append(b.gpus, g)
	}
	b.startEvents(ctx)
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

// nvidiaDevice returns a file that shows NVIDIA GPUs are there, or "".
func (b *nvmlBackend) nvidiaDevice() string {
	for _, pattern := range b.devices {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	return ""
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
	g := &nvmlGPU{
		dev:       dev,
		info:      newGPUInfo(i, uuid, pciBusID(pci), name, driver, b.hostname, b.withHost),
		label:     strconv.Itoa(i),
		xidCounts: map[uint64]uint64{},
	}
	g.fieldValues, g.fieldMap = fieldValueRequest(b.fields)
	if b.fields.has(fProfGrEngineActive) && b.syms.gpm {
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

func (b *nvmlBackend) sample(ctx context.Context, now time.Time) *sample {
	s := &sample{time: now, gpus: make([]gpuSample, 0, len(b.gpus))}
	b.grouper.beginCycle()
	for _, g := range b.gpus {
		if ctx.Err() != nil {
			break
		}
		gs := gpuSample{info: g.info}
		answered, gone := b.readGPU(g, &gs, &s.errs, now)
		if answered {
			s.read++
		}
		if gone != nvml.SUCCESS && s.reinit == nil {
			s.reinit = fmt.Errorf("GPU %s: %w", g.label, gone)
		}
		s.gpus = append(s.gpus, gs)
	}
	b.grouper.endCycle()
	s.errs = append(s.errs, b.unidentified...)
	b.eventErrMu.Lock()
	s.errs = append(s.errs, b.eventErrs...)
	b.eventErrs = b.eventErrs[:0]
	b.eventErrMu.Unlock()
	if s.read == 0 && s.reinit == nil {
		// Every call failed: unless every GPU is merely off the bus
		// (they come back by answering again), start NVML afresh.
		for _, e := range s.errs {
			if !errors.Is(e.err, nvml.ERROR_GPU_IS_LOST) {
				s.reinit = fmt.Errorf("every NVML call failed; GPU %s: %w", e.gpu, e.err)
				break
			}
		}
	}
	return s
}

func (b *nvmlBackend) close() error {
	b.stopEventLoop()
	return b.shutdown()
}

func (b *nvmlBackend) shutdown() error {
	if !b.initialised {
		return nil
	}
	b.stopEventLoop()
	for _, g := range b.gpus {
		if g.gpm != nil {
			g.gpm.free()
		}
		g.mig.free()
	}
	b.gpus = nil
	b.initialised = false
	if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shut down NVML: %w", ret)
	}
	return nil
}
