//go:build realgpu

package gpu

// The real-hardware check: on a machine with an NVIDIA GPU and driver,
//
//	go test -tags realgpu -run TestRealGPU -v ./gpu/
//
// reads every GPU through the NVML backend and compares it with
// nvidia-smi, run as the same user. scripts/check-real-gpu.sh runs it at
// idle and under each load of scripts/gpuload (and tensorload.py), as
// root and as an unprivileged user, and passes in:
//
//	GPUCHECK_LOAD      idle (default), fma, tensor, copy, h2d, d2h, alloc, duty or xid
//	GPUCHECK_LOAD_PID  the load's process id (every load but idle and xid)
//	GPUCHECK_LOAD_LOG  the load's standard output, with its "gpuload: rate" lines
//	GPUCHECK_GPU       the index (nvidia-smi's) of the GPU the load runs on; default 0
//	GPUCHECK_OUT       a folder the test writes its last exposition into (optional)
//	GPUCHECK_DMON      a running `nvidia-smi dmon -s pucmt -d 1 -o DT` trace (optional)
//	GPUCHECK_PMON      a `nvidia-smi pmon -s u -d 1` trace taken under the load (optional)
//	GPUCHECK_FMA_CONTAINER_SM  the fma run's mean container SM % (duty; default 100)
//	GPUCHECK_READY     a file TestRealGPUXID creates once it listens for XIDs
//	GPUCHECK_XID_WAIT  how long TestRealGPUXID waits for the XID after that; default 30s
//
// Every cycle of every test, every GPU (realCheckBounds):
//
//	PROF ratios (GR, SM_ACTIVE, SM_OCCUPANCY, PIPE_TENSOR, DRAM) in [0, 1];
//	GPU, memory-copy, encoder, decoder and container SM utilisation in
//	[0, 100]; FB_TOTAL - (FB_USED + FB_FREE + FB_RESERVED) in [-1, +2] MiB
//	(each is truncated to whole MiB, so three addends can lose 2 MiB
//	together); PCIe rates (PROF and gpuscope's) in [0, 1.1 x the link's
//	maximum]; PROF NVLink rates in [0, 1.1 x the active links' rate
//	(nvidia-smi nvlink -s) + 1 MB/s]; from the second cycle, gpuscope's
//	PCIe rate equal to PROF_PCIE's where the GPU has GPM; every value
//	finite; and no XID except under the xid load.
//
// Profiling (DCGM_FI_PROF_*, from GPM): on compute capability 9.0 or later
// (Hopper, Blackwell) all nine fields must have values from the second
// cycle on, as root, and as another user when the driver lets everyone
// profile (RmProfilingAdminOnly: 0 in /proc/driver/nvidia/params); the two
// NVLink ones are excused where nvidia-smi nvlink -s lists the GPU with no
// active link; elsewhere a missing field is logged with the reason.
//
// TestRealGPUAgainstNvidiaSMI, every GPU; nvidia-smi is read before and
// after gpuscope's cycle and a value passes if it matches either read:
//
//	identity       gpu, UUID, pci_bus_id, device (nvidia<index>), modelName,
//	               DCGM_FI_DRIVER_VERSION: exact
//	memory         total, free ±64 MiB; used ±64 MiB (with or without the
//	               reserved part, as nvidia-smi's accounting differs by driver)
//	PCIe link      generation and width, current and max: exact
//	clock events   the reasons bitmask (clocks_event_reasons.active, the 9
//	               bits gpuscope names): exact
//	ECC            volatile and aggregate corrected and uncorrected totals: exact
//	-q             Replays Since Reset, remapped rows (correctable,
//	               uncorrectable, failure): exact; SW Power Capping (us)
//	               brackets DCGM_FI_DEV_POWER_VIOLATION (ns) / 1000 ±1 ms,
//	               which pins the unit
//	memory temp    ±3 °C; encoder, decoder utilisation ±15 points
//	without a dmon trace: utilisation ±15 points, temperature ±3 °C,
//	               power ±max(15 W, 15 %), SM clock ±max(100 MHz, 10 %),
//	               memory clock ±1 % (with one, TestRealGPUUnderLoad compares
//	               these as medians over time instead)
//	and no read fails in the second cycle.
//
// TestRealGPUUnderLoad, the load's GPU over eight cycles one second apart;
// medians over cycles 2-8 (the first has no GPM interval):
//
//	energy   DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's increase within ±30 %
//	         of DCGM_FI_DEV_POWER_USAGE integrated over the same time
//	dmon     medians over the same seconds of the dmon trace: pwr vs
//	         POWER_USAGE ±max(15 W, 15 %), gtemp vs GPU_TEMP ±3, mtemp vs
//	         MEMORY_TEMP ±3, sm vs GPU_UTIL ±15, mem vs MEM_COPY_UTIL ±15,
//	         pclk vs SM_CLOCK ±max(100 MHz, 10 %), mclk vs MEM_CLOCK ±1 %,
//	         fb vs FB_USED (or + RESERVED) ±64 MiB; under duty only sm and
//	         mem, as means
//	idle     GPU_UTIL < 10, PROF_SM_ACTIVE < 0.05
//	fma      GPU_UTIL > 80; GR_ENGINE_ACTIVE in [0.8, 1]; SM_ACTIVE > 0.9;
//	         SM_OCCUPANCY > 0.5; PIPE_TENSOR < 0.05; DRAM < 0.1; the
//	         load's container SM % (mean) > 80
//	tensor   PIPE_TENSOR_ACTIVE > 0.5
//	copy     DRAM_ACTIVE > 0.3 and within ±0.25 of gpuload's measured
//	         read+write rate / the GPU's peak (NVML bus width x max memory
//	         clock x 2)
//	h2d      PROF_PCIE_RX within ±25 % of gpuload's measured rate; TX
//	         < 0.25 x RX; cycle 1's gpuscope_gpu_pcie_rx_bytes_per_second
//	         (NVML's GetPcieThroughput x 1024, GPM has no interval yet)
//	         within ±25 % of the GPM median
//	d2h      the same with TX and RX swapped
//	duty     with E = gpuload's busy fraction x the fma run's container SM %:
//	         the container SM % (mean) E ±10 points, GPU_UTIL (mean) E ±15
//	         points; pmon's sm % for the pid is logged beside them
//	each load but idle: the container series of the load's cgroup (the id
//	         read from /proc/<pid>/cgroup) holds the memory that nvidia-smi
//	         --query-compute-apps lists for the processes of that cgroup,
//	         ±64 MiB; under alloc, that is at least 2 GiB. Skipped when
//	         gpuscope runs in a pid namespace other than the host's (the
//	         field is then unsupported by design).
//
// TestRealGPUXID (GPUCHECK_LOAD=xid): listens for XIDs, creates
// GPUCHECK_READY, and waits for the script's faulting store: within
// GPUCHECK_XID_WAIT, DCGM_FI_DEV_XID_ERRORS must show XID 13, 31 or 43
// with err_code equal to its value and dcgm-exporter's err_msg, and
// gpuscope_gpu_xid_errors_total for that code must be exactly 1.
//
// A value the driver does not give (nvidia-smi prints [N/A]) is logged,
// not compared. Lines starting "gpucheck:" carry the measured figures for
// the script's report.
//
// GPUCHECK_DRYRUN=mock runs the test's own code where there is no GPU:
// the collector reads the package's mock DGX H100 (one GPU) instead of the
// driver, TestRealGPUXID injects XID 31 once it listens, and nvidia-smi is
// whatever PATH finds; gpu/testdata/realgpu-dryrun/nvidia-smi prints the
// mock's values:
//
//	GPUCHECK_DRYRUN=mock PATH=$PWD/gpu/testdata/realgpu-dryrun:$PATH \
//	  go test -tags realgpu -run TestRealGPU -v ./gpu/
//
// The mock is not idle and has no loads, so those checks fail there; the
// identity, bounds, nvidia-smi, dmon and XID plumbing should pass.

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	realMemTolMiB        = 64
	realUtilTol          = 15
	realFMAUtilMin       = 80
	realFMAGrActiveMin   = 0.8
	realFMASMActiveMin   = 0.9
	realFMAOccupancyMin  = 0.5
	realFMATensorMax     = 0.05
	realFMADRAMMax       = 0.1
	realFMAContainerMin  = 80
	realTensorMin        = 0.5
	realCopyDRAMMin      = 0.3
	realCopyDRAMTol      = 0.25
	realPCIeTol          = 0.25
	realPCIeOtherMax     = 0.25
	realIdleUtilMax      = 10
	realIdleSMActiveMax  = 0.05
	realDutyContainerTol = 10
	realDutyUtilTol      = 15
	realEnergyTol        = 0.30
	realAllocMinMiB      = 2048
	realLoadCycles       = 8
	realLinkSlack        = 1.1
)

