package gpu

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// reader records the outcome of the NVML calls for one GPU in one cycle.
type reader struct {
	s    *GPUSample
	errs *[]fieldError
	gpu  string
	// lost is set once the GPU is gone (fallen off the bus) or the driver
	// is (gone set); reading the rest of its fields would only produce
	// more of the same error.
	lost bool
	gone nvml.Return
	// invalidUnsupported reads INVALID_ARGUMENT as NOT_SUPPORTED (GPM on
	// a GPU in MIG mode).
	invalidUnsupported bool
}

// driverGone reports whether ret means NVML itself no longer works: the
// kernel module was unloaded, or replaced by another version than the
// library's. Only a new nvmlInit can recover from these.
func driverGone(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_UNINITIALIZED, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return true
	}
	return false
}

// ok reports whether a call that feeds fields fs succeeded. Unsupported
// calls mark the fields unsupported (their series are omitted, as DCGM
// does); any other failure is counted once per field.
func (r *reader) ok(ret nvml.Return, fs ...Field) bool {
	if ret == nvml.ERROR_INVALID_ARGUMENT && r.invalidUnsupported {
		ret = nvml.ERROR_NOT_SUPPORTED
	}
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		for _, f := range fs {
			r.s.unsupported.add(f)
		}
	case nvml.ERROR_NO_PERMISSION:
		// gpuscope's user may not read it (profiling restricted to admin
		// users, another user's processes): a state, not a failure.
		for _, f := range fs {
			r.s.unsupported.add(f)
			r.s.denied.add(f)
		}
	default:
		if ret == nvml.ERROR_GPU_IS_LOST || driverGone(ret) {
			// The GPU fell off the bus, or the driver went away: one
			// error for the device, as for a GPU that cannot be read at
			// all, not one per field.
			if !r.lost {
				field := "device"
				if driverGone(ret) {
					// Not this GPU's fault: kept apart from lost GPUs.
					field = "driver"
				}
				*r.errs = append(*r.errs, fieldError{gpu: r.gpu, field: field, err: ret})
			}
			r.lost = true
			if driverGone(ret) {
				r.gone = ret
			}
			return false
		}
		for _, f := range fs {
			*r.errs = append(*r.errs, fieldError{gpu: r.gpu, field: fields[f].name, err: ret})
		}
	}
	return false
}

const bytesPerMiB = 1 << 20

// mib converts bytes to MiB with the integer truncation DCGM applies.
func mib(b uint64) float64 { return float64(b / bytesPerMiB) }

// readGPU reads one GPU into s, phase by phase in a fixed order; a GPU
// found lost (or a driver found gone) is read no further. answered says
// whether the device answered at all, lost whether it is off the bus;
// gone is the error of a driver that went away (see driverGone).
func (b *nvmlBackend) readGPU(g *nvmlGPU, s *GPUSample, errs *[]fieldError, now time.Time) (answered, lost bool, gone nvml.Return) {
	r := reader{s: s, errs: errs, gpu: g.label}
	defer func() {
		// A misbehaving driver binding must cost one GPU's sample, not the process.
		if p := recover(); p != nil {
			*errs = append(*errs, fieldError{gpu: g.label, field: "device", err: fmt.Errorf("panic: %v", p)})
			answered = false
		}
	}()
	r.steps(
		func() { b.readMIG(&r, g) }, // first: whether the GPU is in MIG mode
		func() { b.readClocks(&r, g) },
		func() { b.readThermalAndPower(&r, g) },
		func() { b.readPCIeReplays(&r, g) },
		func() { b.readUtilization(&r, g) },
		func() { b.readFramebuffer(&r, g) },
		func() { b.readRemappedRows(&r, g) },
		func() { b.readHealth(&r, g) },
		func() { b.readVGPULicense(&r, g) },
		func() { b.readFieldValues(&r, g, now) },
		func() { b.readGPM(&r, g) },
		func() { b.readPCIe(&r, g) },
		func() { b.readClockEvents(&r, g) },
		func() { b.readRetiredSBE(&r, g) },
		func() { b.readXID(&r, g) },
		func() { b.readGPUProcesses(&r, g, now) },
		func() { g.mig.finish(s) }, // last
	)
	if r.lost {
		// Nothing read from a lost GPU in this cycle is served: its
		// series go stale until it answers again. Its XIDs stay: they
		// come from the event loop, not the device, and XID 79 (fallen
		// off the bus) is exactly what a lost GPU last reported.
		*s = GPUSample{info: g.info}
		b.readXID(&reader{s: s, errs: errs, gpu: g.label}, g)
		return false, r.gone == nvml.SUCCESS, r.gone
	}
	// XIDs come from the event loop: they do not show the device answered.
	const xid = fieldSet(1) << FieldXID
	return s.set&^xid != 0 || s.unsupported&^xid != 0, false, nvml.SUCCESS
}

