package gpu

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscope/gpuscope/workload"
)

// descs are the collector's metric descriptors, fixed at New: the label
// names depend only on the config (the host label's spelling).
type descs struct {
	enabled fieldSet
	backend string

	field           [numFields]*prometheus.Desc // value fields; nil when off or special
	xid             *prometheus.Desc
	xidTotal        *prometheus.Desc
	clockEvent      *prometheus.Desc
	containerMemory *prometheus.Desc
	containerSM     *prometheus.Desc
	containerProcs  *prometheus.Desc
	orphanMemory    *prometheus.Desc
	orphanProcs     *prometheus.Desc
	fieldSupported  *prometheus.Desc
	lastSample      *prometheus.Desc
	mig             *migDescs // per GPU instance (mig.go)

	up           *prometheus.Desc
	backendInfo  *prometheus.Desc
	errors       *prometheus.Desc
	cycles       *prometheus.Desc
	timeouts     *prometheus.Desc
	lastDuration *prometheus.Desc
	lastSuccess  *prometheus.Desc
	interval     *prometheus.Desc
}

func newDescs(enabled fieldSet, hostnameLabel string) *descs {
	dcgm := []string{"gpu", "UUID", "pci_bus_id", "device", "modelName"}
	if hostnameLabel != HostnameLabelNone {
		dcgm = append(dcgm, hostnameLabel)
	}
	dcgm = append(dcgm, "DCGM_FI_DRIVER_VERSION")
	own := []string{"gpu", "UUID"}
	// cAdvisor's id and name, then the workload labels (image among them).
	container := append([]string{"gpu", "UUID", "id", "name"}, workload.LabelNames()...)

	d := &descs{enabled: enabled}
	for f := Field(0); f < numFields; f++ {
		spec := fields[f]
		if !enabled.has(f) || spec.kind == kindSpecial {
			continue
		}
		labels := dcgm
		if spec.kind == kindOwn {
			labels = own
		}
		d.field[f] = prometheus.NewDesc(spec.name, spec.help, labels, nil)
	}
	d.xid = prometheus.NewDesc(fields[FieldXID].name, fields[FieldXID].help, append(dcgm[:len(dcgm):len(dcgm)], "err_code", "err_msg"), nil)
	d.xidTotal = prometheus.NewDesc("gpuscope_gpu_xid_errors_total",
		"XID errors reported by the driver since gpuscope started, by XID code (DCGM_FI_DEV_XID_ERRORS only keeps the last).",
		[]string{"gpu", "UUID", "err_code"}, nil)
	if enabled.has(FieldClockEvents) {
		d.clockEvent = prometheus.NewDesc(fields[FieldClockEvents].name, fields[FieldClockEvents].help, []string{"gpu", "UUID", "reason"}, nil)
	}
	if enabled.has(FieldContainerMemory) {
		d.containerMemory = prometheus.NewDesc(fields[FieldContainerMemory].name, fields[FieldContainerMemory].help, container, nil)
		d.containerSM = prometheus.NewDesc(fields[FieldContainerSM].name, fields[FieldContainerSM].help, container, nil)
		d.containerProcs = prometheus.NewDesc("gpuscope_gpu_container_processes",
			"Compute processes of a container on the GPU.", container, nil)
		d.orphanMemory = prometheus.NewDesc(orphanMemoryName, orphanMemoryHelp, dcgm, nil)
		d.orphanProcs = prometheus.NewDesc(orphanProcsName, orphanProcsHelp, dcgm, nil)
	}
	d.fieldSupported = prometheus.NewDesc("gpuscope_gpu_field_supported",
		"1 if the GPU reported the field (a metric name) in the last sample, 0 if the driver says the GPU does not support it, in which case the series is omitted. Fields that failed are absent here and counted in gpuscope_gpu_collector_errors_total.",
		[]string{"gpu", "UUID", "field"}, nil)

	d.lastSample = prometheus.NewDesc("gpuscope_gpu_last_sample_timestamp_seconds",
		"When the GPU last answered a complete read. It stops advancing while the GPU is lost or its reads hang; its series are then served from the last sample for up to two intervals, then omitted (GPUMetricsStale).",
		[]string{"gpu", "UUID"}, nil)
	d.interval = prometheus.NewDesc("gpuscope_gpu_collector_interval_seconds",
		"Time between two GPU sampling cycles.", nil, nil)
	d.up = prometheus.NewDesc("gpuscope_gpu_collector_up",
		"1 if the GPU backend produced the sample being served, 0 if it is not available (no driver, backend none) or the sampling cycle is overdue.", nil, nil)
	d.backendInfo = prometheus.NewDesc("gpuscope_gpu_collector_backend_info",
		"The GPU backend in use (nvml, sim or none).", []string{"backend"}, nil)
	d.errors = prometheus.NewDesc("gpuscope_gpu_collector_errors_total",
		"Failed GPU reads by GPU index (empty when not tied to one GPU) and field: a metric name; device for a GPU that could not be read at all (off the bus, or not identified); timeout for a GPU whose reads did not finish within the cycle; driver when NVML reports the driver unloaded or of another version than its library.",
		[]string{"gpu", "field"}, nil)
	d.cycles = prometheus.NewDesc("gpuscope_gpu_collector_cycles_total",
		"Completed GPU sampling cycles.", nil, nil)
	d.timeouts = prometheus.NewDesc("gpuscope_gpu_collector_cycle_timeouts_total",
		"Sampling cycles that ran past their deadline (gpu.timeout).", nil, nil)
	d.lastDuration = prometheus.NewDesc("gpuscope_gpu_collector_last_cycle_duration_seconds",
		"Wall time of the last completed sampling cycle, driver time included.", nil, nil)
	d.lastSuccess = prometheus.NewDesc("gpuscope_gpu_collector_last_success_timestamp_seconds",
		"When the sample being served was taken.", nil, nil)
	d.mig = newMIGDescs(d, dcgm, container)
	return d
}