// profFields are the nine DCGM profiling fields gpuscope fills from GPM.
var profFields = []string{
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
	"DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
}

// gpuCheckEnv is what check-real-gpu.sh passes in.
type gpuCheckEnv struct {
	load, gpu, out, loadLog, dmon, pmon, ready string
	pid                                        int
	fmaContainerSM                             float64
	xidWait                                    time.Duration
}

var realLoads = []string{"idle", "fma", "tensor", "copy", "h2d", "d2h", "alloc", "duty", "xid"}

func readGPUCheckEnv(t *testing.T) gpuCheckEnv {
	t.Helper()
	e := gpuCheckEnv{
		load: os.Getenv("GPUCHECK_LOAD"), gpu: os.Getenv("GPUCHECK_GPU"), out: os.Getenv("GPUCHECK_OUT"),
		loadLog: os.Getenv("GPUCHECK_LOAD_LOG"), dmon: os.Getenv("GPUCHECK_DMON"), pmon: os.Getenv("GPUCHECK_PMON"),
		ready: os.Getenv("GPUCHECK_READY"), fmaContainerSM: 100, xidWait: 30 * time.Second,
	}
	if e.load == "" {
		e.load = "idle"
	}
	require.Contains(t, realLoads, e.load, "GPUCHECK_LOAD")
	if e.gpu == "" {
		e.gpu = "0"
	}
	if e.load != "idle" && e.load != "xid" {
		var err error
		e.pid, err = strconv.Atoi(os.Getenv("GPUCHECK_LOAD_PID"))
		require.NoError(t, err, "GPUCHECK_LOAD_PID must be the load's pid")
		_, err = os.Stat(fmt.Sprintf("/proc/%d", e.pid))
		require.NoError(t, err, "the load (pid %d) is not running", e.pid)
	}
	if s := os.Getenv("GPUCHECK_FMA_CONTAINER_SM"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, "GPUCHECK_FMA_CONTAINER_SM")
		e.fmaContainerSM = v
	}
	if s := os.Getenv("GPUCHECK_XID_WAIT"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "GPUCHECK_XID_WAIT")
		e.xidWait = d
	}
	return e
}

// smiQuery runs nvidia-smi with a --query-*= argument and returns its CSV
// rows, fields trimmed, checking that each has want fields.
func smiQuery(t *testing.T, query string, want int) [][]string {
	t.Helper()
	rows, err := smiQueryErr(query, want)
	require.NoError(t, err)
	return rows
}

func smiQueryErr(query string, want int) ([][]string, error) {
	cmd := exec.Command("nvidia-smi", query, "--format=csv,noheader,nounits")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi %s: %w: %s%s", query, err, bytes.TrimSpace(out), bytes.TrimSpace(stderr.Bytes()))
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "No running") {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != want {
			return nil, fmt.Errorf("nvidia-smi %s: want %d fields, got %q", query, want, line)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		rows = append(rows, f)
	}
	return rows, nil
}

// smiGPU is one GPU as nvidia-smi --query-gpu reports it; numbers are NaN
// where it prints [N/A].
type smiGPU struct {
	index, uuid, busID, name, driver, computeCap, clockEvents string
	num                                                       map[string]float64
}

// smiGPUFields are the --query-gpu fields read; the first seven are kept
// as text, the rest are numbers. The clock-event field was named
// clocks_throttle_reasons.active before driver 535.
var smiGPUFields = []string{
	"index", "uuid", "pci.bus_id", "name", "driver_version", "compute_cap", "clocks_event_reasons.active",
	"utilization.gpu", "utilization.memory", "utilization.encoder", "utilization.decoder",
	"memory.used", "memory.free", "memory.total", "temperature.gpu", "temperature.memory",
	"power.draw", "clocks.sm", "clocks.mem",
	"pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
	"ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
	"ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total",
}

// smiFields are the smiGPUFields this nvidia-smi knows, found once per
// test binary: a field an older or newer nvidia-smi does not know must not
// cost every comparison (nvidia-smi refuses the whole query for it).
var smiFields struct {
	once   sync.Once
	fields []string
	err    error
}

func knownSMIFields(t *testing.T) []string {
	t.Helper()
	smiFields.once.Do(func() {
		fields := slices.Clone(smiGPUFields)
		if _, err := smiQueryErr("--query-gpu="+strings.Join(fields, ","), len(fields)); err == nil {
			smiFields.fields = fields
			return
		}
		var unknown []string
		for i, f := range fields {
			names := []string{f}
			if f == "clocks_event_reasons.active" {
				names = append(names, "clocks_throttle_reasons.active") // before driver 535
			}
			fields[i] = ""
			for _, n := range names {
				if _, err := smiQueryErr("--query-gpu="+n, 1); err == nil {
					fields[i] = n
					break
				}
			}
			if fields[i] == "" {
				unknown = append(unknown, f)
			}
		}
		if slices.Contains(unknown, "index") || slices.Contains(unknown, "uuid") || slices.Contains(unknown, "pci.bus_id") {
			_, smiFields.err = smiQueryErr("--query-gpu=index,uuid,pci.bus_id", 3)
			return
		}
		smiFields.fields = fields
		t.Logf("gpucheck: nvidia-smi does not know --query-gpu fields %v: not compared", unknown)
	})
	require.NoError(t, smiFields.err)
	return smiFields.fields
}

func nvidiaSMI(t *testing.T) []smiGPU {
	t.Helper()
	all := knownSMIFields(t)
	var fields []string
	for _, f := range all {
		if f != "" {
			fields = append(fields, f)
		}
	}
	rows := smiQuery(t, "--query-gpu="+strings.Join(fields, ","), len(fields))
	var gpus []smiGPU
	for _, row := range rows {
		text := map[string]string{}
		for i, f := range fields {
			text[f] = row[i]
		}
		get := func(i int) string {
			if v, ok := text[all[i]]; ok && all[i] != "" {
				return v
			}
			return "[N/A]"
		}
		g := smiGPU{index: get(0), uuid: get(1), busID: get(2), name: get(3), driver: get(4), computeCap: get(5), clockEvents: get(6), num: map[string]float64{}}
		for i := 7; i < len(all); i++ {
			g.num[smiGPUFields[i]] = smiNum(get(i))
		}
		gpus = append(gpus, g)
	}
	require.NotEmpty(t, gpus, "nvidia-smi lists no GPU")
	return gpus
}

func smiByIndex(gpus []smiGPU, index string) (smiGPU, bool) {
	for _, g := range gpus {
		if g.index == index {
			return g, true
		}
	}
	return smiGPU{}, false
}

// smiQ runs nvidia-smi -q for one GPU and parses it; nil, with the reason
// logged, when it cannot.
func smiQ(t *testing.T, index, busID string) map[string]string {
	t.Helper()
	out, err := exec.Command("nvidia-smi", "-q", "-i", index).Output()
	if err != nil {
		t.Logf("nvidia-smi -q -i %s: %v", index, err)
		return nil
	}
	gpus, err := parseSMIQuery(bytes.NewReader(out))
	if err != nil {
		t.Logf("nvidia-smi -q -i %s: %v", index, err)
		return nil
	}
	for id, g := range gpus {
		if strings.EqualFold(id, busID) {
			return g
		}
	}
	t.Logf("nvidia-smi -q -i %s has no GPU %s", index, busID)
	return nil
}

// realDryRun is the mock machine of a GPUCHECK_DRYRUN=mock run, else nil.
var realDryRun *mockMachine