// steps runs the reads fs in order until the GPU is found lost: reading
// the rest would only repeat the error, and a lost GPU's calls can be
// slow.
func (r *reader) steps(fs ...func()) {
	for _, f := range fs {
		f()
		if r.lost {
			return
		}
	}
}

// readClocks reads the SM and memory clocks.
func (b *nvmlBackend) readClocks(r *reader, g *nvmlGPU) {
	clock := func(c nvml.ClockType, f Field) func() {
		return func() {
			if v, ret := g.dev.GetClockInfo(c); r.ok(ret, f) {
				r.s.Set(f, float64(v))
			}
		}
	}
	r.steps(clock(nvml.CLOCK_SM, FieldSMClock), clock(nvml.CLOCK_MEM, FieldMemClock))
}

// readThermalAndPower reads the GPU temperature, the power draw and the
// energy counter.
func (b *nvmlBackend) readThermalAndPower(r *reader, g *nvmlGPU) {
	d, s := g.dev, r.s
	r.steps(
		func() {
			v, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
			if !r.ok(ret, FieldGPUTemp) {
				return
			}
			// DCGM does not store a reading above 200 °C (a sensor
			// glitch) and answers OK, so its last value stays the
			// latest: gpuscope serves that one too, or none before any.
			if v > 200 {
				if g.tempValid {
					s.Set(FieldGPUTemp, g.lastTemp)
				}
				return
			}
			g.lastTemp, g.tempValid = float64(v), true
			s.Set(FieldGPUTemp, g.lastTemp)
		},
		func() {
			v, ret := d.GetPowerUsage()
			if r.ok(ret, FieldPowerUsage) {
				s.Set(FieldPowerUsage, float64(v)/1000.0)
			}
		},
		func() {
			if !b.syms.energy {
				s.unsupported.add(FieldEnergy)
				return
			}
			v, ret := d.GetTotalEnergyConsumption()
			if r.ok(ret, FieldEnergy) {
				s.Set(FieldEnergy, float64(v))
			}
		},
	)
}

// readPCIeReplays reads the PCIe replay counter.
func (b *nvmlBackend) readPCIeReplays(r *reader, g *nvmlGPU) {
	if !b.syms.pcieReplay {
		r.s.unsupported.add(FieldPCIeReplay)
		return
	}
	v, ret := g.dev.GetPcieReplayCounter()
	if r.ok(ret, FieldPCIeReplay) {
		r.s.Set(FieldPCIeReplay, float64(v))
	}
}

// readUtilization reads the GPU and memory-copy utilisation and the
// encoder's and decoder's.
func (b *nvmlBackend) readUtilization(r *reader, g *nvmlGPU) {
	d, s := g.dev, r.s
	r.steps(
		func() {
			u, ret := d.GetUtilizationRates()
			if r.ok(ret, FieldGPUUtil, FieldMemCopyUtil) {
				s.Set(FieldGPUUtil, float64(u.Gpu))
				s.Set(FieldMemCopyUtil, float64(u.Memory))
			}
		},
		func() {
			v, _, ret := d.GetEncoderUtilization()
			if r.ok(ret, FieldEncUtil) {
				s.Set(FieldEncUtil, float64(v))
			}
		},
		func() {
			v, _, ret := d.GetDecoderUtilization()
			if r.ok(ret, FieldDecUtil) {
				s.Set(FieldDecUtil, float64(v))
			}
		},
	)
}

