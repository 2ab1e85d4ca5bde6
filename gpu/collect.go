package gpu

import (
	"fmt"
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
	// processMemory and processSM are the opt-in per-process series
	// (gpu.families.per_process); nil when off.
	processMemory  *prometheus.Desc
	processSM      *prometheus.Desc
	fieldSupported *prometheus.Desc
	lastSample     *prometheus.Desc
	unifiedMemory  *prometheus.Desc
	mig            *migDescs // per GPU instance (mig.go)

	up           *prometheus.Desc
	backendInfo  *prometheus.Desc
	renderErrors *prometheus.Desc
	kernelLog    *prometheus.Desc
	errors       *prometheus.Desc
	cycles       *prometheus.Desc
	timeouts     *prometheus.Desc
	lastDuration *prometheus.Desc
	lastSuccess  *prometheus.Desc
	interval     *prometheus.Desc
}

func newDescs(enabled fieldSet, hostnameLabel string, perProcess bool) *descs {
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
			containerProcsHelp, container, nil)
		d.orphanMemory = prometheus.NewDesc(orphanMemoryName, orphanMemoryHelp, withUser(dcgm), nil)
		d.orphanProcs = prometheus.NewDesc(orphanProcsName, orphanProcsHelp, withUser(dcgm), nil)
		if perProcess {
			d.processMemory = prometheus.NewDesc(processMemoryName, processMemoryHelp, processLabels, nil)
			d.processSM = prometheus.NewDesc(processSMName, processSMHelp, processLabels, nil)
		}
	}
	d.fieldSupported = prometheus.NewDesc("gpuscope_gpu_field_supported",
		"1 if the GPU reported the field (a metric name) in the last sample, 0 if the driver says the GPU does not support it, in which case the series is omitted. Fields that failed are absent here and counted in gpuscope_gpu_collector_errors_total.",
		[]string{"gpu", "UUID", "field"}, nil)

	d.unifiedMemory = prometheus.NewDesc("gpuscope_gpu_memory_unified",
		"1 if the GPU has no framebuffer of its own and shares the host's memory (DGX Spark's GB10 and other integrated GPUs, where NVML reports framebuffer memory as not supported): DCGM_FI_DEV_FB_TOTAL, _FREE and _USED then hold the system memory (MemTotal, MemAvailable and their difference, as nvtop and nvitop show it), so they count the host's use as well as the GPU's. 0 for a GPU whose framebuffer figures are its own.",
		[]string{"gpu", "UUID"}, nil)
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
	d.renderErrors = prometheus.NewDesc("gpuscope_gpu_collector_render_errors_total",
		"GPU series left out of the exposition because a label value was not valid (logged once); the sample's other series are still published. Should stay 0.", nil, nil)
	d.kernelLog = prometheus.NewDesc("gpuscope_gpu_collector_kernel_log_reading",
		"1 while the NVML backend reads XIDs from the kernel log (/dev/kmsg) besides NVML's events, 0 where it may not (it needs root or CAP_SYSLOG, and the packaged unit's ProtectKernelLogs=yes closes it): XIDs NVML does not deliver (79, 119, 120) are then missed. Only while the NVML backend is up.", nil, nil)
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
	// The sample first: rendering it counts the series it had to leave
	// out, which the self-metrics below report in the same scrape.
	var ms []prometheus.Metric
	if s := c.snap.Load(); s != nil {
		ms = s.metrics(d, c.renderFailed)
	}
	type errCount struct {
		k errKey
		n float64
	}
	c.mu.Lock()
	up, cycles, timeouts, lastDur, lastOK, renderErrs := c.up, c.cycles, c.timeouts, c.lastDur, c.lastOK, c.renderErrs
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

	// The label values below are gpuscope's own (backend and field names,
	// GPU indexes), valid by construction.
	ch <- prometheus.MustNewConstMetric(d.up, prometheus.GaugeValue, boolValue(up))
	ch <- prometheus.MustNewConstMetric(d.backendInfo, prometheus.GaugeValue, 1, backend)
	ch <- prometheus.MustNewConstMetric(d.cycles, prometheus.CounterValue, cycles)
	ch <- prometheus.MustNewConstMetric(d.timeouts, prometheus.CounterValue, timeouts)
	ch <- prometheus.MustNewConstMetric(d.lastDuration, prometheus.GaugeValue, lastDur)
	ch <- prometheus.MustNewConstMetric(d.interval, prometheus.GaugeValue, c.interval.Seconds())
	ch <- prometheus.MustNewConstMetric(d.renderErrors, prometheus.CounterValue, renderErrs)
	if kl, ok := c.backend.(interface{ kernelLogActive() bool }); ok && up {
		ch <- prometheus.MustNewConstMetric(d.kernelLog, prometheus.GaugeValue, boolValue(kl.kernelLogActive()))
	}
	if !lastOK.IsZero() {
		ch <- prometheus.MustNewConstMetric(d.lastSuccess, prometheus.GaugeValue, float64(lastOK.UnixNano())/1e9)
	}
	for _, e := range errs {
		ch <- prometheus.MustNewConstMetric(d.errors, prometheus.CounterValue, e.n, e.k.gpu, e.k.field)
	}
	for _, m := range ms {
		ch <- m
	}
}