// realCollector is an NVML collector on the real driver, sampling once a
// second, with every family on, after its first cycle. When the test ends
// it keeps the last exposition in $GPUCHECK_OUT.
func realCollector(t *testing.T) (*Collector, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Backend = BackendNVML
	cfg.Families = Families{Profiling: true, Processes: true, ECC: true, RetiredPages: true, Violations: true, ClockEvents: true, NVLinkErrors: true}
	o := Options{Config: cfg, ProcRoot: "/proc", Interval: time.Second}
	if os.Getenv("GPUCHECK_DRYRUN") == "mock" {
		realDryRun = newMockMachine(t, 1)
		o.NVML = realDryRun.srv
	}
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	up, _ := lookup(t, reg, "gpuscope_gpu_collector_up", nil)
	require.Equal(t, 1.0, up, "NVML must load on a GPU machine")
	t.Cleanup(func() {
		dir := os.Getenv("GPUCHECK_OUT")
		if dir == "" {
			return
		}
		name := fmt.Sprintf("%s-uid%d.prom", strings.ReplaceAll(t.Name(), "/", "_"), os.Geteuid())
		if err := os.WriteFile(filepath.Join(dir, name), exposition(t, reg), 0o644); err != nil {
			t.Logf("cannot keep the exposition: %v", err)
		}
	})
	return c, reg
}

// metricValue is a sample's value whatever its type.
func metricValue(mf *dto.MetricFamily, m *dto.Metric) float64 {
	switch mf.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue()
	default:
		return m.GetGauge().GetValue()
	}
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// realCycle is a cycle's whole-GPU series of one GPU, by metric name: those
// labelled gpu=<index> with one series per name (not the MIG instances',
// the containers', the clock events' or the XIDs').
type realCycle struct {
	at float64 // the sample time, Unix seconds
	v  map[string]float64
}

func (s realCycle) get(name string) float64 {
	if v, ok := s.v[name]; ok {
		return v
	}
	return math.NaN()
}

func takeRealCycle(t *testing.T, reg prometheus.Gatherer, gpu string) realCycle {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	s := realCycle{v: map[string]float64{}}
	many := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := labelsOf(m)
			if mf.GetName() == "gpuscope_gpu_collector_last_success_timestamp_seconds" {
				s.at = metricValue(mf, m)
			}
			if l["gpu"] != gpu || l["GPU_I_ID"] != "" {
				continue
			}
			if _, seen := s.v[mf.GetName()]; seen {
				many[mf.GetName()] = true
			}
			s.v[mf.GetName()] = metricValue(mf, m)
		}
	}
	for name := range many {
		delete(s.v, name)
	}
	return s
}

// realCheckBounds checks what must hold in every cycle on every GPU (see the
// file's comment). nvlinkMax is the NVLink rate each GPU can carry (by
// index; absent when unknown).
func realCheckBounds(t *testing.T, reg prometheus.Gatherer, cycle int, expectXID bool, nvlinkMax map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	type key struct{ gpu, name string }
	whole := map[key]float64{} // whole-GPU series by GPU and name
	ratios := map[string]bool{"DCGM_FI_PROF_GR_ENGINE_ACTIVE": true, "DCGM_FI_PROF_SM_ACTIVE": true, "DCGM_FI_PROF_SM_OCCUPANCY": true, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": true, "DCGM_FI_PROF_DRAM_ACTIVE": true}
	utils := map[string]bool{"DCGM_FI_DEV_GPU_UTIL": true, "DCGM_FI_DEV_MEM_COPY_UTIL": true, "DCGM_FI_DEV_ENC_UTIL": true, "DCGM_FI_DEV_DEC_UTIL": true, "gpuscope_gpu_container_sm_utilization_percent": true}
	pcie := []string{"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "gpuscope_gpu_pcie_tx_bytes_per_second", "gpuscope_gpu_pcie_rx_bytes_per_second"}
	nvlink := map[string]bool{"DCGM_FI_PROF_NVLINK_TX_BYTES": true, "DCGM_FI_PROF_NVLINK_RX_BYTES": true}
	for _, mf := range mfs {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			l := labelsOf(m)
			v := metricValue(mf, m)
			where := fmt.Sprintf("cycle %d: %s%v", cycle, name, l)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("%s = %v: not a finite value", where, v)
				continue
			}
			if ratios[name] && (v < 0 || v > 1) {
				t.Errorf("%s = %g: a ratio outside [0, 1] (a percentage not divided by 100?)", where, v)
			}
			if utils[name] && (v < 0 || v > 100) {
				t.Errorf("%s = %g: a utilisation outside [0, 100]", where, v)
			}
			if nvlink[name] {
				if lim, ok := nvlinkMax[l["gpu"]]; ok && (v < 0 || v > realLinkSlack*lim+1e6) {
					t.Errorf("%s = %g B/s: outside [0, %.3g], 1.1 x the active NVLinks' %.3g B/s (nvidia-smi nvlink -s)", where, v, realLinkSlack*lim+1e6, lim)
				}
			}
			if name == "gpuscope_gpu_xid_errors_total" && v > 0 && !expectXID {
				t.Errorf("%s = %g: an XID on a healthy GPU under a load that raises none", where, v)
			}
			if l["gpu"] != "" && l["GPU_I_ID"] == "" && l["id"] == "" && l["reason"] == "" && l["err_code"] == "" && l["field"] == "" {
				whole[key{l["gpu"], name}] = v
			}
		}
	}
	gpus := map[string]bool{}
	for k := range whole {
		gpus[k.gpu] = true
	}
	for gpu := range gpus {
		get := func(name string) (float64, bool) { v, ok := whole[key{gpu, name}]; return v, ok }
		if total, ok := get("DCGM_FI_DEV_FB_TOTAL"); ok {
			used, ok1 := get("DCGM_FI_DEV_FB_USED")
			free, ok2 := get("DCGM_FI_DEV_FB_FREE")
			reserved, _ := get("DCGM_FI_DEV_FB_RESERVED")
			if ok1 && ok2 {
				if d := total - (used + free + reserved); d < -1 || d > 2 {
					t.Errorf("cycle %d: gpu %s: FB_TOTAL %g - (USED %g + FREE %g + RESERVED %g) = %g MiB, want -1 to +2 (whole-MiB truncation)", cycle, gpu, total, used, free, reserved, d)
				}
			}
		}
		if lim, ok := get("gpuscope_gpu_pcie_max_bandwidth_bytes_per_second"); ok {
			for _, name := range pcie {
				if v, ok := get(name); ok && (v < 0 || v > realLinkSlack*lim) {
					t.Errorf("cycle %d: gpu %s: %s = %.4g B/s: outside [0, %.4g], 1.1 x the link's maximum", cycle, gpu, name, v, realLinkSlack*lim)
				}
			}
		}
		if cycle >= 2 {
			for _, dir := range []string{"tx", "rx"} {
				prof, ok1 := get("DCGM_FI_PROF_PCIE_" + strings.ToUpper(dir) + "_BYTES")
				own, ok2 := get("gpuscope_gpu_pcie_" + dir + "_bytes_per_second")
				if ok1 && (!ok2 || own != prof) {
					t.Errorf("cycle %d: gpu %s: gpuscope_gpu_pcie_%s_bytes_per_second = %g (present %v), want DCGM_FI_PROF_PCIE_%s_BYTES's %g (GPM's interval average)", cycle, gpu, dir, own, ok2, strings.ToUpper(dir), prof)
				}
			}
		}
	}
}

// profilingPolicy says whether the nine profiling fields are required of
// this GPU for this user, and why (or why not).
func profilingPolicy(computeCap string) (bool, string) {
	cc := smiNum(computeCap)
	if math.IsNaN(cc) || cc < 9 {
		return false, fmt.Sprintf("compute capability %s: GPM needs 9.0 (Hopper) or later", computeCap)
	}
	if os.Geteuid() == 0 {
		return true, fmt.Sprintf("compute capability %s, root", computeCap)
	}
	params, err := os.ReadFile("/proc/driver/nvidia/params")
	if err != nil {
		return false, fmt.Sprintf("uid %d, and /proc/driver/nvidia/params cannot be read (%v) to tell whether the driver lets non-root users profile", os.Geteuid(), err)
	}
	for _, line := range strings.Split(string(params), "\n") {
		if v, ok := strings.CutPrefix(line, "RmProfilingAdminOnly:"); ok {
			if strings.TrimSpace(v) == "0" {
				return true, fmt.Sprintf("compute capability %s, uid %d, RmProfilingAdminOnly: 0", computeCap, os.Geteuid())
			}
			return false, fmt.Sprintf("uid %d and RmProfilingAdminOnly:%s: the driver keeps profiling to root", os.Geteuid(), v)
		}
	}
	return false, fmt.Sprintf("uid %d, and /proc/driver/nvidia/params has no RmProfilingAdminOnly line", os.Geteuid())
}