// readFramebuffer reads the GPU's memory; in MIG mode it is read per GPU
// instance instead (readMIG). A GPU without a framebuffer of its own
// (DGX Spark's GB10 and other integrated GPUs, which share the host's
// memory) answers NOT_SUPPORTED: its DCGM_FI_DEV_FB_* are then the system
// memory's, as nvtop, nvitop, GPUd and all-smi show it (total MemTotal,
// free MemAvailable, used the difference), marked by
// gpuscope_gpu_memory_unified 1, so that the memory bar,
// GPUMemoryAlmostFull and the leak and exhaustion rules go on working.
// Used counts the host's use as well as the GPU's: on such a machine
// that is what leaves the GPU short.
func (b *nvmlBackend) readFramebuffer(r *reader, g *nvmlGPU) {
	if g.mig.enabled() {
		return
	}
	if !readMemory(r, g.dev, b.syms.memoryV2) {
		return
	}
	total, avail, err := systemMemory(filepath.Join(b.procRoot, "meminfo"))
	if err != nil {
		*r.errs = append(*r.errs, fieldError{gpu: r.gpu, field: fields[FieldFBUsed].name,
			err: fmt.Errorf("the GPU has no framebuffer of its own (unified memory), and the system memory cannot be read: %w", err)})
		return
	}
	r.s.unsupported &^= fieldSetOf(FieldFBFree, FieldFBUsed, FieldFBTotal)
	r.s.Set(FieldFBTotal, mib(total))
	r.s.Set(FieldFBFree, mib(avail))
	r.s.Set(FieldFBUsed, mib(total-avail))
	r.s.unifiedMemory = true
	if !g.unifiedLogged {
		g.unifiedLogged = true
		b.logger.Info("The GPU has no framebuffer of its own (unified memory); DCGM_FI_DEV_FB_* are the system memory's (gpuscope_gpu_memory_unified 1)", "gpu", g.label)
	}
}

// systemMemory reads MemTotal and MemAvailable, in bytes, from a
// /proc/meminfo.
func systemMemory(path string) (total, avail uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var haveTotal, haveAvail bool
	for line := range strings.Lines(string(b)) {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%s: unexpected %s line %q", path, key, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %s: %w", path, key, err)
		}
		if key == "MemTotal" {
			total, haveTotal = kb*1024, true
		} else {
			avail, haveAvail = kb*1024, true
		}
	}
	if !haveTotal || !haveAvail || avail > total {
		return 0, 0, fmt.Errorf("%s: no MemTotal and MemAvailable", path)
	}
	return total, avail, nil
}

// readRemappedRows reads the rows remapped for memory errors and whether
// a remapping failed or waits for a GPU reset.
func (b *nvmlBackend) readRemappedRows(r *reader, g *nvmlGPU) {
	fs := []Field{FieldCorRemappedRows, FieldUncRemappedRows, FieldRowRemapFailure, FieldRowRemapPending}
	if !b.syms.remappedRows {
		for _, f := range fs {
			r.s.unsupported.add(f)
		}
		return
	}
	corr, unc, pending, failed, ret := g.dev.GetRemappedRows()
	if r.ok(ret, fs...) {
		r.s.Set(FieldCorRemappedRows, float64(corr))
		r.s.Set(FieldUncRemappedRows, float64(unc))
		r.s.Set(FieldRowRemapFailure, boolValue(failed))
		r.s.Set(FieldRowRemapPending, boolValue(pending))
	}
}

// readHealth reads the fan speed, the power limit the driver enforces and
// the recovery action it asks for, as DCGM does: nvmlDeviceGetFanSpeed
// (fan 0, percent), nvmlDeviceGetEnforcedPowerLimit (mW, whole watts as
// DCGM's integer division leaves them) and the field value
// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (drivers from R550). Passively
// cooled GPUs answer NOT_SUPPORTED for the fan and lose only that series.
// The recovery action is asked in a request of its own: a driver older
// than the field answers for it alone (NOT_SUPPORTED, or INVALID_ARGUMENT
// for an id it does not know), which is unsupported, not an error, and
// leaves the batched request of readFieldValues untouched.
func (b *nvmlBackend) readHealth(r *reader, g *nvmlGPU) {
	d, s := g.dev, r.s
	r.steps(
		func() {
			if !b.syms.fanSpeed {
				s.unsupported.add(FieldFanSpeed)
				return
			}
			if v, ret := d.GetFanSpeed(); r.ok(ret, FieldFanSpeed) {
				s.Set(FieldFanSpeed, float64(v))
			}
		},
		func() {
			if !b.syms.enforcedPowerLimit {
				s.unsupported.add(FieldEnforcedPowerLimit)
				return
			}
			if v, ret := d.GetEnforcedPowerLimit(); r.ok(ret, FieldEnforcedPowerLimit) {
				s.Set(FieldEnforcedPowerLimit, float64(v/1000))
			}
		},
		func() { b.readRecoveryAction(r, g) },
	)
}

