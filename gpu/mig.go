package gpu

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// MIG (Multi-Instance GPU). A GPU in MIG mode is split into GPU instances,
// each with its own memory and SMs. dcgm-exporter publishes such a GPU per
// instance: the parent's labels (gpu, UUID, pci_bus_id, device, modelName,
// Hostname, DCGM_FI_DRIVER_VERSION) plus GPU_I_PROFILE (the instance's
// profile as DCGM names it, "3g.40gb") and GPU_I_ID (NVML's GPU instance
// id). gpuscope publishes each field at exactly one level:
//
//   - per instance, with the two extra labels: what an instance has of its
//     own, its framebuffer (DCGM_FI_DEV_FB_*) and engine activity
//     (DCGM_FI_PROF_GR_ENGINE_ACTIVE, _SM_ACTIVE, _SM_OCCUPANCY,
//     _PIPE_TENSOR_ACTIVE, _DRAM_ACTIVE, from NVML GPM per GPU instance),
//     and the per-container series of the processes running in it;
//   - once for the physical GPU, without them: everything else (power,
//     temperatures, clocks, energy, PCIe and NVLink, ECC, XID, throttling).
//
// So sum by (gpu) adds up instances without counting the GPU twice, and a
// GPU's power is not repeated per instance (dcgm-exporter repeats
// whole-GPU fields on every instance series). In MIG mode the driver does
// not report DCGM_FI_DEV_GPU_UTIL or DCGM_FI_DEV_MEM_COPY_UTIL, nor
// per-process SM utilisation; they are absent and
// gpuscope_gpu_field_supported says 0.

// instanceFields are the fields a GPU in MIG mode reports per GPU instance.
var instanceFields = fieldSetOf(
	FieldFBFree, FieldFBUsed, FieldFBReserved, FieldFBTotal,
	FieldProfGrEngineActive, FieldProfSMActive, FieldProfSMOccupancy, FieldProfTensorActive, FieldProfDRAMActive,
	FieldContainerMemory, FieldContainerSM,
)

func fieldSetOf(fs ...Field) fieldSet {
	var s fieldSet
	for _, f := range fs {
		s.add(f)
	}
	return s
}

func (s fieldSet) list() []Field {
	var out []Field
	for f := Field(0); f < numFields; f++ {
		if s.has(f) {
			out = append(out, f)
		}
	}
	return out
}

// Instance identifies a GPU instance of a GPU in MIG mode in labels.
// Like Identity it is made once and shared, read-only, by the samples
// that use it.
type Instance struct {
	parent  *Identity
	id      int
	profile string

	dcgmLabels []string // the parent's dcgmLabels, GPU_I_PROFILE, GPU_I_ID
	ownLabels  []string // gpu, UUID, GPU_I_PROFILE, GPU_I_ID
}

func newInstance(parent *Identity, id int, profile string) *Instance {
	gi := strconv.Itoa(id)
	return &Instance{
		parent:     parent,
		id:         id,
		profile:    profile,
		dcgmLabels: append(parent.dcgmLabels[:len(parent.dcgmLabels):len(parent.dcgmLabels)], profile, gi),
		ownLabels:  []string{parent.ownLabels[0], parent.ownLabels[1], profile, gi},
	}
}

// Instance identifies GPU instance gi of the GPU, made of slices compute
// slices and memoryMiB of memory; its GPU_I_PROFILE label is the
// profile's name as DCGM gives it ("3g.40gb").
func (id *Identity) Instance(gi int, slices uint32, memoryMiB uint64) *Instance {
	return newInstance(id, gi, dcgmProfileName(slices, memoryMiB))
}

// InstanceSample is one GPU instance's values from one cycle. Its
// GPUSample holds the parent's info and only instanceFields; a backend
// sets them with the GPUSample methods.
type InstanceSample struct {
	GPUSample
	inst *Instance
}

// NewInstanceSample starts what a backend read of GPU instance in in one
// cycle; GPUSample.AddInstance adds it to its GPU's sample.
func NewInstanceSample(in *Instance) *InstanceSample {
	return &InstanceSample{GPUSample: GPUSample{info: in.parent}, inst: in}
}

// AddInstance adds is, one of the GPU's instances: the GPU is in MIG mode
// and keeps its whole-GPU fields only, what it holds of the instance
// fields (memory, engine activity, containers) being published per
// instance.
func (s *GPUSample) AddInstance(is *InstanceSample) {
	s.dropInstanceFields()
	s.instances = append(s.instances, *is)
}

// dropInstanceFields leaves a GPU in MIG mode with its whole-GPU fields:
// what it read for the instance fields (the driver reports the sum of the
// instances there) is published per instance instead.
func (s *GPUSample) dropInstanceFields() {
	s.set &^= instanceFields
	s.unsupported &^= instanceFields
	s.containers = nil
	s.orphans = Orphans{}
}