// renderFailed counts the series a render left out and logs the first
// failure the collector ever has: a bad label value comes back every
// cycle while its container runs, and the counter says how often.
func (c *Collector) renderFailed(n int, first error) {
	c.mu.Lock()
	c.renderErrs += float64(n)
	logged := c.renderLogged
	c.renderLogged = true
	c.mu.Unlock()
	if !logged {
		c.logger.Warn("GPU series left out of the exposition; the others are published (further ones are only counted in gpuscope_gpu_collector_render_errors_total)",
			"series", n, "err", first)
	}
}

// snapshot is a published sample. Its metrics are built on the first
// scrape and reused by later scrapes of the same sample.
type snapshot struct {
	s    *Sample
	once sync.Once
	ms   []prometheus.Metric
}

// metrics renders the sample once; failed, if the render had to leave
// series out, is told how many and why.
func (s *snapshot) metrics(d *descs, failed func(n int, first error)) []prometheus.Metric {
	s.once.Do(func() {
		r := &renderer{out: make([]prometheus.Metric, 0, len(s.s.gpus)*64)}
		func() {
			// A panic must cost the series not yet rendered, not the
			// whole sample: once.Do would otherwise leave it empty for
			// every later scrape, with collector_up still 1.
			defer func() {
				if p := recover(); p != nil {
					r.fail(fmt.Errorf("render panicked: %v", p))
				}
			}()
			d.render(r, s.s)
		}()
		s.ms = r.out
		if r.failed > 0 && failed != nil {
			failed(r.failed, r.first)
		}
	})
	return s.ms
}

// renderer collects a sample's metrics. A metric that cannot be built (a
// label value that is not valid UTF-8 slipped through) is left out and
// counted: one bad series must not take every GPU's with it, as
// MustNewConstMetric's panic would.
type renderer struct {
	out    []prometheus.Metric
	failed int
	first  error
}

func (r *renderer) add(desc *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(desc, typ, v, labels...)
	if err != nil {
		r.fail(err)
		return
	}
	r.out = append(r.out, m)
}

func (r *renderer) fail(err error) {
	if r.failed == 0 {
		r.first = err
	}
	r.failed++
}