// Describe implements prometheus.Collector. It sends nothing, which makes
// the collector unchecked: on a GPU in MIG mode a metric has series with
// two more labels (GPU_I_PROFILE, GPU_I_ID) than the same metric of a
// whole GPU, as in dcgm-exporter, and a registry refuses a checked
// collector that describes one name with two label sets.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector. It serves the latest complete
// sample and the collector's own state; it never calls the driver.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	type errCount struct {
		k errKey
		n float64
	}
	c.mu.Lock()
	up, cycles, timeouts, lastDur, lastOK := c.up, c.cycles, c.timeouts, c.lastDur, c.lastOK
	backend := d.backend
	if c.noGPUs {
		// auto found no driver: this machine runs without a GPU backend,
		// which alerts (GPUCollectorDown) must tell from a broken one.
		backend = BackendNone
	}
	errs := make([]errCount, 0, len(c.errCount))
	for k, n := range c.errCount {
		errs = append(errs, errCount{k, n})
	}
	c.mu.Unlock()

	ch <- prometheus.MustNewConstMetric(d.up, prometheus.GaugeValue, boolValue(up))
	ch <- prometheus.MustNewConstMetric(d.backendInfo, prometheus.GaugeValue, 1, backend)
	ch <- prometheus.MustNewConstMetric(d.cycles, prometheus.CounterValue, cycles)
	ch <- prometheus.MustNewConstMetric(d.timeouts, prometheus.CounterValue, timeouts)
	ch <- prometheus.MustNewConstMetric(d.lastDuration, prometheus.GaugeValue, lastDur)
	ch <- prometheus.MustNewConstMetric(d.interval, prometheus.GaugeValue, c.interval.Seconds())
	if !lastOK.IsZero() {
		ch <- prometheus.MustNewConstMetric(d.lastSuccess, prometheus.GaugeValue, float64(lastOK.UnixNano())/1e9)
	}
	for _, e := range errs {
		ch <- prometheus.MustNewConstMetric(d.errors, prometheus.CounterValue, e.n, e.k.gpu, e.k.field)
	}
	if s := c.snap.Load(); s != nil {
		for _, m := range s.metrics(d) {
			ch <- m
		}
	}
}

// snapshot is a published sample. Its metrics are built on the first
// scrape and reused by later scrapes of the same sample.
type snapshot struct {
	s    *Sample
	once sync.Once
	ms   []prometheus.Metric
}

func (s *snapshot) metrics(d *descs) []prometheus.Metric {
	s.once.Do(func() { s.ms = d.render(s.s) })
	return s.ms
}