// readRecoveryAction reads NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
// (nvml.DeviceGpuRecoveryAction: 0 none, 1 GPU reset, 2 node reboot, 3
// drain P2P, 4 drain and reset, ...).
func (b *nvmlBackend) readRecoveryAction(r *reader, g *nvmlGPU) {
	if !b.syms.fieldValues {
		r.s.unsupported.add(FieldRecoveryAction)
		return
	}
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	ret := g.dev.GetFieldValues(fv)
	if ret == nvml.SUCCESS {
		ret = nvml.Return(fv[0].NvmlReturn)
	}
	if ret == nvml.ERROR_INVALID_ARGUMENT {
		ret = nvml.ERROR_NOT_SUPPORTED // a field id this driver does not know
	}
	if !r.ok(ret, FieldRecoveryAction) {
		return
	}
	if v, ok := fieldValueFloat(&fv[0], false); ok {
		r.s.Set(FieldRecoveryAction, v)
	}
}

// readVGPULicense reads whether the vGPU feature is licensed.
func (b *nvmlBackend) readVGPULicense(r *reader, g *nvmlGPU) {
	if !b.syms.gridLicense {
		r.s.unsupported.add(FieldVGPULicense)
		return
	}
	lf, ret := g.dev.GetGridLicensableFeatures()
	if r.ok(ret, FieldVGPULicense) {
		if v, ok := vgpuLicensed(lf); ok {
			r.s.Set(FieldVGPULicense, v)
		}
	}
}

// readClockEvents reads, with its family on, why the clocks are held
// down.
func (b *nvmlBackend) readClockEvents(r *reader, g *nvmlGPU) {
	if !b.fields.has(FieldClockEvents) {
		return
	}
	var v uint64
	ret := nvml.ERROR_FUNCTION_NOT_FOUND
	switch {
	case b.syms.clocksEvent:
		v, ret = g.dev.GetCurrentClocksEventReasons()
	case b.syms.clocksThrottle:
		// Drivers before R535 name the same bits throttle reasons.
		v, ret = g.dev.GetCurrentClocksThrottleReasons()
	}
	if r.ok(ret, FieldClockEvents) {
		r.s.clockEvents = v
		r.s.set.add(FieldClockEvents)
	}
}

// readRetiredSBE reads, with its family on, the pages retired for
// single-bit ECC errors; the double-bit and pending counts are field
// values.
func (b *nvmlBackend) readRetiredSBE(r *reader, g *nvmlGPU) {
	if !b.fields.has(FieldRetiredSBE) {
		return
	}
	pages, ret := g.dev.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
	if r.ok(ret, FieldRetiredSBE) {
		r.s.Set(FieldRetiredSBE, float64(len(pages)))
	}
}

// readGPUProcesses reads the GPU's processes; in MIG mode they are read
// per GPU instance instead (readMIG).
func (b *nvmlBackend) readGPUProcesses(r *reader, g *nvmlGPU, now time.Time) {
	if !g.mig.enabled() {
		b.readProcesses(r, g, now)
	}
}

