package config

import (
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/sim"
)

// GPU is the `gpu:` section: the GPU collector's settings and, under
// `sim:`, those of the simulated GPUs of backend sim. The two are kept by
// the packages that use them; the file has them as one section.
type GPU struct {
	gpu.Config `yaml:",inline"`
	Sim        sim.Config `yaml:"sim"`
}

func defaultGPU() GPU {
	return GPU{Config: gpu.DefaultConfig(), Sim: sim.DefaultConfig()}
}

// Validate reports the first key with a bad value, named as in the file:
// the collector's settings first, then the simulator's.
func (g GPU) Validate() error {
	if err := g.Config.Validate(); err != nil {
		return err
	}
	return g.Sim.Validate()
}
