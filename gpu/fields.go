package gpu

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Field names one value a backend can report for a GPU: a dcgm-exporter
// field or one of gpuscope's own, each feeding the metric its String
// names. The set is small enough for a uint64 bitmask, which keeps a
// sample flat and cheap to copy.
type Field uint8

const (
	// dcgm-exporter default counters (gpu-metrics.md §1).
	FieldSMClock Field = iota
	FieldMemClock
	FieldMemoryTemp
	FieldGPUTemp
	FieldPowerUsage
	FieldEnergy
	FieldPCIeReplay
	FieldGPUUtil
	FieldMemCopyUtil
	FieldEncUtil
	FieldDecUtil
	FieldXID
	FieldFBFree
	FieldFBUsed
	FieldFBReserved
	FieldFBTotal
	FieldNVLinkBandwidth
	FieldVGPULicense
	FieldUncRemappedRows
	FieldCorRemappedRows
	FieldRowRemapFailure

	// DCGM profiling fields, from NVML GPM.
	FieldProfGrEngineActive
	FieldProfSMActive
	FieldProfSMOccupancy
	FieldProfTensorActive
	FieldProfDRAMActive
	FieldProfPCIeTxBytes
	FieldProfPCIeRxBytes
	FieldProfNVLinkTxBytes
	FieldProfNVLinkRxBytes

	// Optional families.
	FieldPowerViolation
	FieldThermalViolation
	FieldSyncBoostViolation
	FieldBoardLimitViolation
	FieldLowUtilViolation
	FieldReliabilityViolation
	FieldECCSBEVolTotal
	FieldECCDBEVolTotal
	FieldECCSBEAggTotal
	FieldECCDBEAggTotal
	FieldRetiredSBE
	FieldRetiredDBE
	FieldRetiredPending
	FieldNVLinkCRCFlitErrors
	FieldNVLinkCRCDataErrors
	FieldNVLinkReplayErrors
	FieldNVLinkRecoveryErrors

	// gpuscope's own per-GPU metrics.
	FieldPCIeLinkGen
	FieldPCIeLinkWidth
	FieldPCIeLinkMaxGen
	FieldPCIeLinkMaxWidth
	FieldPCIeMaxBandwidth
	FieldPCIeTxRate
	FieldPCIeRxRate
	FieldClockEvents
	FieldContainerMemory
	FieldContainerSM

	// Health fields under DCGM's names that dcgm-exporter's CSVs do not
	// list (contract_test.go, contractExtras), default on: what the
	// built-in hardware alerts (rules/pack/health.yml) read.
	FieldFanSpeed
	FieldEnforcedPowerLimit
	FieldRecoveryAction
	FieldRowRemapPending

	numFields
)

// family groups fields that are switched on and off together in the config.
type family uint8

const (
	famDefault family = iota
	famProfiling
	famViolations
	famECC
	famRetiredPages
	famNVLinkErrors
	famClockEvents
	famProcesses
)

// fieldKind says how a field is rendered.
type fieldKind uint8

const (
	// kindDCGM is a dcgm-exporter field: DCGM name, HELP and the full GPU label set.
	kindDCGM fieldKind = iota
	// kindOwn is a gpuscope_gpu_* gauge labelled gpu and UUID.
	kindOwn
	// kindSpecial fields (XID, clock events, containers) have their own renderers;
	// their names are the metrics they feed, used in the field label of
	// gpuscope_gpu_field_supported and gpuscope_gpu_collector_errors_total.
	kindSpecial
)

type fieldSpec struct {
	name   string
	help   string
	typ    prometheus.ValueType
	family family
	kind   fieldKind
}