// readMemory uses the v2 memory info, which splits the reserved part out of
// "used" as DCGM does with driver 510 and later; older drivers only have v1.
// noFramebuffer reports that the driver says the device has no memory
// figures at all (NOT_SUPPORTED from v1 too): the fields are then marked
// unsupported.
func readMemory(r *reader, d nvml.Device, haveV2 bool) (noFramebuffer bool) {
	m, ret := nvml.Memory_v2{}, nvml.ERROR_FUNCTION_NOT_FOUND
	if haveV2 {
		m, ret = d.GetMemoryInfo_v2()
	}
	if ret == nvml.ERROR_FUNCTION_NOT_FOUND || ret == nvml.ERROR_NOT_SUPPORTED {
		m1, ret1 := d.GetMemoryInfo()
		if r.ok(ret1, FieldFBFree, FieldFBUsed, FieldFBTotal) {
			r.s.Set(FieldFBFree, mib(m1.Free))
			r.s.Set(FieldFBUsed, mib(m1.Used))
			r.s.Set(FieldFBTotal, mib(m1.Total))
			r.s.unsupported.add(FieldFBReserved)
		}
		if ret1 == nvml.ERROR_NOT_SUPPORTED {
			r.s.unsupported.add(FieldFBReserved)
			return true
		}
		return false
	}
	if r.ok(ret, FieldFBFree, FieldFBUsed, FieldFBReserved, FieldFBTotal) {
		r.s.Set(FieldFBFree, mib(m.Free))
		r.s.Set(FieldFBUsed, mib(m.Used))
		r.s.Set(FieldFBReserved, mib(m.Reserved))
		r.s.Set(FieldFBTotal, mib(m.Total))
	}
	return false
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// vgpuLicensed follows DCGM: 0 without GRID licensing, else whether the
// vGPU feature is licensed; where licensing is supported but no vGPU
// feature is listed, DCGM stores no value, and ok is false (blank).
func vgpuLicensed(lf nvml.GridLicensableFeatures) (v float64, ok bool) {
	if lf.IsGridLicenseSupported == 0 {
		return 0, true
	}
	n := min(int(lf.LicensableFeaturesCount), len(lf.GridLicensableFeatures))
	for _, f := range lf.GridLicensableFeatures[:n] {
		if f.FeatureCode == uint32(nvml.GRID_LICENSE_FEATURE_CODE_VGPU) {
			return boolValue(f.FeatureState > 0), true
		}
	}
	return 0, false
}

// fieldValueSpec says what an entry of a GetFieldValues request feeds.
type fieldValueSpec struct {
	field Field
	// asUint reads the value as an unsigned int whatever its type, which
	// DCGM does for memory temperature to work around a driver bug.
	asUint bool
	// nvlinkPart marks the two NVLink throughput halves that together feed
	// the NVLINK_BANDWIDTH_TOTAL rate.
	nvlinkPart bool
}

// fieldValueRequest builds the one batched GetFieldValues request per GPU
// and cycle that covers every field without a dedicated NVML call.
func fieldValueRequest(enabled fieldSet) ([]nvml.FieldValue, []fieldValueSpec) {
	const allLinks = 0xFFFFFFFF
	var req []nvml.FieldValue
	var specs []fieldValueSpec
	add := func(id uint32, scope uint32, spec fieldValueSpec) {
		if !enabled.has(spec.field) {
			return
		}
		req = append(req, nvml.FieldValue{FieldId: id, ScopeId: scope})
		specs = append(specs, spec)
	}
	add(nvml.FI_DEV_MEMORY_TEMP, 0, fieldValueSpec{field: FieldMemoryTemp, asUint: true})
	add(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, allLinks, fieldValueSpec{field: FieldNVLinkBandwidth, nvlinkPart: true})
	add(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, allLinks, fieldValueSpec{field: FieldNVLinkBandwidth, nvlinkPart: true})
	add(nvml.FI_DEV_PERF_POLICY_POWER, 0, fieldValueSpec{field: FieldPowerViolation})
	add(nvml.FI_DEV_PERF_POLICY_THERMAL, 0, fieldValueSpec{field: FieldThermalViolation})
	add(nvml.FI_DEV_PERF_POLICY_SYNC_BOOST, 0, fieldValueSpec{field: FieldSyncBoostViolation})
	add(nvml.FI_DEV_PERF_POLICY_BOARD_LIMIT, 0, fieldValueSpec{field: FieldBoardLimitViolation})
	add(nvml.FI_DEV_PERF_POLICY_LOW_UTILIZATION, 0, fieldValueSpec{field: FieldLowUtilViolation})
	add(nvml.FI_DEV_PERF_POLICY_RELIABILITY, 0, fieldValueSpec{field: FieldReliabilityViolation})
	add(nvml.FI_DEV_ECC_SBE_VOL_TOTAL, 0, fieldValueSpec{field: FieldECCSBEVolTotal})
	add(nvml.FI_DEV_ECC_DBE_VOL_TOTAL, 0, fieldValueSpec{field: FieldECCDBEVolTotal})
	add(nvml.FI_DEV_ECC_SBE_AGG_TOTAL, 0, fieldValueSpec{field: FieldECCSBEAggTotal})
	add(nvml.FI_DEV_ECC_DBE_AGG_TOTAL, 0, fieldValueSpec{field: FieldECCDBEAggTotal})
	add(nvml.FI_DEV_RETIRED_DBE, 0, fieldValueSpec{field: FieldRetiredDBE})
	add(nvml.FI_DEV_RETIRED_PENDING, 0, fieldValueSpec{field: FieldRetiredPending})
	add(nvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, 0, fieldValueSpec{field: FieldNVLinkCRCFlitErrors})
	add(nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, 0, fieldValueSpec{field: FieldNVLinkCRCDataErrors})
	add(nvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, 0, fieldValueSpec{field: FieldNVLinkReplayErrors})
	add(nvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, 0, fieldValueSpec{field: FieldNVLinkRecoveryErrors})
	return req, specs
}

func (b *nvmlBackend) readFieldValues(r *reader, g *nvmlGPU, now time.Time) {
	if len(g.fieldValues) == 0 {
		return
	}
	if !b.syms.fieldValues {
		for _, spec := range g.fieldMap {
			r.s.unsupported.add(spec.field)
		}
		return
	}
	for i := range g.fieldValues {
		fv := &g.fieldValues[i]
		fv.Timestamp, fv.LatencyUsec, fv.ValueType, fv.NvmlReturn, fv.Value = 0, 0, 0, 0, [8]byte{}
	}
	if ret := g.dev.GetFieldValues(g.fieldValues); ret != nvml.SUCCESS {
		nvlinkDone := false
		for _, spec := range g.fieldMap {
			if spec.nvlinkPart {
				if nvlinkDone {
					continue
				}
				nvlinkDone = true
			}
			r.ok(ret, spec.field)
		}
		g.nvlinkPrimed = false
		return
	}
	var nvlinkKiB float64
	nvlinkRet := nvml.SUCCESS
	nvlinkAt := time.Time{}
	sawNVLink := false
	for i, spec := range g.fieldMap {
		fv := &g.fieldValues[i]
		ret := nvml.Return(fv.NvmlReturn)
		if spec.nvlinkPart {
			sawNVLink = true
			if ret != nvml.SUCCESS && nvlinkRet == nvml.SUCCESS {
				nvlinkRet = ret
			}
			v, _ := fieldValueFloat(fv, false)
			nvlinkKiB += v
			if fv.Timestamp > 0 {
				nvlinkAt = time.UnixMicro(fv.Timestamp)
			}
			continue
		}
		if !r.ok(ret, spec.field) {
			continue
		}
		v, ok := fieldValueFloat(fv, spec.asUint)
		if !ok || (spec.field == FieldMemoryTemp && v > 200) {
			continue // blank, as DCGM leaves it
		}
		r.s.Set(spec.field, v)
	}
	if !sawNVLink || !r.ok(nvlinkRet, FieldNVLinkBandwidth) {
		g.nvlinkPrimed = false
		return
	}
	if nvlinkAt.IsZero() {
		nvlinkAt = now
	}
	// DCGM reports NVLINK_BANDWIDTH_TOTAL as a rate of the summed KiB
	// counters, divided by 1000 (its "MB/s" unit), 0 on the first sample.
	rate := 0.0
	if g.nvlinkPrimed {
		if dt := nvlinkAt.Sub(g.nvlinkPrevAt).Seconds(); dt > 0 && nvlinkKiB >= g.nvlinkPrevKiB {
			rate = (nvlinkKiB - g.nvlinkPrevKiB) / dt / 1000
		}
	}
	g.nvlinkPrevKiB, g.nvlinkPrevAt, g.nvlinkPrimed = nvlinkKiB, nvlinkAt, true
	r.s.Set(FieldNVLinkBandwidth, rate)
}

// fieldValueFloat decodes a field value. It reports false for types it
// does not know.
func fieldValueFloat(fv *nvml.FieldValue, asUint bool) (float64, bool) {
	v := fv.Value[:]
	if asUint {
		return float64(binary.LittleEndian.Uint32(v)), true
	}
	switch nvml.ValueType(fv.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(v)), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(v)), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.LittleEndian.Uint64(v)), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.LittleEndian.Uint64(v))), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.LittleEndian.Uint32(v))), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.LittleEndian.Uint16(v)), true
	}
	return 0, false
}

