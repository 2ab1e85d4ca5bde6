package sim

import (
	"math"

	"github.com/gpuscope/gpuscope/gpu"
)

// The mig scenario: an H100 80GB in MIG mode as one 3g.40gb and two
// 2g.20gb GPU instances (all 7 compute slices and 8 memory slices). A
// training job fills the 3g.40gb, an inference server with a daily-looking
// wave of requests runs in the first 2g.20gb, the second is free. The
// jobs' containers are the GPU's container with /train and /serve
// appended.

// simInstanceSpec is one GPU instance of the mig scenario.
type simInstanceSpec struct {
	id        int    // NVML GPU instance id
	slices    uint32 // compute slices of the profile
	memoryMiB uint64 // what NVML reports as the MIG device's total memory
	job       string // "train", "serve" or "" (free)
}

var simInstanceSpecs = []simInstanceSpec{
	{id: 1, slices: 3, memoryMiB: 40192, job: "train"},
	{id: 5, slices: 2, memoryMiB: 19968, job: "serve"},
	{id: 6, slices: 2, memoryMiB: 19968},
}

// simMIGSlices is the number of compute slices of an H100.
const simMIGSlices = 7

// simInstanceState is one GPU instance at one instant.
type simInstanceState struct {
	grActive, smActive, smOccupancy, tensor, dram float64
	memUsedMiB                                    float64
	process                                       bool
}

// simMIG is the mig scenario's state of one simulated GPU.
type simMIG struct {
	infos []*gpu.Instance
	cur   []simInstanceState
}

// migStep advances the GPU's instances to simulated time t and returns
// the physical GPU's state, whose power and heat follow the instances'
// activity weighted by their slices.
func (g *simGPU) migStep(t float64, noise func(float64) float64) simState {
	if g.mig == nil {
		g.mig = &simMIG{cur: make([]simInstanceState, len(simInstanceSpecs))}
		for _, sp := range simInstanceSpecs {
			g.mig.infos = append(g.mig.infos, g.info.Instance(sp.id, sp.slices, sp.memoryMiB))
		}
	}
	active := 0.0 // slice-weighted activity of the whole GPU, 0 to 1
	for i, sp := range simInstanceSpecs {
		var st simInstanceState
		switch sp.job {
		case "train":
			a := clamp(0.88+noise(0.03), 0.6, 0.99)
			st = simInstanceState{
				grActive: a, smActive: clamp(a*0.92+noise(0.01), 0, 1), smOccupancy: clamp(0.38+noise(0.02), 0, 1),
				tensor: clamp(a*0.65+noise(0.03), 0, 1), dram: clamp(0.42+noise(0.04), 0, 1),
				memUsedMiB: 30700 + noise(2), process: true,
			}
		case "serve":
			// Requests come in waves: busy half of every simulated 10 minutes.
			a := clamp(0.35+0.25*math.Sin(2*math.Pi*t/600)+noise(0.03), 0.05, 0.9)
			st = simInstanceState{
				grActive: a, smActive: clamp(a*0.8+noise(0.01), 0, 1), smOccupancy: clamp(0.2+noise(0.02), 0, 1),
				tensor: clamp(a*0.5+noise(0.03), 0, 1), dram: clamp(0.25+a*0.3+noise(0.02), 0, 1),
				memUsedMiB: 11800 + noise(2), process: true,
			}
		}
		st.memUsedMiB = clamp(st.memUsedMiB, 0, float64(sp.memoryMiB))
		g.mig.cur[i] = st
		active += st.grActive * float64(sp.slices) / simMIGSlices
	}
	util := 100 * active
	st := g.busy(util, 0, noise)
	if active < 0.01 {
		st = g.idle(noise)
	}
	st.nvlinkMBs = 0 // MIG instances do not use NVLink
	st.process = false
	return st
}

// fillMIG turns the mig scenario's state into what the NVML backend reads
// from a GPU in MIG mode: whole-GPU fields on the GPU, without the
// utilisation NVML does not report in MIG mode, and instance fields per
// GPU instance.
func (b *Backend) fillMIG(s *gpu.GPUSample, g *simGPU) {
	for _, f := range []gpu.Field{gpu.FieldGPUUtil, gpu.FieldMemCopyUtil} {
		if b.env.Enabled(f) { // fill set it
			s.SetUnsupported(f)
		}
	}
	for i, sp := range simInstanceSpecs {
		st := g.mig.cur[i]
		is := gpu.NewInstanceSample(g.mig.infos[i])
		set := func(f gpu.Field, v float64) {
			if b.env.Enabled(f) {
				is.Set(f, v)
			}
		}
		used := float64(int64(st.memUsedMiB))
		set(gpu.FieldFBUsed, used)
		set(gpu.FieldFBReserved, 0)
		set(gpu.FieldFBFree, float64(sp.memoryMiB)-used)
		set(gpu.FieldFBTotal, float64(sp.memoryMiB))
		set(gpu.FieldProfGrEngineActive, st.grActive)
		set(gpu.FieldProfSMActive, st.smActive)
		set(gpu.FieldProfSMOccupancy, st.smOccupancy)
		set(gpu.FieldProfTensorActive, st.tensor)
		set(gpu.FieldProfDRAMActive, st.dram)
		if b.env.Enabled(gpu.FieldContainerMemory) {
			var cs []gpu.Container
			if st.process && g.container != "" {
				cs = []gpu.Container{b.env.Container(g.container+"/"+sp.job, used*bytesPerMiB, 0, 1)}
			}
			is.SetContainers(cs, gpu.Orphans{})
			is.SetUnsupported(gpu.FieldContainerSM) // no per-process utilisation in MIG mode
		}
		s.AddInstance(is)
	}
}
