package gpu

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// migSymbols are the NVML calls MIG support needs (driver R450 and later).
// A library without them has no MIG; calling a missing symbol through
// go-nvml would crash the process, so they are looked up first.
var migSymbols = []string{
	"nvmlDeviceGetMigMode",
	"nvmlDeviceGetMaxMigDeviceCount",
	"nvmlDeviceGetMigDeviceHandleByIndex",
	"nvmlDeviceGetGpuInstanceId",
}

// migGPMSymbol reads GPM per GPU instance (driver R525 and later).
const migGPMSymbol = "nvmlGpmMigSampleGet"

// instanceGPM are the GPM metrics read per GPU instance: the engine
// activity ratios. PCIe and NVLink traffic is the physical GPU's and stays
// on the parent.
var instanceGPM = func() []gpmMetric {
	var ms []gpmMetric
	for _, m := range gpmMetrics {
		if instanceFields.has(m.field) {
			ms = append(ms, m)
		}
	}
	return ms
}()

var instanceGPMFields = gpmFieldsOf(instanceGPM)

// migState is what the NVML backend keeps of a GPU's MIG configuration.
// The instances are enumerated again every cycle (a handful of cheap
// calls), so instances created or destroyed while gpuscope runs appear and
// go at the next cycle without listening for MIG config events.
type migState struct {
	probed  bool // symbols looked up
	capable bool // the driver has the MIG calls and the GPU answers them
	gpmMIG  bool // the driver has nvmlGpmMigSampleGet and the GPU has GPM
	// giDenied: GetGpuInstanceById needs root; after NO_PERMISSION the
	// profile comes from the MIG device's attributes only.
	giDenied bool
	on       bool // MIG mode is enabled

	insts    map[int]*nvmlInstance // by GPU instance id
	profiles []nvml.GpuInstanceProfileInfo
	// profilesRead: the profiles were listed (those NVML gave are in
	// profiles).
	profilesRead bool
	procs        []nvml.ProcessInfo // scratch
	pids         map[uint32]struct{}
}

// nvmlInstance is one GPU instance and the state its reads carry between
// cycles.
type nvmlInstance struct {
	id   int
	info *Instance
	devs []nvml.Device // its MIG devices (one per compute instance), this cycle
	gpm  *gpmState
}

// enabled reports whether the GPU was in MIG mode at its last read; then
// the parent does not read what its instances report.
func (m *migState) enabled() bool { return m != nil && m.on }

// finish is the last step of a GPU's read: a GPU in MIG mode keeps its
// whole-GPU fields only.
func (m *migState) finish(s *GPUSample) {
	if m.enabled() {
		s.dropInstanceFields()
	}
}

// free releases the instances' GPM samples; it is safe on nil.
func (m *migState) free() {
	if m == nil {
		return
	}
	for id, in := range m.insts {
		if in.gpm != nil {
			in.gpm.free()
		}
		delete(m.insts, id)
	}
	m.on = false
}

// hasSymbols reports whether the loaded library exports all of names. A
// binding that cannot tell (a bare mock) is taken to have no MIG.
func hasSymbols(lib nvml.Interface, names ...string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	ext := lib.Extensions()
	if ext == nil {
		return false
	}
	for _, n := range names {
		if ext.LookupSymbol(n) != nil {
			return false
		}
	}
	return true
}