// readPCIe reads the link and, where GPM did not already give an interval
// average, NVML's PCIe throughput (a 20 ms sample in KB/s, KB = 1024 bytes).
func (b *nvmlBackend) readPCIe(r *reader, g *nvmlGPU) {
	d := g.dev
	if gen, ret := d.GetCurrPcieLinkGeneration(); r.ok(ret, FieldPCIeLinkGen) {
		r.s.Set(FieldPCIeLinkGen, float64(gen))
	}
	if w, ret := d.GetCurrPcieLinkWidth(); r.ok(ret, FieldPCIeLinkWidth) {
		r.s.Set(FieldPCIeLinkWidth, float64(w))
	}
	maxGen, ret := d.GetMaxPcieLinkGeneration()
	genOK := r.ok(ret, FieldPCIeLinkMaxGen, FieldPCIeMaxBandwidth)
	if genOK {
		r.s.Set(FieldPCIeLinkMaxGen, float64(maxGen))
	}
	maxWidth, ret := d.GetMaxPcieLinkWidth()
	widthOK := r.ok(ret, FieldPCIeLinkMaxWidth, FieldPCIeMaxBandwidth)
	if widthOK {
		r.s.Set(FieldPCIeLinkMaxWidth, float64(maxWidth))
	}
	if genOK && widthOK {
		if bw := PCIeMaxBandwidth(maxGen, maxWidth); bw > 0 {
			r.s.Set(FieldPCIeMaxBandwidth, bw)
		}
	}
	if r.lost {
		return
	}
	for _, x := range [...]struct {
		counter nvml.PcieUtilCounter
		field   Field
	}{{nvml.PCIE_UTIL_TX_BYTES, FieldPCIeTxRate}, {nvml.PCIE_UTIL_RX_BYTES, FieldPCIeRxRate}} {
		if r.s.set.has(x.field) {
			continue
		}
		if !b.syms.pcieThroughput {
			r.s.unsupported.add(x.field)
			continue
		}
		if v, ret := d.GetPcieThroughput(x.counter); r.ok(ret, x.field) {
			r.s.Set(x.field, float64(v)*1024)
		}
	}
}