// requireProfiling fails for each of the nine profiling fields that has
// no value in s when the policy requires them; the two NVLink fields only
// where nvidia-smi nvlink -s shows the GPU an active link (nvlinkMax).
func requireProfiling(t *testing.T, reg prometheus.Gatherer, gpu, computeCap string, cycle int, s realCycle, nvlinkMax map[string]float64) {
	t.Helper()
	required, why := profilingPolicy(computeCap)
	var missing []string
	for _, f := range profFields {
		if _, ok := s.v[f]; !ok && strings.HasPrefix(f, "DCGM_FI_PROF_NVLINK_") {
			if lim, known := nvlinkMax[gpu]; known && lim == 0 {
				t.Logf("cycle %d: gpu %s: %s has no value and the GPU has no active NVLink (nvidia-smi nvlink -s): not required", cycle, gpu, f)
				continue
			}
		}
		if _, ok := s.v[f]; !ok {
			state := "absent from gpuscope_gpu_field_supported (failed, see gpuscope_gpu_collector_errors_total)"
			if v, ok := lookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": gpu, "field": f}); ok {
				state = fmt.Sprintf("field_supported %g", v)
			}
			missing = append(missing, f+" ("+state+")")
		}
	}
	if len(missing) == 0 {
		return
	}
	if required {
		t.Errorf("cycle %d: gpu %s: profiling fields without a value (%s): %s", cycle, gpu, why, strings.Join(missing, ", "))
	} else {
		t.Logf("cycle %d: gpu %s: profiling fields without a value, not required (%s): %s", cycle, gpu, why, strings.Join(missing, ", "))
	}
}

// nvlinkLimits reads `nvidia-smi nvlink -s`; nil when it cannot be read.
func nvlinkLimits(t *testing.T) map[string]float64 {
	t.Helper()
	out, err := exec.Command("nvidia-smi", "nvlink", "-s").Output()
	if err != nil {
		t.Logf("nvidia-smi nvlink -s: %v: the NVLink rates are not bounded", err)
		return nil
	}
	m, err := parseNVLinkStatus(bytes.NewReader(out))
	if err != nil || len(m) == 0 {
		t.Logf("nvidia-smi nvlink -s lists no GPU (%v): the NVLink rates are not bounded", err)
		return nil
	}
	return m
}

// realWithin passes if got is within tol of before or of after (nvidia-smi
// read on either side of gpuscope's cycle); NaN on both sides is logged.
func realWithin(t *testing.T, what string, got float64, ok bool, before, after, tol float64) {
	t.Helper()
	if math.IsNaN(before) && math.IsNaN(after) {
		t.Logf("%s: nvidia-smi has no value", what)
		return
	}
	if !ok {
		t.Errorf("%s: gpuscope has no value while nvidia-smi reports %v / %v", what, before, after)
		return
	}
	t.Logf("gpucheck: %s gpuscope=%g nvidia-smi=%g/%g", what, got, before, after)
	if math.Abs(got-before) <= tol || math.Abs(got-after) <= tol {
		return
	}
	t.Errorf("%s: gpuscope %g, nvidia-smi %g before and %g after the cycle: want within %g of either", what, got, before, after, tol)
}