// dcgmProfileName names a GPU instance profile as DCGM does, and so as
// dcgm-exporter's GPU_I_PROFILE label: the slice count, then the memory
// rounded up to whole GiB ("3g.40gb" for 3 slices and 40192 MiB).
func dcgmProfileName(slices uint32, memoryMiB uint64) string {
	return fmt.Sprintf("%dg.%dgb", slices, (memoryMiB+1023)/1024)
}

// migLabels are the labels a per-instance series has on top of its
// whole-GPU counterpart, in dcgm-exporter's spelling.
var migLabels = []string{"GPU_I_PROFILE", "GPU_I_ID"}

// migDescs are the descriptors of the per-instance series: the same names
// and HELP as the whole-GPU ones, two more labels. The collector is
// unchecked (Describe) because a registry refuses a checked collector that
// describes one name with two label sets.
type migDescs struct {
	field           [numFields]*prometheus.Desc
	containerMemory *prometheus.Desc
	containerSM     *prometheus.Desc
	containerProcs  *prometheus.Desc
	orphanMemory    *prometheus.Desc
	orphanProcs     *prometheus.Desc
	processMemory   *prometheus.Desc
	processSM       *prometheus.Desc
	fieldSupported  *prometheus.Desc
}

// newMIGDescs derives the per-instance descriptors from the whole-GPU
// ones (d, fully built), whose labels are dcgm for DCGM fields and
// container for the per-container series.
func newMIGDescs(d *descs, dcgm, container []string) *migDescs {
	withMIG := func(ls []string) []string { return append(ls[:len(ls):len(ls)], migLabels...) }
	m := &migDescs{}
	for f := Field(0); f < numFields; f++ {
		if d.field[f] != nil && instanceFields.has(f) {
			m.field[f] = prometheus.NewDesc(fields[f].name, fields[f].help, withMIG(dcgm), nil)
		}
	}
	if d.containerMemory != nil {
		m.containerMemory = prometheus.NewDesc(fields[FieldContainerMemory].name, fields[FieldContainerMemory].help, withMIG(container), nil)
		m.containerSM = prometheus.NewDesc(fields[FieldContainerSM].name, fields[FieldContainerSM].help, withMIG(container), nil)
		m.containerProcs = prometheus.NewDesc("gpuscope_gpu_container_processes",
			containerProcsHelp, withMIG(container), nil)
		m.orphanMemory = prometheus.NewDesc(orphanMemoryName, orphanMemoryHelp, withUser(withMIG(dcgm)), nil)
		m.orphanProcs = prometheus.NewDesc(orphanProcsName, orphanProcsHelp, withUser(withMIG(dcgm)), nil)
	}
	if d.processMemory != nil {
		m.processMemory = prometheus.NewDesc(processMemoryName, processMemoryHelp, withMIG(processLabels), nil)
		m.processSM = prometheus.NewDesc(processSMName, processSMHelp, withMIG(processLabels), nil)
	}
	m.fieldSupported = prometheus.NewDesc("gpuscope_gpu_field_supported",
		"1 if the GPU reported the field (a metric name) in the last sample, 0 if the driver says the GPU does not support it, in which case the series is omitted. Fields that failed are absent here and counted in gpuscope_gpu_collector_errors_total.",
		withMIG([]string{"gpu", "UUID", "field"}), nil)
	return m
}

// renderInstances renders the series of g's GPU instances, if any.
func (d *descs) renderInstances(r *renderer, g *GPUSample) {
	m := d.mig
	for i := range g.instances {
		is := &g.instances[i]
		info := is.inst
		for f := Field(0); f < numFields; f++ {
			if desc := m.field[f]; desc != nil && is.set.has(f) {
				r.add(desc, fields[f].typ, is.values[f], info.dcgmLabels...)
			}
		}
		if m.containerMemory != nil {
			renderContainers(r, m.containerMemory, m.containerProcs, m.containerSM, is.set, is.containers, info.ownLabels[0], info.ownLabels[1], info.profile, info.ownLabels[3])
			renderOrphans(r, m.orphanMemory, m.orphanProcs, &is.GPUSample, info.dcgmLabels)
			renderProcesses(r, m.processMemory, m.processSM, &is.GPUSample, info.ownLabels[0], info.ownLabels[1], info.profile, info.ownLabels[3])
		}
		renderSupported(r, m.fieldSupported, d.enabled&instanceFields, is.set, is.unsupported, info.ownLabels[0], info.ownLabels[1], info.profile, info.ownLabels[3])
	}
}