// readProcesses groups the processes the driver lists as running on the
// GPU (compute, and graphics and MPS clients where the driver lists them)
// by container, with their SM utilisation since the previous cycle.
func (b *nvmlBackend) readProcesses(r *reader, g *nvmlGPU, now time.Time) {
	if !b.fields.has(FieldContainerMemory) {
		return
	}
	if b.foreignPIDNS {
		r.s.unsupported.add(FieldContainerMemory)
		r.s.unsupported.add(FieldContainerSM)
		return
	}
	procs, ret := g.dev.GetComputeRunningProcesses()
	if !r.ok(ret, FieldContainerMemory) {
		return
	}
	// Under MPS the compute list holds the MPS server; its clients are
	// listed apart. Graphics contexts are listed apart too.
	for _, extra := range [...]struct {
		have        bool
		get         func() ([]nvml.ProcessInfo, nvml.Return)
		unsupported *bool
	}{
		{b.syms.mps, g.dev.GetMPSComputeRunningProcesses, &g.noMPSList},
		{b.syms.graphics, g.dev.GetGraphicsRunningProcesses, &g.noGraphicsList},
	} {
		if !extra.have || *extra.unsupported {
			continue
		}
		switch more, ret := extra.get(); ret {
		case nvml.SUCCESS:
			procs = append(procs, more...)
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
			// Most datacenter GPUs list no graphics processes: not
			// asked again.
			*extra.unsupported = true
		case nvml.ERROR_NO_PERMISSION:
		default:
			r.ok(ret, FieldContainerMemory)
		}
	}
	r.s.set.add(FieldContainerMemory)
	if g.lastProcessSeen == 0 {
		// The first call would return the driver's whole sample buffer,
		// processes that ended long ago included; start one interval back.
		g.lastProcessSeen = uint64(max(now.Add(-b.interval).UnixMicro(), 0))
	}
	window := b.interval
	if !g.utilReadAt.IsZero() {
		window = now.Sub(g.utilReadAt)
	}
	var utils []nvml.ProcessUtilizationSample
	ret = nvml.ERROR_FUNCTION_NOT_FOUND
	if b.syms.processUtil {
		utils, ret = g.dev.GetProcessUtilization(g.lastProcessSeen)
	}
	switch {
	case ret == nvml.SUCCESS:
		for _, u := range utils {
			g.lastProcessSeen = max(g.lastProcessSeen, u.TimeStamp)
		}
		utils = dedupSamples(utils)
		g.utilPeriod = samplePeriod(utils, g.utilPeriod)
		g.utilReadAt = now
		r.s.set.add(FieldContainerSM)
	case ret == nvml.ERROR_NOT_FOUND, ret == nvml.ERROR_INSUFFICIENT_SIZE && len(utils) == 0:
		// No process ran on the GPU since the last cycle (go-nvml turns
		// a count of 0 into INSUFFICIENT_SIZE with no samples).
		utils = nil
		g.utilReadAt = now
		r.s.set.add(FieldContainerSM)
	default:
		utils = nil
		r.ok(ret, FieldContainerSM)
	}
	cs, orphans, unresolved := b.grouper.group(procs, utils, smWindow{period: g.utilPeriod, window: window})
	if unresolved > 0 && len(cs) == 0 {
		*r.errs = append(*r.errs, fieldError{gpu: r.gpu, field: fields[FieldContainerMemory].name,
			err: fmt.Errorf("cannot read the cgroup of any of %d GPU processes (is gpuscope outside the host pid namespace?)", unresolved)})
	}
	r.s.containers, r.s.orphans = cs, orphans
}