func TestRealGPUAgainstNvidiaSMI(t *testing.T) {
	e := readGPUCheckEnv(t)
	smiBefore := nvidiaSMI(t)
	qBefore := map[string]map[string]string{}
	for _, g := range smiBefore {
		qBefore[g.index] = smiQ(t, g.index, g.busID)
	}
	c, reg := realCollector(t)
	smiAfter := nvidiaSMI(t)
	nvlinkMax := nvlinkLimits(t)
	realCheckBounds(t, reg, 1, false, nvlinkMax)
	look := func(name string, match map[string]string) (float64, bool) { return lookup(t, reg, name, match) }
	for _, g := range smiBefore {
		t.Run("gpu"+g.index, func(t *testing.T) {
			a, ok := smiByIndex(smiAfter, g.index)
			require.True(t, ok, "GPU %s gone from nvidia-smi between two reads", g.index)
			qAfter := smiQ(t, g.index, g.busID)
			m := map[string]string{"gpu": g.index}
			get := func(name string) (float64, bool) { return look(name, m) }

			// Identity, exact.
			series := gather(t, reg, "DCGM_FI_DEV_FB_TOTAL")
			var labels map[string]string
			for _, s := range series {
				if s.labels["gpu"] == g.index && s.labels["GPU_I_ID"] == "" {
					labels = s.labels
				}
			}
			require.NotNil(t, labels, "no DCGM_FI_DEV_FB_TOTAL{gpu=%q}", g.index)
			for _, x := range []struct{ label, want string }{
				{"UUID", g.uuid}, {"pci_bus_id", g.busID}, {"device", "nvidia" + g.index},
				{"modelName", g.name}, {"DCGM_FI_DRIVER_VERSION", g.driver},
			} {
				// assert, not require: the comparisons below still run.
				assert.Equal(t, x.want, labels[x.label], "label %s of gpu %s (nvidia-smi: %q)", x.label, g.index, x.want)
			}
			t.Logf("gpucheck: gpu=%s identity (nvidia-smi) UUID=%s pci_bus_id=%s modelName=%q driver=%s compute_cap=%s", g.index, g.uuid, g.busID, g.name, g.driver, g.computeCap)

			num := func(field string) (float64, float64) { return g.num[field], a.num[field] }
			check := func(name, field string, tol float64) {
				t.Helper()
				got, ok := get(name)
				b, af := num(field)
				realWithin(t, fmt.Sprintf("gpu=%s %s (%s)", g.index, name, field), got, ok, b, af, tol)
			}
			check("DCGM_FI_DEV_FB_TOTAL", "memory.total", realMemTolMiB)
			check("DCGM_FI_DEV_FB_FREE", "memory.free", realMemTolMiB)
			used, ok := get("DCGM_FI_DEV_FB_USED")
			require.True(t, ok, "DCGM_FI_DEV_FB_USED missing")
			reserved, _ := get("DCGM_FI_DEV_FB_RESERVED")
			ub, ua := num("memory.used")
			t.Logf("gpucheck: gpu=%s DCGM_FI_DEV_FB_USED gpuscope=%g reserved=%g nvidia-smi=%g/%g", g.index, used, reserved, ub, ua)
			if math.Min(math.Abs(used-ub), math.Abs(used-ua)) > realMemTolMiB {
				realWithin(t, fmt.Sprintf("gpu=%s DCGM_FI_DEV_FB_USED+RESERVED (memory.used)", g.index), used+reserved, true, ub, ua, realMemTolMiB)
			}
			for _, x := range []struct{ name, field string }{
				{"gpuscope_gpu_pcie_link_generation", "pcie.link.gen.current"},
				{"gpuscope_gpu_pcie_link_max_generation", "pcie.link.gen.max"},
				{"gpuscope_gpu_pcie_link_width", "pcie.link.width.current"},
				{"gpuscope_gpu_pcie_link_max_width", "pcie.link.width.max"},
				{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc.errors.corrected.volatile.total"},
				{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc.errors.uncorrected.volatile.total"},
				{"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc.errors.corrected.aggregate.total"},
				{"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc.errors.uncorrected.aggregate.total"},
			} {
				check(x.name, x.field, 0)
			}
			check("DCGM_FI_DEV_MEMORY_TEMP", "temperature.memory", 3)
			check("DCGM_FI_DEV_ENC_UTIL", "utilization.encoder", realUtilTol)
			check("DCGM_FI_DEV_DEC_UTIL", "utilization.decoder", realUtilTol)
			if e.dmon == "" {
				check("DCGM_FI_DEV_GPU_UTIL", "utilization.gpu", realUtilTol)
				check("DCGM_FI_DEV_MEM_COPY_UTIL", "utilization.memory", realUtilTol)
				check("DCGM_FI_DEV_GPU_TEMP", "temperature.gpu", 3)
				pb, pa := num("power.draw")
				check("DCGM_FI_DEV_POWER_USAGE", "power.draw", math.Max(15, 0.15*math.Max(pb, pa)))
				cb, ca := num("clocks.sm")
				check("DCGM_FI_DEV_SM_CLOCK", "clocks.sm", math.Max(100, 0.10*math.Max(cb, ca)))
				mb, ma := num("clocks.mem")
				check("DCGM_FI_DEV_MEM_CLOCK", "clocks.mem", math.Max(1, 0.01*math.Max(mb, ma)))
			}
			t.Run("clock event reasons", func(t *testing.T) {
				checkClockEvents(t, reg, g, a)
			})
			t.Run("nvidia-smi -q", func(t *testing.T) {
				checkSMIQ(t, reg, g.index, qBefore[g.index], qAfter)
			})
		})
	}
	require.Equal(t, len(smiBefore), countSeries(t, look, smiBefore), "every GPU nvidia-smi lists, and no other")

	// A second cycle a second later: GPM and the NVLink rate have an
	// interval now, and nothing failed.
	time.Sleep(time.Second)
	c.collectOnce(bg)
	realCheckBounds(t, reg, 2, false, nvlinkMax)
	for _, e := range gather(t, reg, "gpuscope_gpu_collector_errors_total") {
		t.Errorf("read failed on a healthy GPU (uid %d): %v = %v", os.Geteuid(), e.labels, e.value)
	}
	for _, g := range smiBefore {
		requireProfiling(t, reg, g.index, g.computeCap, 2, takeRealCycle(t, reg, g.index), nvlinkMax)
	}
	for _, s := range gather(t, reg, "gpuscope_gpu_field_supported") {
		if s.value == 0 {
			t.Logf("gpucheck: not supported: gpu %s %s", s.labels["gpu"], s.labels["field"])
		}
	}
}

// checkClockEvents compares the clock-event reasons gpuscope publishes
// with nvidia-smi's bitmask, on the bits gpuscope names.
func checkClockEvents(t *testing.T, reg prometheus.Gatherer, before, after smiGPU) {
	mb, okb := clockEventMask(before.clockEvents)
	ma, oka := clockEventMask(after.clockEvents)
	if !okb && !oka {
		t.Skipf("nvidia-smi gives no clock event reasons (%q)", before.clockEvents)
	}
	var got, known uint64
	n := 0
	for _, r := range clockEventReasons {
		known |= r.bit
		v, ok := lookup(t, reg, "gpuscope_gpu_clock_event_active", map[string]string{"gpu": before.index, "reason": r.name})
		if !ok {
			continue
		}
		n++
		if v == 1 {
			got |= r.bit
		}
	}
	require.Equal(t, len(clockEventReasons), n, "gpuscope_gpu_clock_event_active: one series per reason")
	t.Logf("gpucheck: gpu=%s clock events gpuscope=%#x nvidia-smi=%s/%s (bits %#x)", before.index, got, before.clockEvents, after.clockEvents, known)
	if (okb && got == mb&known) || (oka && got == ma&known) {
		return
	}
	t.Errorf("clock event reasons: gpuscope %#x, nvidia-smi %s before and %s after (masked to %#x)", got, before.clockEvents, after.clockEvents, known)
}

// checkSMIQ compares what only nvidia-smi -q prints.
func checkSMIQ(t *testing.T, reg prometheus.Gatherer, gpu string, before, after map[string]string) {
	if before == nil || after == nil {
		t.Skip("nvidia-smi -q could not be read (logged above)")
	}
	m := map[string]string{"gpu": gpu}
	for _, x := range []struct{ name, path string }{
		{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "PCI/Replays Since Reset"},
		{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Remapped Rows/Correctable Error"},
		{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Remapped Rows/Uncorrectable Error"},
	} {
		got, ok := lookup(t, reg, x.name, m)
		realWithin(t, fmt.Sprintf("gpu=%s %s (-q %s)", gpu, x.name, x.path), got, ok, smiQNumber(before[x.path], ""), smiQNumber(after[x.path], ""), 0)
	}
	const failure = "Remapped Rows/Remapping Failure Occurred"
	got, ok := lookup(t, reg, "DCGM_FI_DEV_ROW_REMAP_FAILURE", m)
	realWithin(t, fmt.Sprintf("gpu=%s DCGM_FI_DEV_ROW_REMAP_FAILURE (-q %s)", gpu, failure), got, ok, smiQBool(before[failure]), smiQBool(after[failure]), 0)

	// The counter grows while the power cap holds the clocks: gpuscope's
	// read, between the two nvidia-smi reads, must lie between them.
	const capping = "Clocks Event Reasons Counters/SW Power Capping"
	b, a := smiQNumber(before[capping], "us"), smiQNumber(after[capping], "us")
	ns, ok := lookup(t, reg, "DCGM_FI_DEV_POWER_VIOLATION", m)
	switch {
	case math.IsNaN(b) || math.IsNaN(a):
		t.Logf("gpu=%s: nvidia-smi -q has no %q (%q): DCGM_FI_DEV_POWER_VIOLATION's unit not checked", gpu, capping, before[capping])
	case !ok:
		t.Errorf("gpu=%s: DCGM_FI_DEV_POWER_VIOLATION missing while nvidia-smi -q reports %s", gpu, before[capping])
	default:
		us := ns / 1000
		t.Logf("gpucheck: gpu=%s DCGM_FI_DEV_POWER_VIOLATION gpuscope=%g ns = %g us, nvidia-smi -q SW Power Capping %g/%g us", gpu, ns, us, b, a)
		if us < b-1000 || us > a+1000 {
			t.Errorf("gpu=%s: DCGM_FI_DEV_POWER_VIOLATION %g ns = %g us, outside nvidia-smi's %g to %g us (±1 ms) read before and after: a unit other than ns, or another counter", gpu, ns, us, b, a)
		}
		if b < 1e6 {
			t.Logf("gpu=%s: the power-capping counter is under 1 s, so a factor of 1000 would hide in the ±1 ms", gpu)
		}
	}
}

// countSeries counts the GPUs that have a DCGM_FI_DEV_FB_TOTAL series.
func countSeries(t *testing.T, look func(string, map[string]string) (float64, bool), smi []smiGPU) int {
	t.Helper()
	n := 0
	for _, g := range smi {
		if _, ok := look("DCGM_FI_DEV_FB_TOTAL", map[string]string{"gpu": g.index}); ok {
			n++
		}
	}
	return n
}

func TestRealGPUUnderLoad(t *testing.T) {
	e := readGPUCheckEnv(t)
	if e.load == "xid" {
		t.Skip("the xid load is TestRealGPUXID's")
	}
	smi := nvidiaSMI(t)
	g, ok := smiByIndex(smi, e.gpu)
	require.True(t, ok, "nvidia-smi has no GPU %s", e.gpu)
	nvlinkMax := nvlinkLimits(t)
	c, reg := realCollector(t)

	// The load's container, when gpuscope can attribute it.
	var containerID, noContainer string
	if e.pid != 0 {
		id, err := cgroupOfPID(e.pid)
		require.NoError(t, err)
		containerID = id
		noContainer = containerSkipReason(t, reg, e.gpu)
	}

	var cycles []realCycle
	var containerSM []float64
	for i := range realLoadCycles {
		if i > 0 {
			time.Sleep(time.Second)
			c.collectOnce(bg)
		}
		realCheckBounds(t, reg, i+1, false, nvlinkMax)
		s := takeRealCycle(t, reg, e.gpu)
		cycles = append(cycles, s)
		if i > 0 {
			requireProfiling(t, reg, e.gpu, g.computeCap, i+1, s, nvlinkMax)
			if containerID != "" && noContainer == "" {
				if v, ok := lookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", map[string]string{"gpu": e.gpu, "id": containerID}); ok {
					containerSM = append(containerSM, v)
				}
			}
		}
	}
	// Over cycles 2..8: the first has no GPM interval.
	series := func(name string) []float64 {
		var v []float64
		for _, cy := range cycles[1:] {
			if x := cy.get(name); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		return v
	}
	med := func(name string) float64 { return realMedian(series(name)) }
	window := [2]float64{cycles[0].at, cycles[len(cycles)-1].at}
	t.Logf("gpucheck: load=%s uid=%d gpu=%s median GPU_UTIL=%.1f PROF_GR_ENGINE_ACTIVE=%.3f SM_ACTIVE=%.3f SM_OCCUPANCY=%.3f PIPE_TENSOR_ACTIVE=%.3f DRAM_ACTIVE=%.3f PCIE_TX=%.4g PCIE_RX=%.4g",
		e.load, os.Geteuid(), e.gpu, med("DCGM_FI_DEV_GPU_UTIL"), med("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), med("DCGM_FI_PROF_SM_ACTIVE"),
		med("DCGM_FI_PROF_SM_OCCUPANCY"), med("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), med("DCGM_FI_PROF_DRAM_ACTIVE"),
		med("DCGM_FI_PROF_PCIE_TX_BYTES"), med("DCGM_FI_PROF_PCIE_RX_BYTES"))
	if containerID != "" {
		if noContainer != "" {
			t.Logf("gpucheck: load=%s uid=%d container series skipped: %s", e.load, os.Geteuid(), noContainer)
		} else {
			t.Logf("gpucheck: load=%s uid=%d container_sm_mean=%.1f samples=%d id=%s", e.load, os.Geteuid(), realMean(containerSM), len(containerSM), containerID)
		}
	}
	required, why := profilingPolicy(g.computeCap)
	// prof checks a profiling median: a missing one fails only when the
	// fields are required, and the failure is requireProfiling's already.
	prof := func(t *testing.T, name string) float64 {
		t.Helper()
		v := med(name)
		if math.IsNaN(v) {
			if required {
				t.Fatalf("%s: no value under the %s load (%s)", name, e.load, why)
			}
			t.Skipf("%s: no value, not required (%s)", name, why)
		}
		return v
	}
	needContainer := func(t *testing.T) {
		t.Helper()
		if noContainer != "" {
			t.Skip(noContainer)
		}
		if len(containerSM) == 0 {
			t.Fatalf("no gpuscope_gpu_container_sm_utilization_percent{gpu=%q,id=%q} in cycles 2-%d", e.gpu, containerID, realLoadCycles)
		}
	}

	t.Run("energy", func(t *testing.T) {
		first, last := cycles[0], cycles[len(cycles)-1]
		const energy, power = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE"
		if math.IsNaN(first.get(energy)) || math.IsNaN(last.get(energy)) {
			t.Skip("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION not published (GPU older than Volta?)")
		}
		var integral float64 // J, trapezoids between samples
		for i := 1; i < len(cycles); i++ {
			a, b := cycles[i-1], cycles[i]
			require.False(t, math.IsNaN(a.get(power)) || math.IsNaN(b.get(power)), "DCGM_FI_DEV_POWER_USAGE missing in a cycle")
			integral += (a.get(power) + b.get(power)) / 2 * (b.at - a.at)
		}
		joules := (last.get(energy) - first.get(energy)) / 1000
		t.Logf("gpucheck: load=%s uid=%d energy counter %.1f J, power × time %.1f J over %.2f s, ratio %.3f",
			e.load, os.Geteuid(), joules, integral, last.at-first.at, joules/integral)
		require.Greater(t, integral, 0.0)
		require.InEpsilon(t, integral, joules, realEnergyTol, "energy counter increase vs power integrated")
	})

	if e.dmon != "" {
		t.Run("dmon", func(t *testing.T) {
			checkDmon(t, e, g, cycles, window)
		})
	}

	switch e.load {
	case "idle":
		t.Run("idle GPU is idle", func(t *testing.T) {
			util := med("DCGM_FI_DEV_GPU_UTIL")
			require.Less(t, util, float64(realIdleUtilMax), "median DCGM_FI_DEV_GPU_UTIL at idle (is something else running on the GPU?)")
			require.Less(t, prof(t, "DCGM_FI_PROF_SM_ACTIVE"), realIdleSMActiveMax, "median DCGM_FI_PROF_SM_ACTIVE at idle")
		})
	case "fma":
		t.Run("fma keeps the SMs busy", func(t *testing.T) {
			require.Greater(t, med("DCGM_FI_DEV_GPU_UTIL"), float64(realFMAUtilMin), "median DCGM_FI_DEV_GPU_UTIL under the FMA loop")
			gr := prof(t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
			require.True(t, gr > realFMAGrActiveMin && gr <= 1, "median DCGM_FI_PROF_GR_ENGINE_ACTIVE %g under the FMA loop, want (0.8, 1]", gr)
			require.Greater(t, prof(t, "DCGM_FI_PROF_SM_ACTIVE"), realFMASMActiveMin, "median DCGM_FI_PROF_SM_ACTIVE under the FMA loop")
			require.Greater(t, prof(t, "DCGM_FI_PROF_SM_OCCUPANCY"), realFMAOccupancyMin, "median DCGM_FI_PROF_SM_OCCUPANCY under the FMA loop (2048 threads per SM)")
		})
		t.Run("fma leaves the tensor pipe and DRAM idle", func(t *testing.T) {
			require.Less(t, prof(t, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), realFMATensorMax, "median DCGM_FI_PROF_PIPE_TENSOR_ACTIVE under FP32 FMAs (SM_ACTIVE and PIPE_TENSOR swapped?)")
			require.Less(t, prof(t, "DCGM_FI_PROF_DRAM_ACTIVE"), realFMADRAMMax, "median DCGM_FI_PROF_DRAM_ACTIVE under register-only FMAs")
		})
		t.Run("fma container SM", func(t *testing.T) {
			needContainer(t)
			require.Greater(t, realMean(containerSM), float64(realFMAContainerMin), "mean gpuscope_gpu_container_sm_utilization_percent of the FMA load's container: %v", containerSM)
		})
	case "tensor":
		t.Run("tensor load drives the tensor pipe", func(t *testing.T) {
			require.Greater(t, prof(t, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), realTensorMin, "median DCGM_FI_PROF_PIPE_TENSOR_ACTIVE under bf16 matmuls")
		})
	case "copy":
		t.Run("copy keeps device memory busy", func(t *testing.T) {
			dram := prof(t, "DCGM_FI_PROF_DRAM_ACTIVE")
			require.Greater(t, dram, realCopyDRAMMin, "median DCGM_FI_PROF_DRAM_ACTIVE under the copy loop")
			measured := loadRateMedian(t, e, "copy", "bytes_per_s", window)
			peak, how := dramPeak(t, e.gpu)
			if peak == 0 {
				t.Skipf("DRAM_ACTIVE vs the measured rate: the peak bandwidth is unknown (%s)", how)
			}
			t.Logf("gpucheck: load=copy DRAM_ACTIVE=%.3f measured=%.4g B/s peak=%.4g B/s (%s) measured/peak=%.3f", dram, measured, peak, how, measured/peak)
			require.InDelta(t, measured/peak, dram, realCopyDRAMTol, "median DCGM_FI_PROF_DRAM_ACTIVE vs gpuload's read+write rate / peak")
		})
	case "h2d", "d2h":
		t.Run("PCIe rate matches the copies", func(t *testing.T) {
			main, other := "RX", "TX" // h2d: the GPU receives
			if e.load == "d2h" {
				main, other = "TX", "RX"
			}
			got := prof(t, "DCGM_FI_PROF_PCIE_"+main+"_BYTES")
			back := prof(t, "DCGM_FI_PROF_PCIE_"+other+"_BYTES")
			measured := loadRateMedian(t, e, e.load, "bytes_per_s", window)
			nvml1 := cycles[0].get("gpuscope_gpu_pcie_" + strings.ToLower(main) + "_bytes_per_second")
			t.Logf("gpucheck: load=%s PROF_PCIE_%s=%.4g B/s PROF_PCIE_%s=%.4g B/s measured=%.4g B/s ratio=%.3f; cycle-1 NVML GetPcieThroughput×1024=%.4g B/s, /GPM=%.3f",
				e.load, main, got, other, back, measured, got/measured, nvml1, nvml1/got)
			require.InEpsilon(t, measured, got, realPCIeTol, "median DCGM_FI_PROF_PCIE_%s_BYTES vs gpuload's measured %s rate", main, e.load)
			require.Less(t, back, realPCIeOtherMax*got, "DCGM_FI_PROF_PCIE_%s_BYTES (the other direction) should carry only requests and acknowledgements", other)
			require.False(t, math.IsNaN(nvml1), "cycle 1 has no gpuscope_gpu_pcie_%s_bytes_per_second (NVML's GetPcieThroughput)", strings.ToLower(main))
			require.InEpsilon(t, got, nvml1, realPCIeTol, "cycle 1's GetPcieThroughput × 1024 vs GPM's median: the KB unit")
		})
	case "duty":
		t.Run("duty cycle: container SM share is an interval average", func(t *testing.T) {
			busy := realMean(ratesValues(loadRates(t, e, "duty", "busy", window)))
			want := busy * e.fmaContainerSM
			util := realMean(series("DCGM_FI_DEV_GPU_UTIL"))
			pmon := pmonMean(t, e)
			t.Logf("gpucheck: load=duty busy=%.3f expected=%.1f (busy × fma's container SM %.1f) container_sm_mean=%.1f GPU_UTIL_mean=%.1f pmon_sm_mean=%.1f", busy, want, e.fmaContainerSM, realMean(containerSM), util, pmon)
			require.InDelta(t, want, util, realDutyUtilTol, "mean DCGM_FI_DEV_GPU_UTIL under the duty cycle")
			needContainer(t)
			require.InDelta(t, want, realMean(containerSM), realDutyContainerTol,
				"mean gpuscope_gpu_container_sm_utilization_percent under a %.0f %% duty cycle: an interval average reads about busy × the fma's; an average of the busy samples only reads near the fma's (%v)", busy*100, containerSM)
		})
	}
	if e.pid != 0 {
		t.Run("the load's process and container", func(t *testing.T) {
			if noContainer != "" {
				t.Skip(noContainer)
			}
			checkLoadProcess(t, e.load, e.pid, e.gpu, reg)
		})
	}
}

// containerSkipReason says why per-container series cannot be checked
// here, or "": gpuscope switches them off (field unsupported) when it runs
// in a pid namespace other than the host's, as in some container runners.
func containerSkipReason(t *testing.T, reg prometheus.Gatherer, gpu string) string {
	t.Helper()
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil || ns == initPIDNamespace {
		return ""
	}
	if v, ok := lookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": gpu, "field": fields[FieldContainerMemory].name}); ok && v == 0 {
		return fmt.Sprintf("pid namespace %s is not the host's, and gpuscope reports the container fields unsupported there by design", ns)
	}
	return ""
}

// loadRates reads the load's rate lines whose window ends within the
// test's cycles (and a second after).
func loadRates(t *testing.T, e gpuCheckEnv, mode, unit string, window [2]float64) []loadRate {
	t.Helper()
	require.NotEmpty(t, e.loadLog, "GPUCHECK_LOAD_LOG must name the load's output")
	f, err := os.Open(e.loadLog)
	require.NoError(t, err)
	defer f.Close()
	all, err := parseLoadRates(f, mode, unit)
	require.NoError(t, err)
	var in []loadRate
	for _, r := range all {
		if r.at >= window[0] && r.at <= window[1]+1 {
			in = append(in, r)
		}
	}
	require.NotEmpty(t, in, "no \"gpuload: rate ... mode=%s %s=\" line in %s between %.0f and %.0f (of %d)", mode, unit, e.loadLog, window[0], window[1]+1, len(all))
	return in
}

func ratesValues(r []loadRate) []float64 {
	v := make([]float64, len(r))
	for i, x := range r {
		v[i] = x.value
	}
	return v
}

// loadRateMedian is the median of the load's measured rates in the window.
func loadRateMedian(t *testing.T, e gpuCheckEnv, mode, unit string, window [2]float64) float64 {
	t.Helper()
	return realMedian(ratesValues(loadRates(t, e, mode, unit, window)))
}

// dramPeak is the GPU's peak DRAM bandwidth from NVML: bus width (bits) /
// 8 × the maximum memory clock × 2 (double data rate); 0 with the reason
// when NVML does not give both.
func dramPeak(t *testing.T, gpu string) (float64, string) {
	t.Helper()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return 0, fmt.Sprintf("nvmlInit: %v", ret)
	}
	defer nvml.Shutdown()
	i, err := strconv.Atoi(gpu)
	if err != nil {
		return 0, err.Error()
	}
	dev, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return 0, fmt.Sprintf("handle: %v", ret)
	}
	width, ret := dev.GetMemoryBusWidth()
	if ret != nvml.SUCCESS {
		return 0, fmt.Sprintf("memory bus width: %v", ret)
	}
	clock, ret := dev.GetMaxClockInfo(nvml.CLOCK_MEM)
	if ret != nvml.SUCCESS {
		return 0, fmt.Sprintf("max memory clock: %v", ret)
	}
	return float64(width) / 8 * float64(clock) * 1e6 * 2, fmt.Sprintf("%d-bit bus, %d MHz", width, clock)
}

// pmonMean is the mean sm % pmon printed for the load's pid; NaN when
// there is no trace or no such sample.
func pmonMean(t *testing.T, e gpuCheckEnv) float64 {
	t.Helper()
	if e.pmon == "" {
		return math.NaN()
	}
	f, err := os.Open(e.pmon)
	if err != nil {
		t.Logf("pmon trace: %v", err)
		return math.NaN()
	}
	defer f.Close()
	rows, err := parsePmon(f)
	if err != nil {
		t.Logf("pmon trace: %v", err)
		return math.NaN()
	}
	var v []float64
	for _, r := range rows {
		if r.pid == strconv.Itoa(e.pid) && !math.IsNaN(r.sm) {
			v = append(v, r.sm)
		}
	}
	return realMean(v)
}

// checkDmon compares gpuscope's series over the test's cycles with the
// dmon trace's rows over the same seconds, as medians (means for the
// utilisations under the duty cycle, whose samples are bimodal).
func checkDmon(t *testing.T, e gpuCheckEnv, g smiGPU, cycles []realCycle, window [2]float64) {
	f, err := os.Open(e.dmon)
	require.NoError(t, err, "GPUCHECK_DMON")
	defer f.Close()
	rows, err := parseDmon(f, time.Local)
	require.NoError(t, err)
	lo, hi := time.Unix(int64(math.Floor(window[0]))-1, 0), time.Unix(int64(math.Ceil(window[1]))+1, 0)
	var in []dmonRow
	for _, r := range rows {
		if r.gpu == e.gpu && !r.at.Before(lo) && !r.at.After(hi) {
			in = append(in, r)
		}
	}
	require.GreaterOrEqual(t, len(in), 3, "dmon rows for GPU %s between %s and %s (of %d rows): is dmon running, and its output line-buffered?", e.gpu, lo.Format(time.TimeOnly), hi.Format(time.TimeOnly), len(rows))
	stat := realMedian
	if e.load == "duty" {
		stat = realMean
	}
	ours := func(name string) float64 {
		var v []float64
		for _, c := range cycles {
			if x := c.get(name); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		return stat(v)
	}
	theirs := func(col string) float64 {
		var v []float64
		for _, r := range in {
			if x, ok := r.v[col]; ok && !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		return stat(v)
	}
	for _, x := range []struct {
		col, name string
		tol       func(ref float64) float64
		duty      bool // compared under the duty cycle too
	}{
		{"pwr", "DCGM_FI_DEV_POWER_USAGE", func(r float64) float64 { return math.Max(15, 0.15*r) }, false},
		{"gtemp", "DCGM_FI_DEV_GPU_TEMP", func(float64) float64 { return 3 }, false},
		{"mtemp", "DCGM_FI_DEV_MEMORY_TEMP", func(float64) float64 { return 3 }, false},
		{"sm", "DCGM_FI_DEV_GPU_UTIL", func(float64) float64 { return realUtilTol }, true},
		{"mem", "DCGM_FI_DEV_MEM_COPY_UTIL", func(float64) float64 { return realUtilTol }, true},
		{"pclk", "DCGM_FI_DEV_SM_CLOCK", func(r float64) float64 { return math.Max(100, 0.10*r) }, false},
		{"mclk", "DCGM_FI_DEV_MEM_CLOCK", func(r float64) float64 { return math.Max(1, 0.01*r) }, false},
	} {
		ref, got := theirs(x.col), ours(x.name)
		t.Logf("gpucheck: load=%s uid=%d dmon %s=%.1f gpuscope %s=%.1f (%d rows)", e.load, os.Geteuid(), x.col, ref, x.name, got, len(in))
		switch {
		case math.IsNaN(ref):
			t.Logf("dmon has no %s column or value", x.col)
		case e.load == "duty" && !x.duty:
		case math.IsNaN(got):
			t.Errorf("%s: no value while dmon's %s reads %.1f", x.name, x.col, ref)
		case math.Abs(got-ref) > x.tol(ref):
			t.Errorf("%s %.1f vs dmon %s %.1f over the same %d seconds: want within %.1f", x.name, got, x.col, ref, len(in), x.tol(ref))
		}
	}
	if e.load != "duty" {
		ref := theirs("fb")
		used, reserved := ours("DCGM_FI_DEV_FB_USED"), ours("DCGM_FI_DEV_FB_RESERVED")
		if !math.IsNaN(ref) && math.Abs(used-ref) > realMemTolMiB && math.Abs(used+reserved-ref) > realMemTolMiB {
			t.Errorf("DCGM_FI_DEV_FB_USED %.0f (+ RESERVED %.0f) vs dmon fb %.0f: want within %d MiB", used, reserved, ref, realMemTolMiB)
		}
	}
	for _, col := range []string{"rxpci", "txpci"} {
		if ref := theirs(col); !math.IsNaN(ref) {
			t.Logf("gpucheck: load=%s dmon %s=%.0f MB/s gpuscope_gpu_pcie_%s_bytes_per_second=%.4g", e.load, col, ref, col[:2], ours("gpuscope_gpu_pcie_"+col[:2]+"_bytes_per_second"))
		}
	}
}

func TestRealGPUXID(t *testing.T) {
	e := readGPUCheckEnv(t)
	if e.load != "xid" {
		t.Skip("GPUCHECK_LOAD is not xid")
	}
	c, reg := realCollector(t)
	m := map[string]string{"gpu": e.gpu}
	if _, ok := lookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", m); !ok {
		sup, known := lookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": e.gpu, "field": "DCGM_FI_DEV_XID_ERRORS"})
		var errs []string
		for _, s := range gather(t, reg, "gpuscope_gpu_collector_errors_total") {
			errs = append(errs, fmt.Sprintf("%v=%g", s.labels, s.value))
		}
		t.Fatalf("gpu %s: no DCGM_FI_DEV_XID_ERRORS as uid %d before the fault: gpuscope is not listening for XIDs (field_supported %g, known %v; errors %v)", e.gpu, os.Geteuid(), sup, known, errs)
	}
	for _, s := range gather(t, reg, "gpuscope_gpu_xid_errors_total") {
		if s.labels["gpu"] == e.gpu {
			t.Fatalf("gpu %s: XID %s already counted before the fault: %g", e.gpu, s.labels["err_code"], s.value)
		}
	}
	if e.ready != "" {
		require.NoError(t, os.WriteFile(e.ready, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644))
	}
	if realDryRun != nil {
		realDryRun.events <- nvml.EventData{Device: realDryRun.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 31}
	}
	start := time.Now()
	for {
		time.Sleep(250 * time.Millisecond)
		c.collectOnce(bg)
		realCheckBounds(t, reg, 0, true, nil)
		counts := map[string]float64{}
		for _, s := range gather(t, reg, "gpuscope_gpu_xid_errors_total") {
			if s.labels["gpu"] == e.gpu {
				counts[s.labels["err_code"]] = s.value
			}
		}
		var last series
		for _, s := range gather(t, reg, "DCGM_FI_DEV_XID_ERRORS") {
			if s.labels["gpu"] == e.gpu {
				last = s
			}
		}
		code := strconv.FormatFloat(last.value, 'f', -1, 64)
		if last.value != 0 {
			t.Logf("gpucheck: load=xid uid=%d gpu=%s DCGM_FI_DEV_XID_ERRORS=%s err_code=%s err_msg=%q after %.1f s; gpuscope_gpu_xid_errors_total by code %v",
				os.Geteuid(), e.gpu, code, last.labels["err_code"], last.labels["err_msg"], time.Since(start).Seconds(), counts)
			require.Contains(t, []string{"13", "31", "43"}, code, "a store to an unmapped address raises XID 31 (MMU fault), 13 or 43")
			require.Equal(t, code, last.labels["err_code"], "err_code is the XID's value")
			require.Equal(t, xidMessage(uint64(last.value)), last.labels["err_msg"], "err_msg is dcgm-exporter's text for the code")
			require.Equal(t, 1.0, counts[code], "gpuscope_gpu_xid_errors_total{err_code=%q}: one faulting store, one XID", code)
			return
		}
		if time.Since(start) > e.xidWait {
			t.Fatalf("gpu %s: no XID within %s of listening (uid %d); gpuscope_gpu_xid_errors_total by code: %v; did gpuload -mode xid run (its log) and did the kernel log one (dmesg)?", e.gpu, e.xidWait, os.Geteuid(), counts)
		}
	}
}

// checkLoadProcess compares the container series of the load's cgroup
// with nvidia-smi's compute processes in that cgroup.
func checkLoadProcess(t *testing.T, load string, pid int, gpu string, reg prometheus.Gatherer) {
	t.Helper()
	look := func(name string, match map[string]string) (float64, bool) { return lookup(t, reg, name, match) }
	id, err := cgroupOfPID(pid)
	require.NoError(t, err)
	busID := ""
	for _, g := range nvidiaSMI(t) {
		if g.index == gpu {
			busID = g.busID
		}
	}
	require.NotEmpty(t, busID, "nvidia-smi has no GPU %s", gpu)

	apps := smiQuery(t, "--query-compute-apps=gpu_bus_id,pid,used_memory", 3)
	t.Logf("nvidia-smi compute apps: %q", apps)
	var sumMiB float64
	seen, unknown := false, false
	for _, a := range apps {
		if !strings.EqualFold(a[0], busID) {
			continue
		}
		p, err := strconv.Atoi(a[1])
		if err != nil {
			continue
		}
		if p == pid {
			seen = true
		}
		appID, err := cgroupOfPID(p)
		if err != nil || appID != id {
			continue
		}
		mib := smiNum(a[2])
		if math.IsNaN(mib) {
			unknown = true
			continue
		}
		sumMiB += mib
		if p == pid && load == "alloc" {
			require.GreaterOrEqual(t, mib, float64(realAllocMinMiB), "the alloc load holds 2 GiB")
		}
	}
	if !seen {
		t.Skipf("nvidia-smi (uid %d) lists no compute process %d on GPU %s: in another PID namespace, or hidden from this user", os.Geteuid(), pid, gpu)
	}
	procs, ok := look("gpuscope_gpu_container_processes", map[string]string{"gpu": gpu, "id": id})
	require.True(t, ok, "no gpuscope_gpu_container_processes{gpu=%q,id=%q}: the load's cgroup (from /proc/%d/cgroup) is not attributed", gpu, id, pid)
	require.GreaterOrEqual(t, procs, 1.0)
	if unknown {
		t.Skipf("nvidia-smi (uid %d) shows no memory for a process of %s: the driver does not tell this user", os.Geteuid(), id)
	}
	memBytes, ok := look("gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": gpu, "id": id})
	require.True(t, ok, "no gpuscope_gpu_container_memory_used_bytes{gpu=%q,id=%q}", gpu, id)
	t.Logf("gpucheck: load=%s uid=%d container %s memory gpuscope=%.0f MiB nvidia-smi=%.0f MiB", load, os.Geteuid(), id, memBytes/bytesPerMiB, sumMiB)
	require.InDelta(t, sumMiB, memBytes/bytesPerMiB, realMemTolMiB, "container GPU memory vs nvidia-smi --query-compute-apps")
}

// cgroupOfPID reads /proc/<pid>/cgroup as cAdvisor names the container:
// the cpu controller's path on cgroup v1, the "0::" path on v2. It is
// written apart from the collector's parser so that it checks it.
func cgroupOfPID(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("read the load's cgroup: %w", err)
	}
	var v1, v2 string
	for _, line := range strings.Split(string(bytes.TrimSpace(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		if slices.Contains(strings.Split(parts[1], ","), "cpu") {
			v1 = parts[2]
		}
	}
	p := v2
	if v1 != "" {
		p = v1
	}
	if p == "" {
		return "", fmt.Errorf("/proc/%d/cgroup has neither a cpu nor a unified line: %q", pid, b)
	}
	p = filepath.Clean(strings.TrimSuffix(p, " (deleted)"))
	return p, nil
}
