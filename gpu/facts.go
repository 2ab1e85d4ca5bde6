package gpu

import (
	"fmt"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoDriver is ReadFacts's error when libnvidia-ml.so.1 cannot be
// loaded; Facts.DeviceFile then says whether NVIDIA GPUs are there all
// the same (a GPU node without the driver's libraries).
var ErrNoDriver = errNoDriver

// DefaultNVIDIADevices are the files that exist only where NVIDIA GPUs and
// their kernel driver are; Options.NVIDIADevices defaults to them.
func DefaultNVIDIADevices() []string {
	return []string{"/dev/nvidia[0-9]*", "/proc/driver/nvidia/gpus/*"}
}

// Facts is what NVML says about the machine, read once for `gpuscope
// doctor`: the same library, loaded the same way, as the collector's.
type Facts struct {
	// DeviceFile is a file that shows NVIDIA GPUs are present, or "".
	DeviceFile string
	// NVMLVersion and DriverVersion are as nvidia-smi prints them
	// (12.550.54.15, 550.54.15); CUDAVersion is the highest CUDA version
	// the driver supports, as 12040 for 12.4 (0 when unknown).
	NVMLVersion   string
	DriverVersion string
	CUDAVersion   int
	// GPMLibrary and MIGLibrary say whether the loaded library has the
	// GPM calls (R520 and later) and the MIG calls the collector needs.
	GPMLibrary bool
	MIGLibrary bool
	GPUs       []GPUFacts
}

// GPUFacts is one GPU as NVML lists it.
type GPUFacts struct {
	Index int
	Name  string
	UUID  string
	// GPM: the GPU has GPM (Hopper and newer), so DCGM_FI_PROF_* can be
	// read. MIGCapable: the GPU answers the MIG mode call; MIGEnabled: it
	// is in MIG mode.
	GPM        bool
	MIGCapable bool
	MIGEnabled bool
	// Err is why the GPU could not be identified; the other fields are
	// then partly empty.
	Err error
}

// ReadFacts opens NVML through lib (nil: the real libnvidia-ml.so.1,
// dlopen'ed as the collector does), reads the library, driver and GPUs,
// and shuts NVML down again. devices are the globs of DeviceFile (nil:
// DefaultNVIDIADevices). When the library cannot be loaded it returns
// ErrNoDriver with DeviceFile filled in.
func ReadFacts(lib nvml.Interface, devices []string) (*Facts, error) {
	if lib == nil {
		lib = nvml.New()
	}
	if devices == nil {
		devices = DefaultNVIDIADevices()
	}
	f := &Facts{}
	for _, pattern := range devices {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			f.DeviceFile = m[0]
			break
		}
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return f, ErrNoDriver
		}
		return f, fmt.Errorf("initialise NVML: %w", ret)
	}
	defer lib.Shutdown()
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		f.NVMLVersion = v
	}
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("read driver version: %w", ret)
	}
	f.DriverVersion = driver
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		f.CUDAVersion = v
	}
	f.GPMLibrary = lookupSymbols(lib).gpm
	f.MIGLibrary = hasSymbols(lib, migSymbols...)
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("count GPUs: %w", ret)
	}
	for i := range n {
		f.GPUs = append(f.GPUs, readGPUFacts(lib, i, f.GPMLibrary, f.MIGLibrary))
	}
	return f, nil
}

func readGPUFacts(lib nvml.Interface, i int, gpm, mig bool) GPUFacts {
	g := GPUFacts{Index: i}
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("get handle: %w", ret)
		return g
	}
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("read UUID: %w", ret)
		return g
	}
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("read name: %w", ret)
		return g
	}
	if gpm {
		sup, ret := dev.GpmQueryDeviceSupport()
		g.GPM = ret == nvml.SUCCESS && sup.IsSupportedDevice != 0
	}
	if mig {
		mode, _, ret := dev.GetMigMode()
		g.MIGCapable = ret == nvml.SUCCESS
		g.MIGEnabled = g.MIGCapable && mode == nvml.DEVICE_MIG_ENABLE
	}
	return g
}

// CUDAVersionString formats NVML's CUDA driver version (12040) as
// nvidia-smi does (12.4); "" for 0.
func CUDAVersionString(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}