// The driver's utilisation sample period lies between 1/6 s and 1 s,
// depending on the product (nvml.h, nvmlDeviceGetUtilizationRates).
// Timestamps of one process closer than minSamplePeriod are one sample
// seen twice, or jitter; a gap longer than maxSamplePeriod spans periods
// without use, which the driver leaves out.
const (
	minSamplePeriod = 100 * time.Millisecond
	maxSamplePeriod = time.Second
)

// dedupSamples sorts a GPU's process utilisation samples by pid and time
// and drops a sample listed twice.
func dedupSamples(utils []nvml.ProcessUtilizationSample) []nvml.ProcessUtilizationSample {
	slices.SortFunc(utils, func(a, b nvml.ProcessUtilizationSample) int {
		return cmp.Or(cmp.Compare(a.Pid, b.Pid), cmp.Compare(a.TimeStamp, b.TimeStamp))
	})
	return slices.CompactFunc(utils, func(a, b nvml.ProcessUtilizationSample) bool {
		return a.Pid == b.Pid && a.TimeStamp == b.TimeStamp
	})
}

// samplePeriod estimates the driver's sample period from utils (sorted by
// dedupSamples): the shortest gap between two samples of one process,
// within minSamplePeriod..maxSamplePeriod, and never longer than prev,
// the estimate so far (0: none). NVML returns a sample for each period a
// process had non-zero use in, so successive samples of a busy process
// are one period apart. A driver that returns one sample per process and
// call shows no gap: the estimate stays 0.
func samplePeriod(utils []nvml.ProcessUtilizationSample, prev time.Duration) time.Duration {
	p := prev
	for i := 1; i < len(utils); i++ {
		a, b := utils[i-1], utils[i]
		if a.Pid != b.Pid {
			continue
		}
		gap := time.Duration(b.TimeStamp-a.TimeStamp) * time.Microsecond
		if gap < minSamplePeriod {
			continue
		}
		gap = min(gap, maxSamplePeriod)
		if p == 0 || gap < p {
			p = gap
		}
	}
	return p
}