func (d *descs) render(s *Sample) []prometheus.Metric {
	out := make([]prometheus.Metric, 0, len(s.gpus)*64)
	for i := range s.gpus {
		g := &s.gpus[i]
		info := g.info
		if m := d.lastSampleMetric(g); m != nil {
			out = append(out, m)
		}
		for f := Field(0); f < numFields; f++ {
			desc := d.field[f]
			if desc == nil || !g.set.has(f) {
				continue
			}
			labels := info.dcgmLabels
			if fields[f].kind == kindOwn {
				labels = info.ownLabels
			}
			out = append(out, prometheus.MustNewConstMetric(desc, fields[f].typ, g.values[f], labels...))
		}
		if g.set.has(FieldXID) {
			code := uint64(g.values[FieldXID])
			labels := append(info.dcgmLabels[:len(info.dcgmLabels):len(info.dcgmLabels)], strconv.FormatUint(code, 10), xidMessage(code))
			out = append(out, prometheus.MustNewConstMetric(d.xid, prometheus.GaugeValue, g.values[FieldXID], labels...))
		}
		for _, x := range g.xidCounts {
			out = append(out, prometheus.MustNewConstMetric(d.xidTotal, prometheus.CounterValue, float64(x.count),
				info.ownLabels[0], info.ownLabels[1], strconv.FormatUint(x.code, 10)))
		}
		if d.clockEvent != nil && g.set.has(FieldClockEvents) {
			for _, r := range clockEventReasons {
				v := boolValue(g.clockEvents&r.bit != 0)
				out = append(out, prometheus.MustNewConstMetric(d.clockEvent, prometheus.GaugeValue, v, info.ownLabels[0], info.ownLabels[1], r.name))
			}
		}
		if d.containerMemory != nil {
			out = appendContainers(out, d.containerMemory, d.containerProcs, d.containerSM, g.set, g.containers, info.ownLabels[0], info.ownLabels[1])
			out = appendOrphans(out, d.orphanMemory, d.orphanProcs, g, info.dcgmLabels)
		}
		out = appendSupported(out, d.fieldSupported, d.enabled, g.set, g.unsupported, info.ownLabels[0], info.ownLabels[1])
		out = d.renderInstances(out, g)
	}
	return out
}

// lastSampleMetric is gpuscope_gpu_last_sample_timestamp_seconds of g, nil
// for a GPU that never answered.
func (d *descs) lastSampleMetric(g *GPUSample) prometheus.Metric {
	if g.at.IsZero() {
		return nil
	}
	return prometheus.MustNewConstMetric(d.lastSample, prometheus.GaugeValue, float64(g.at.UnixNano())/1e9, g.info.ownLabels[0], g.info.ownLabels[1])
}

// appendContainers renders the per-container series of a GPU, or of a GPU
// instance (instance labels after the container's). Memory the driver
// withheld is left out, not published as 0.
func appendContainers(out []prometheus.Metric, mem, procs, sm *prometheus.Desc, set fieldSet, cs []Container, gpu, uuid string, instance ...string) []prometheus.Metric {
	for _, c := range cs {
		lv := append(append([]string{gpu, uuid, c.id, c.name}, c.workload.Values()...), instance...)
		if set.has(FieldContainerMemory) {
			if !c.memoryUnknown {
				out = append(out, prometheus.MustNewConstMetric(mem, prometheus.GaugeValue, c.memoryBytes, lv...))
			}
			out = append(out, prometheus.MustNewConstMetric(procs, prometheus.GaugeValue, float64(c.processes), lv...))
		}
		if set.has(FieldContainerSM) {
			out = append(out, prometheus.MustNewConstMetric(sm, prometheus.GaugeValue, c.smPercent, lv...))
		}
	}
	return out
}

// The orphan series: GPU memory the driver lists for processes that are
// gone (process.go), per GPU or GPU instance, with the dcgm labels.
const (
	orphanMemoryName = "gpuscope_gpu_orphaned_memory_bytes"
	orphanMemoryHelp = "GPU memory the driver lists for processes that are gone: no /proc/<pid>, or a zombie not reaped by its parent, in two consecutive sampling cycles. Only where gpuscope sees the host's processes (pid namespace and /proc without hidepid)."
	orphanProcsName  = "gpuscope_gpu_orphaned_processes"
	orphanProcsHelp  = "Processes the driver lists on the GPU that are gone (see gpuscope_gpu_orphaned_memory_bytes)."
)

// appendOrphans renders the orphan series of a GPU (or GPU instance) whose
// process list was read, 0 when none is gone.
func appendOrphans(out []prometheus.Metric, mem, procs *prometheus.Desc, g *GPUSample, labels []string) []prometheus.Metric {
	if !g.set.has(FieldContainerMemory) {
		return out
	}
	return append(out,
		prometheus.MustNewConstMetric(mem, prometheus.GaugeValue, g.orphans.memoryBytes, labels...),
		prometheus.MustNewConstMetric(procs, prometheus.GaugeValue, float64(g.orphans.processes), labels...))
}

// appendSupported renders gpuscope_gpu_field_supported for the fields of
// enabled that a GPU (or GPU instance: its labels after the field's) read
// (1) or cannot give (0); fields neither read nor refused are left out.
func appendSupported(out []prometheus.Metric, desc *prometheus.Desc, enabled, set, unsupported fieldSet, gpu, uuid string, instance ...string) []prometheus.Metric {
	for f := Field(0); f < numFields; f++ {
		if !enabled.has(f) {
			continue
		}
		var v float64
		switch {
		case set.has(f):
			v = 1
		case unsupported.has(f):
			v = 0
		default:
			continue
		}
		out = append(out, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append([]string{gpu, uuid, fields[f].name}, instance...)...))
	}
	return out
}
