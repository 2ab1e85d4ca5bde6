package gpu

import (
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpmMetrics maps NVML GPM metrics to DCGM profiling fields with DCGM's
// scaling (DcgmFieldIdToNvmlGpmMetricId): utilisations come in percent and
// DCGM publishes ratios; throughputs come in MiB/s and DCGM publishes B/s.
var gpmMetrics = []gpmMetric{
	{nvml.GPM_METRIC_GRAPHICS_UTIL, FieldProfGrEngineActive, 0.01, numFields},
	{nvml.GPM_METRIC_SM_UTIL, FieldProfSMActive, 0.01, numFields},
	{nvml.GPM_METRIC_SM_OCCUPANCY, FieldProfSMOccupancy, 0.01, numFields},
	{nvml.GPM_METRIC_ANY_TENSOR_UTIL, FieldProfTensorActive, 0.01, numFields},
	{nvml.GPM_METRIC_DRAM_BW_UTIL, FieldProfDRAMActive, 0.01, numFields},
	{nvml.GPM_METRIC_PCIE_TX_PER_SEC, FieldProfPCIeTxBytes, 1 << 20, FieldPCIeTxRate},
	{nvml.GPM_METRIC_PCIE_RX_PER_SEC, FieldProfPCIeRxBytes, 1 << 20, FieldPCIeRxRate},
	{nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, FieldProfNVLinkTxBytes, 1 << 20, numFields},
	{nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, FieldProfNVLinkRxBytes, 1 << 20, numFields},
}

// gpmMetric is one NVML GPM metric and the DCGM field it fills.
type gpmMetric struct {
	id    nvml.GpmMetricId
	field Field
	scale float64
	// pcie, unless numFields, also gets the value: gpuscope's PCIe rate
	// metric, sparing the 20 ms GetPcieThroughput call on GPUs with GPM.
	pcie Field
}

var gpmFields = gpmFieldsOf(gpmMetrics)

// parentGPM are the GPM metrics a GPU in MIG mode is asked for itself: the
// physical links' traffic (PCIe, NVLink). The engine activity is read per
// GPU instance (instanceGPM); asking the parent for it too could cost an
// error per field and cycle, and the links' values with them.
var parentGPM = func() []gpmMetric {
	var ms []gpmMetric
	for _, m := range gpmMetrics {
		if !instanceFields.has(m.field) {
			ms = append(ms, m)
		}
	}
	return ms
}()

var parentGPMFields = gpmFieldsOf(parentGPM)

// gpmFieldsOf lists the DCGM fields that metrics fill, in their order.
func gpmFieldsOf(metrics []gpmMetric) []Field {
	fs := make([]Field, len(metrics))
	for i, m := range metrics {
		fs[i] = m.field
	}
	return fs
}

// gpmState holds the two GPM sample buffers of a GPU. GPM metrics are
// computed from two samples taken one interval apart, so each cycle takes
// a sample into one buffer and compares it with the other.
type gpmState struct {
	samples [2]nvml.GpmSample
	cur     int
	primed  bool
	req     nvml.GpmMetricsGetType // ~19 KB; reused rather than allocated per cycle
}

// openGPM returns nil when the GPU has no GPM (anything before Hopper),
// in which case the profiling fields are reported unsupported.
func (b *nvmlBackend) openGPM(dev nvml.Device) *gpmState {
	sup, ret := dev.GpmQueryDeviceSupport()
	if ret != nvml.SUCCESS || sup.IsSupportedDevice == 0 {
		return nil
	}
	g := &gpmState{}
	for i := range g.samples {
		s, ret := b.lib.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			g.free()
			b.logger.Warn("Cannot allocate GPM sample; profiling metrics disabled for this GPU", "err", ret)
			return nil
		}
		g.samples[i] = s
	}
	return g
}

func (g *gpmState) free() {
	for i, s := range g.samples {
		if s != nil {
			s.Free()
			g.samples[i] = nil
		}
	}
}

func (b *nvmlBackend) readGPM(r *reader, g *nvmlGPU) {
	if !b.fields.has(FieldProfGrEngineActive) {
		return
	}
	st := g.gpm
	if st == nil {
		for _, f := range gpmFields {
			r.s.unsupported.add(f)
		}
		return
	}
	if g.mig.enabled() {
		// NVML's answer to a GPM call on a GPU in MIG mode is not pinned
		// by its documentation; INVALID_ARGUMENT there means the GPU
		// cannot give the field, like NOT_SUPPORTED.
		r.invalidUnsupported = true
		b.readGPMSample(r, st, g.dev.GpmSampleGet, parentGPM, parentGPMFields)
		r.invalidUnsupported = false
		return
	}
	b.readGPMSample(r, st, g.dev.GpmSampleGet, gpmMetrics, gpmFields)
}

// readGPMSample takes this cycle's sample with take into one of st's
// buffers and, from the second cycle on, sets the fields of metrics from
// it and the previous cycle's sample: GPM metrics are rates between two
// samples, so the first cycle has none.
func (b *nvmlBackend) readGPMSample(r *reader, st *gpmState, take func(nvml.GpmSample) nvml.Return, metrics []gpmMetric, fs []Field) {
	cur := st.samples[st.cur]
	if !r.ok(take(cur), fs...) {
		st.primed = false
		return
	}
	if st.primed {
		st.req.Version = nvml.GPM_METRICS_GET_VERSION
		st.req.NumMetrics = uint32(len(metrics))
		st.req.Sample1 = st.samples[1-st.cur]
		st.req.Sample2 = cur
		for i, m := range metrics {
			st.req.Metrics[i] = nvml.GpmMetric{MetricId: uint32(m.id)}
		}
		if r.ok(b.lib.GpmMetricsGet(&st.req), fs...) {
			for i, m := range metrics {
				res := &st.req.Metrics[i]
				if !r.ok(nvml.Return(res.NvmlReturn), m.field) {
					continue
				}
				v := res.Value * m.scale
				if math.IsNaN(v) || math.IsInf(v, 0) {
					continue // blank, as DCGM leaves a NaN (DcgmGpmManager)
				}
				r.s.Set(m.field, v)
				if m.pcie != numFields {
					r.s.Set(m.pcie, v)
				}
			}
		}
	}
	st.cur = 1 - st.cur
	st.primed = true
}