func (d *descs) render(r *renderer, s *Sample) {
	for i := range s.gpus {
		g := &s.gpus[i]
		info := g.info
		d.renderLastSample(r, g)
		for f := Field(0); f < numFields; f++ {
			desc := d.field[f]
			if desc == nil || !g.set.has(f) {
				continue
			}
			labels := info.dcgmLabels
			if fields[f].kind == kindOwn {
				labels = info.ownLabels
			}
			r.add(desc, fields[f].typ, g.values[f], labels...)
		}
		if g.set.has(FieldXID) {
			code := uint64(g.values[FieldXID])
			labels := append(info.dcgmLabels[:len(info.dcgmLabels):len(info.dcgmLabels)], strconv.FormatUint(code, 10), xidMessage(code))
			r.add(d.xid, prometheus.GaugeValue, g.values[FieldXID], labels...)
		}
		for _, x := range g.xidCounts {
			r.add(d.xidTotal, prometheus.CounterValue, float64(x.count), info.ownLabels[0], info.ownLabels[1], strconv.FormatUint(x.code, 10))
		}
		if d.clockEvent != nil && g.set.has(FieldClockEvents) {
			for _, reason := range clockEventReasons {
				r.add(d.clockEvent, prometheus.GaugeValue, boolValue(g.clockEvents&reason.bit != 0), info.ownLabels[0], info.ownLabels[1], reason.name)
			}
		}
		if d.containerMemory != nil {
			renderContainers(r, d.containerMemory, d.containerProcs, d.containerSM, g.set, g.containers, info.ownLabels[0], info.ownLabels[1])
			renderOrphans(r, d.orphanMemory, d.orphanProcs, g, info.dcgmLabels)
			renderProcesses(r, d.processMemory, d.processSM, g, info.ownLabels[0], info.ownLabels[1])
		}
		d.renderUnified(r, g)
		renderSupported(r, d.fieldSupported, d.enabled, g.set, g.unsupported, info.ownLabels[0], info.ownLabels[1])
		d.renderInstances(r, g)
	}
}

// renderLastSample renders gpuscope_gpu_last_sample_timestamp_seconds of
// g; a GPU that never answered has none.
func (d *descs) renderLastSample(r *renderer, g *GPUSample) {
	if g.at.IsZero() {
		return
	}
	r.add(d.lastSample, prometheus.GaugeValue, float64(g.at.UnixNano())/1e9, g.info.ownLabels[0], g.info.ownLabels[1])
}

// renderUnified renders gpuscope_gpu_memory_unified for a GPU whose
// memory was read: the mark that tells its DCGM_FI_DEV_FB_* apart.
func (d *descs) renderUnified(r *renderer, g *GPUSample) {
	if !g.set.has(FieldFBTotal) {
		return
	}
	r.add(d.unifiedMemory, prometheus.GaugeValue, boolValue(g.unifiedMemory), g.info.ownLabels[0], g.info.ownLabels[1])
}

// renderContainers renders the per-container series of a GPU, or of a GPU
// instance (instance labels after the container's). Memory the driver
// withheld is left out, not published as 0.
func renderContainers(r *renderer, mem, procs, sm *prometheus.Desc, set fieldSet, cs []Container, gpu, uuid string, instance ...string) {
	for _, c := range cs {
		lv := append(append([]string{gpu, uuid, c.id, c.name}, c.workload.Values()...), instance...)
		if set.has(FieldContainerMemory) {
			if !c.memoryUnknown {
				r.add(mem, prometheus.GaugeValue, c.memoryBytes, lv...)
			}
			r.add(procs, prometheus.GaugeValue, float64(c.processes), lv...)
		}
		if set.has(FieldContainerSM) {
			r.add(sm, prometheus.GaugeValue, c.smPercent, lv...)
		}
	}
}

// containerProcsHelp is gpuscope_gpu_container_processes's HELP: every
// process the driver lists, graphics contexts (Xorg, desktop applications
// on RTX and workstation GPUs) as well as compute ones.
const containerProcsHelp = "Processes of a container that the driver lists on the GPU: compute processes, MPS clients and graphics contexts."

// The orphan series: GPU memory the driver lists for processes that are
// gone (process.go), per GPU or GPU instance, with the dcgm labels.
const (
	orphanMemoryName = "gpuscope_gpu_orphaned_memory_bytes"
	orphanMemoryHelp = "GPU memory the driver lists for processes that are gone: no /proc/<pid>, or a zombie not reaped by its parent, in two consecutive sampling cycles. Only where gpuscope sees the host's processes (pid namespace and /proc without hidepid). user is a zombie's owner; empty for a pid gone altogether, whose owner nothing names."
	orphanProcsName  = "gpuscope_gpu_orphaned_processes"
	orphanProcsHelp  = "Processes the driver lists on the GPU that are gone (see gpuscope_gpu_orphaned_memory_bytes)."
)