// readMIG is the first step of a GPU's read. It finds out whether the GPU
// is in MIG mode and, if so, reads each GPU instance into s.instances.
// The mode can only change with a GPU reset, so when reading it fails the
// last known mode holds.
func (b *nvmlBackend) readMIG(r *reader, g *nvmlGPU) {
	if g.mig == nil {
		g.mig = &migState{insts: map[int]*nvmlInstance{}, pids: map[uint32]struct{}{}}
	}
	m := g.mig
	if !m.probed {
		m.probed = true
		m.capable = hasSymbols(b.lib, migSymbols...)
		m.gpmMIG = hasSymbols(b.lib, migGPMSymbol)
	}
	if !m.capable {
		return
	}
	mode, _, ret := g.dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		// A GPU without MIG (before Ampere, or not a data-centre part):
		// not asked again until NVML is opened again.
		m.capable = false
		m.free()
		return
	default:
		if m.on {
			b.instancesOK(r, ret)
		} else {
			r.ok(ret)
		}
		return
	}
	if mode != nvml.DEVICE_MIG_ENABLE {
		m.free()
		return
	}
	m.on = true
	n, ret := g.dev.GetMaxMigDeviceCount()
	if !b.instancesOK(r, ret) {
		return
	}
	for _, in := range m.insts {
		in.devs = in.devs[:0]
	}
	for i := range n {
		md, ret := g.dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // no MIG device at this index
		}
		if !b.instancesOK(r, ret) {
			if r.lost {
				return
			}
			continue
		}
		gi, ret := md.GetGpuInstanceId()
		if !b.instancesOK(r, ret) {
			if r.lost {
				return
			}
			continue
		}
		in := m.insts[gi]
		if in == nil {
			in = &nvmlInstance{id: gi}
			m.insts[gi] = in
		}
		in.devs = append(in.devs, md)
	}
	ids := make([]int, 0, len(m.insts))
	for id, in := range m.insts {
		if len(in.devs) == 0 {
			// Destroyed since the last cycle.
			if in.gpm != nil {
				in.gpm.free()
			}
			delete(m.insts, id)
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	r.s.instances = make([]InstanceSample, 0, len(ids))
	for _, id := range ids {
		is := b.readInstance(r, g, m.insts[id])
		if r.lost {
			return
		}
		r.s.instances = append(r.s.instances, is)
	}
}

// instancesOK is r.ok for a call that feeds every instance field of the
// GPU (the enumeration of its instances).
func (b *nvmlBackend) instancesOK(r *reader, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	return r.ok(ret, (instanceFields & b.fields).list()...)
}

// readInstance reads one GPU instance: its profile, framebuffer (the MIG
// device's memory info, as DCGM reads it), processes and GPM activity.
// What the instance's reads learn about the GPU (that it is lost) is the
// GPU's: r gets it back.
func (b *nvmlBackend) readInstance(r *reader, g *nvmlGPU, in *nvmlInstance) InstanceSample {
	is := InstanceSample{GPUSample: GPUSample{info: g.info}}
	ir := *r
	ir.s = &is.GPUSample
	defer func() {
		ir.s = r.s
		*r = ir
	}()
	steps := [...]func(){
		func() {
			profile, ret := b.instanceProfile(g, in)
			switch {
			case ret == nvml.SUCCESS:
			case in.info != nil && in.info.profile != "":
				profile = in.info.profile // the last name known
			default:
				*ir.errs = append(*ir.errs, fieldError{gpu: r.gpu, field: migLabels[0],
					err: fmt.Errorf("name the profile of GPU instance %d: %w", in.id, ret)})
			}
			if in.info == nil || in.info.profile != profile {
				in.info = newInstance(g.info, in.id, profile)
			}
			is.inst = in.info
		},
		func() { readMemory(&ir, in.devs[0], b.syms.memoryV2) },
		func() { b.readInstanceProcesses(&ir, g.mig, in) },
		func() { b.readInstanceGPM(&ir, g, in) },
	}
	for _, step := range steps {
		step()
		if ir.lost {
			break
		}
	}
	return is
}

// instanceProfile names the profile of a GPU instance as DCGM does: from
// the GPU instance's profile (DCGM's way; NVML gives it to root only),
// else from the MIG device's attributes, which need no privilege. The
// attributes' memory size can differ from the profile's (DCGM names the
// instance by the profile's memorySizeMB), so where the GPU's profiles can
// be listed, the profile with the attributes' slice count and the nearest
// memory size names it; only where they cannot do the attributes.
func (b *nvmlBackend) instanceProfile(g *nvmlGPU, in *nvmlInstance) (string, nvml.Return) {
	m := g.mig
	if !m.giDenied {
		name, ret := m.profileOfInstance(g.dev, in.id)
		switch ret {
		case nvml.SUCCESS:
			return name, ret
		case nvml.ERROR_NO_PERMISSION, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
			m.giDenied = true
		}
	}
	attrs, ret := in.devs[0].GetAttributes()
	if ret != nvml.SUCCESS {
		return "", ret
	}
	if attrs.GpuInstanceSliceCount == 0 {
		return "", nvml.ERROR_NOT_SUPPORTED
	}
	if p, ok := m.profileLike(g.dev, attrs); ok {
		return dcgmProfileName(p.SliceCount, p.MemorySizeMB), nvml.SUCCESS
	}
	return dcgmProfileName(attrs.GpuInstanceSliceCount, attrs.MemorySizeMB), nvml.SUCCESS
}

// profileLike is the GPU's instance profile with the slice count of a MIG
// device's attributes and the memory size nearest theirs.
func (m *migState) profileLike(dev nvml.Device, attrs nvml.DeviceAttributes) (nvml.GpuInstanceProfileInfo, bool) {
	m.loadProfiles(dev)
	var best nvml.GpuInstanceProfileInfo
	found := false
	dist := func(p nvml.GpuInstanceProfileInfo) uint64 {
		if p.MemorySizeMB > attrs.MemorySizeMB {
			return p.MemorySizeMB - attrs.MemorySizeMB
		}
		return attrs.MemorySizeMB - p.MemorySizeMB
	}
	for _, p := range m.profiles {
		if p.SliceCount == attrs.GpuInstanceSliceCount && (!found || dist(p) < dist(best)) {
			best, found = p, true
		}
	}
	return best, found
}

// loadProfiles lists the instance profiles the GPU offers, once: they do
// not change, and NVML answers NOT_SUPPORTED for the indices this GPU
// skips.
func (m *migState) loadProfiles(dev nvml.Device) {
	if m.profilesRead {
		return
	}
	m.profilesRead = true
	for i := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		if p, ret := dev.GetGpuInstanceProfileInfo(i); ret == nvml.SUCCESS {
			m.profiles = append(m.profiles, p)
		}
	}
}