// fields holds names, HELP texts and types verbatim from dcgm-exporter's
// etc/default-counters.csv and dcp-metrics-included.csv as released up to
// 4.8.2 (gpu-metrics.md, decision 1). Dashboards and alert rules written for
// dcgm-exporter depend on these strings; do not "fix" them.
var fields = [numFields]fieldSpec{
	FieldSMClock:         {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldMemClock:        {"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldMemoryTemp:      {"DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldGPUTemp:         {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldPowerUsage:      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldEnergy:          {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", prometheus.CounterValue, famDefault, kindDCGM},
	FieldPCIeReplay:      {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", prometheus.CounterValue, famDefault, kindDCGM},
	FieldGPUUtil:         {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldMemCopyUtil:     {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldEncUtil:         {"DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldDecUtil:         {"DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldXID:             {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", prometheus.GaugeValue, famDefault, kindSpecial},
	FieldFBFree:          {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldFBUsed:          {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldFBReserved:      {"DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldFBTotal:         {"DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldNVLinkBandwidth: {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all lanes.", prometheus.CounterValue, famDefault, kindDCGM},
	FieldVGPULicense:     {"DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldUncRemappedRows: {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", prometheus.CounterValue, famDefault, kindDCGM},
	FieldCorRemappedRows: {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", prometheus.CounterValue, famDefault, kindDCGM},
	FieldRowRemapFailure: {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", prometheus.GaugeValue, famDefault, kindDCGM},

	FieldProfGrEngineActive: {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfSMActive:       {"DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfSMOccupancy:    {"DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfTensorActive:   {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfDRAMActive:     {"DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfPCIeTxBytes:    {"DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfPCIeRxBytes:    {"DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfNVLinkTxBytes:  {"DCGM_FI_PROF_NVLINK_TX_BYTES", "The number of bytes of active NvLink tx (transmit) data including both header and payload.", prometheus.GaugeValue, famProfiling, kindDCGM},
	FieldProfNVLinkRxBytes:  {"DCGM_FI_PROF_NVLINK_RX_BYTES", "The number of bytes of active NvLink rx (read) data including both header and payload.", prometheus.GaugeValue, famProfiling, kindDCGM},

	FieldPowerViolation:       {"DCGM_FI_DEV_POWER_VIOLATION", "Throttling duration due to power constraints (in ns).", prometheus.CounterValue, famViolations, kindDCGM},
	FieldThermalViolation:     {"DCGM_FI_DEV_THERMAL_VIOLATION", "Throttling duration due to thermal constraints (in ns).", prometheus.CounterValue, famViolations, kindDCGM},
	FieldSyncBoostViolation:   {"DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "Throttling duration due to sync-boost constraints (in ns).", prometheus.CounterValue, famViolations, kindDCGM},
	FieldBoardLimitViolation:  {"DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "Throttling duration due to board limit constraints (in ns).", prometheus.CounterValue, famViolations, kindDCGM},
	FieldLowUtilViolation:     {"DCGM_FI_DEV_LOW_UTIL_VIOLATION", "Throttling duration due to low utilization (in ns).", prometheus.CounterValue, famViolations, kindDCGM},
	FieldReliabilityViolation: {"DCGM_FI_DEV_RELIABILITY_VIOLATION", "Throttling duration due to reliability constraints (in ns).", prometheus.CounterValue, famViolations, kindDCGM},
	FieldECCSBEVolTotal:       {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", prometheus.CounterValue, famECC, kindDCGM},
	FieldECCDBEVolTotal:       {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", prometheus.CounterValue, famECC, kindDCGM},
	FieldECCSBEAggTotal:       {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", prometheus.CounterValue, famECC, kindDCGM},
	FieldECCDBEAggTotal:       {"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", prometheus.CounterValue, famECC, kindDCGM},
	FieldRetiredSBE:           {"DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.", prometheus.CounterValue, famRetiredPages, kindDCGM},
	FieldRetiredDBE:           {"DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.", prometheus.CounterValue, famRetiredPages, kindDCGM},
	FieldRetiredPending:       {"DCGM_FI_DEV_RETIRED_PENDING", "Total number of pages pending retirement.", prometheus.CounterValue, famRetiredPages, kindDCGM},
	FieldNVLinkCRCFlitErrors:  {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.", prometheus.CounterValue, famNVLinkErrors, kindDCGM},
	FieldNVLinkCRCDataErrors:  {"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.", prometheus.CounterValue, famNVLinkErrors, kindDCGM},
	FieldNVLinkReplayErrors:   {"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.", prometheus.CounterValue, famNVLinkErrors, kindDCGM},
	FieldNVLinkRecoveryErrors: {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.", prometheus.CounterValue, famNVLinkErrors, kindDCGM},

	FieldPCIeLinkGen:      {"gpuscope_gpu_pcie_link_generation", "Current PCIe link generation. GPUs train the link down when idle to save power.", prometheus.GaugeValue, famDefault, kindOwn},
	FieldPCIeLinkWidth:    {"gpuscope_gpu_pcie_link_width", "Current PCIe link width (lanes).", prometheus.GaugeValue, famDefault, kindOwn},
	FieldPCIeLinkMaxGen:   {"gpuscope_gpu_pcie_link_max_generation", "Highest PCIe link generation possible with this GPU in this slot.", prometheus.GaugeValue, famDefault, kindOwn},
	FieldPCIeLinkMaxWidth: {"gpuscope_gpu_pcie_link_max_width", "Widest PCIe link possible with this GPU in this slot (lanes).", prometheus.GaugeValue, famDefault, kindOwn},
	FieldPCIeMaxBandwidth: {"gpuscope_gpu_pcie_max_bandwidth_bytes_per_second", "Theoretical PCIe bandwidth per direction at the maximum link generation and width (per-lane rate after line encoding times lanes).", prometheus.GaugeValue, famDefault, kindOwn},
	FieldPCIeTxRate:       {"gpuscope_gpu_pcie_tx_bytes_per_second", "PCIe bytes per second sent by the GPU (GPM average over the sampling interval where the GPU has GPM, else NVML's 20 ms PCIe throughput sample).", prometheus.GaugeValue, famDefault, kindOwn},
	FieldPCIeRxRate:       {"gpuscope_gpu_pcie_rx_bytes_per_second", "PCIe bytes per second received by the GPU (GPM average over the sampling interval where the GPU has GPM, else NVML's 20 ms PCIe throughput sample).", prometheus.GaugeValue, famDefault, kindOwn},
	FieldClockEvents:      {"gpuscope_gpu_clock_event_active", "1 while the reason holds the GPU clocks down (NVML clock event reasons).", prometheus.GaugeValue, famClockEvents, kindSpecial},
	FieldContainerMemory:  {"gpuscope_gpu_container_memory_used_bytes", "GPU memory used by the processes of a container that the driver lists on the GPU: compute processes, MPS clients and graphics contexts (cgroup id as cAdvisor names it).", prometheus.GaugeValue, famProcesses, kindSpecial},
	FieldContainerSM:      {"gpuscope_gpu_container_sm_utilization_percent", "SM utilization of a container's processes on the GPU averaged over the sampling interval (0-100, the scale of DCGM_FI_DEV_GPU_UTIL): each of NVML's per-process samples counts for the driver's sample period, periods without one as idle; where the driver's timestamps show no period yet, the mean of the samples.", prometheus.GaugeValue, famProcesses, kindSpecial},

	// DCGM's field descriptions (dcgm_fields.h), the unit added where the
	// description has none, as dcgm-exporter's CSV rows do.
	FieldFanSpeed:           {"DCGM_FI_DEV_FAN_SPEED", "Fan speed for the device in percent 0-100", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldEnforcedPowerLimit: {"DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "Effective power limit that the driver enforces after taking into account all limiters (in W).", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldRecoveryAction:     {"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "GPU Recovery Action (see nvmlDeviceGpuRecoveryAction_t for return values)", prometheus.GaugeValue, famDefault, kindDCGM},
	FieldRowRemapPending:    {"DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending", prometheus.GaugeValue, famDefault, kindDCGM},
}

// String is the name of the metric f feeds, as in the field label of
// gpuscope_gpu_field_supported and gpuscope_gpu_collector_errors_total.
func (f Field) String() string {
	if f < numFields {
		return fields[f].name
	}
	return fmt.Sprintf("Field(%d)", uint8(f))
}

// fieldSet is a bitmask over Field.
type fieldSet uint64

// Every Field must fit in a fieldSet: this fails to compile past 64.
var _ [64 - int(numFields)]struct{}

func (s fieldSet) has(f Field) bool { return s&(1<<f) != 0 }
func (s *fieldSet) add(f Field)     { *s |= 1 << f }

// fieldsOf returns the set of fields of the given families.
func fieldsOf(fams ...family) fieldSet {
	var s fieldSet
	for f := Field(0); f < numFields; f++ {
		for _, fam := range fams {
			if fields[f].family == fam {
				s.add(f)
			}
		}
	}
	return s
}

// enabledFields returns the fields the config switches on.
func (fs Families) enabledFields() fieldSet {
	fams := []family{famDefault}
	for _, x := range []struct {
		on  bool
		fam family
	}{
		{fs.Profiling, famProfiling},
		{fs.Violations, famViolations},
		{fs.ECC, famECC},
		{fs.RetiredPages, famRetiredPages},
		{fs.NVLinkErrors, famNVLinkErrors},
		{fs.ClockEvents, famClockEvents},
		{fs.Processes, famProcesses},
	} {
		if x.on {
			fams = append(fams, x.fam)
		}
	}
	return fieldsOf(fams...)
}

// clockEventReasons are the NVML clock event reason bits with the names
// dcgm-exporter uses in the clock_event label of DCGM_EXP_CLOCK_EVENTS_COUNT.
var clockEventReasons = []struct {
	bit  uint64
	name string
}{
	{0x1, "gpu_idle"},
	{0x2, "clocks_setting"},
	{0x4, "power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal"},
	{0x40, "hw_thermal"},
	{0x80, "hw_power_brake"},
	{0x100, "display_clocks"},
}