// renderOrphans renders the orphan series of a GPU (or GPU instance) whose
// process list was read: one without a user, 0 when none is gone, for
// the processes whose owner is not known (a pid gone altogether), and
// one per user whose zombies hold memory, so that GPUMemoryHeldByGoneProcess
// can name whom to ask.
func renderOrphans(r *renderer, mem, procs *prometheus.Desc, g *GPUSample, labels []string) {
	if !g.set.has(FieldContainerMemory) {
		return
	}
	nobody := g.orphans
	for _, u := range g.orphans.byUser {
		nobody.memoryBytes -= u.memoryBytes
		nobody.processes -= u.processes
	}
	// A copy: labels are the GPU's, shared with its other series.
	lv := append(labels[:len(labels):len(labels)], "")
	r.add(mem, prometheus.GaugeValue, nobody.memoryBytes, lv...)
	r.add(procs, prometheus.GaugeValue, float64(nobody.processes), lv...)
	for _, u := range g.orphans.byUser {
		lv[len(lv)-1] = u.user
		r.add(mem, prometheus.GaugeValue, u.memoryBytes, lv...)
		r.add(procs, prometheus.GaugeValue, float64(u.processes), lv...)
	}
}

// withUser is labels and the user label after them, in a new slice.
func withUser(labels []string) []string {
	return append(labels[:len(labels):len(labels)], workload.LabelUser)
}

// renderSupported renders gpuscope_gpu_field_supported for the fields of
// enabled that a GPU (or GPU instance: its labels after the field's) read
// (1) or cannot give (0); fields neither read nor refused are left out.
func renderSupported(r *renderer, desc *prometheus.Desc, enabled, set, unsupported fieldSet, gpu, uuid string, instance ...string) {
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
		r.add(desc, prometheus.GaugeValue, v, append([]string{gpu, uuid, fields[f].name}, instance...)...)
	}
}

// The opt-in per-process series (gpu.families.per_process): one series
// per GPU process and metric, labelled by pid. Each new process is a new
// series, which is why they are off by default; the live process list
// (Collector.Processes) needs no series at all.
const (
	processMemoryName = "gpuscope_gpu_process_memory_used_bytes"
	processMemoryHelp = "GPU memory the driver lists for a GPU process (gpu.families.per_process): pid, its real user, comm (the kernel's name for it) and id (its cgroup, as on gpuscope_gpu_container_*; empty for a process that is gone)."
	processSMName     = "gpuscope_gpu_process_sm_utilization_percent"
	processSMHelp     = "SM utilization of a GPU process averaged over the sampling interval, as gpuscope_gpu_container_sm_utilization_percent sums it per container (gpu.families.per_process)."
)

// processLabels are the per-process series' labels.
var processLabels = []string{"gpu", "UUID", "pid", "user", "comm", "id"}

// renderProcesses renders the per-process series of a GPU (or GPU
// instance: its labels after the process's), when they are on and the
// GPU's processes were read. Memory the driver withholds is left out, as
// for containers; SM only where the per-process utilisation was read.
func renderProcesses(r *renderer, mem, sm *prometheus.Desc, g *GPUSample, gpu, uuid string, instance ...string) {
	if mem == nil || !g.set.has(FieldContainerMemory) {
		return
	}
	render := func(p gpuProc, id string) {
		lv := append([]string{gpu, uuid, pidLabel(p.pid), p.user, p.info.comm, id}, instance...)
		if !p.memoryUnknown {
			r.add(mem, prometheus.GaugeValue, float64(p.memoryBytes), lv...)
		}
		if g.set.has(FieldContainerSM) {
			r.add(sm, prometheus.GaugeValue, p.smPercent, lv...)
		}
	}
	for _, c := range g.containers {
		for _, p := range c.procs {
			render(p, c.id)
		}
	}
	for _, p := range g.orphans.procs {
		render(p, "")
	}
}