func (m *migState) profileOfInstance(dev nvml.Device, id int) (string, nvml.Return) {
	gi, ret := dev.GetGpuInstanceById(id)
	if ret != nvml.SUCCESS {
		return "", ret
	}
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return "", ret
	}
	m.loadProfiles(dev)
	for _, p := range m.profiles {
		if p.Id == info.ProfileId {
			return dcgmProfileName(p.SliceCount, p.MemorySizeMB), nvml.SUCCESS
		}
	}
	return "", nvml.ERROR_NOT_FOUND
}

// readInstanceProcesses groups the compute processes (and MPS clients) of
// an instance's MIG devices by container. NVML has no per-process utilisation in MIG mode,
// so the instance's container series have memory and process counts only.
func (b *nvmlBackend) readInstanceProcesses(r *reader, m *migState, in *nvmlInstance) {
	if !b.fields.has(FieldContainerMemory) {
		return
	}
	if b.foreignPIDNS {
		// As for a whole GPU (readProcesses): outside the host's pid
		// namespace NVML lists only the processes gpuscope's namespace
		// sees, by its pids, so the series would be partial and wrong.
		r.s.unsupported.add(FieldContainerMemory)
		r.s.unsupported.add(FieldContainerSM)
		return
	}
	m.procs = m.procs[:0]
	clear(m.pids)
	for _, md := range in.devs {
		procs, ret := md.GetComputeRunningProcesses()
		if !r.ok(ret, FieldContainerMemory) {
			return
		}
		if b.syms.mps {
			// Under MPS in an instance, the clients are listed apart.
			switch more, ret := md.GetMPSComputeRunningProcesses(); ret {
			case nvml.SUCCESS:
				procs = append(procs, more...)
			case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_NO_PERMISSION:
			default:
				r.ok(ret, FieldContainerMemory)
			}
		}
		for _, p := range procs {
			if _, dup := m.pids[p.Pid]; dup {
				continue // listed twice (by two compute instances, or as MPS client)
			}
			m.pids[p.Pid] = struct{}{}
			m.procs = append(m.procs, p)
		}
	}
	r.s.set.add(FieldContainerMemory)
	r.s.unsupported.add(FieldContainerSM)
	cs, orphans, unresolved := b.grouper.group(m.procs, nil, smWindow{})
	if unresolved > 0 && len(cs) == 0 {
		*r.errs = append(*r.errs, fieldError{gpu: r.gpu, field: fields[FieldContainerMemory].name,
			err: fmt.Errorf("cannot read the cgroup of any of %d processes of GPU instance %d (is gpuscope outside the host pid namespace?)", unresolved, in.id)})
	}
	r.s.containers, r.s.orphans = cs, orphans
}

// readInstanceGPM reads the GPU instance's engine activity with
// nvmlGpmMigSampleGet on the parent: like the GPU's, from two samples one
// interval apart, so the first cycle has none.
func (b *nvmlBackend) readInstanceGPM(r *reader, g *nvmlGPU, in *nvmlInstance) {
	if !b.fields.has(FieldProfGrEngineActive) {
		return
	}
	m := g.mig
	if m.gpmMIG && in.gpm == nil {
		if in.gpm = b.openGPM(g.dev); in.gpm == nil {
			m.gpmMIG = false // no GPM on this GPU (before Hopper)
		}
	}
	if !m.gpmMIG {
		for _, f := range instanceGPMFields {
			r.s.unsupported.add(f)
		}
		return
	}
	take := func(s nvml.GpmSample) nvml.Return { return g.dev.GpmMigSampleGet(in.id, s) }
	b.readGPMSample(r, in.gpm, take, instanceGPM, instanceGPMFields)
}
