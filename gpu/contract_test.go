package gpu_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
	"github.com/gpuscope/gpuscope/gpu/sim"
)

// The contract test: every DCGM_* metric gpuscope publishes (sim and NVML
// backends, every family on) has the name, Prometheus type and HELP of
// dcgm-exporter's own etc/default-counters.csv and etc/dcp-metrics-included.csv.
//
// Decisions:
//   - The reference is the newest release, 4.5.3-4.8.2: name, type and HELP
//     must equal its rows (active or commented out) exactly.
//   - An older release may differ from gpuscope, or lack a field, only
//     where contractDrift lists it with a reason; so a change in a new
//     release copy, or in fields.go, fails until someone decides.
//   - A DCGM_* metric in none of the CSVs must be in contractExtras, with
//     a reason.
//   - Every active row of the newest CSVs must be published (type label:
//     be a label of every DCGM series) unless contractNotPublished says why.
//
// The CSVs are dcgm-exporter's files, Apache-2.0; testdata/dcgm-exporter/
// README.md says where they come from and how to place them. Where they
// are absent the CSV checks skip and only the backend checks run.

// contractReleases are the dcgm-exporter releases compared, oldest first;
// the last is the reference. Each stands for the releases whose two CSVs
// are byte-identical to it (testdata/dcgm-exporter/README.md). sha256 pins
// the files so that an edited copy fails.
var contractReleases = []struct {
	tag    string
	sha256 map[string]string
}{
	{"4.4.0-4.5.0", map[string]string{
		"default-counters.csv":     "a4f11bc1de6a7a3a42488e23367a2a646dcb7787fe26696b1ecddf28b003a3bf",
		"dcp-metrics-included.csv": "b2d1031d43d3776f52f8bd150db6d9708572c0807c0eb627ff433860ac766a88",
	}},
	{"4.4.1-4.6.0", map[string]string{
		"default-counters.csv":     "cc56e2a6c7a9f2fede06db074279661c4525ca346ce593aeea0606b84a40b47c",
		"dcp-metrics-included.csv": "b2d1031d43d3776f52f8bd150db6d9708572c0807c0eb627ff433860ac766a88",
	}},
	{"4.4.2-4.7.1", map[string]string{
		"default-counters.csv":     "13d8c92cffa649f17c4c0938bb16707daf27260e845c77eacf89dbb68a46eaf9",
		"dcp-metrics-included.csv": "85bfa5d5d0875d083d68788be427560f7bbe87093f608cba6ab04a3d4aaf5820",
	}},
	{"4.5.3-4.8.2", map[string]string{
		"default-counters.csv":     "13d8c92cffa649f17c4c0938bb16707daf27260e845c77eacf89dbb68a46eaf9",
		"dcp-metrics-included.csv": "85bfa5d5d0875d083d68788be427560f7bbe87093f608cba6ab04a3d4aaf5820",
	}},
}

// contractExtras are the DCGM_* metrics gpuscope publishes that no
// dcgm-exporter CSV lists.
var contractExtras = map[string]string{
	"DCGM_FI_DEV_FB_TOTAL": "DCGM field 250 (MiB); gpu-metrics.md decision 3: the source document's " +
		"FB_USED / FB_TOTAL rules need it, and dcgm-exporter publishes it when a custom CSV names it.",
	"DCGM_FI_PROF_NVLINK_TX_BYTES": "DCGM field 1011, profiling family from GPM; dcgm-exporter publishes it " +
		"only from a custom CSV; HELP is DCGM's field description.",
	"DCGM_FI_PROF_NVLINK_RX_BYTES": "DCGM field 1012, profiling family from GPM; dcgm-exporter publishes it " +
		"only from a custom CSV; HELP is DCGM's field description.",
	// The health fields the built-in hardware alerts read (issue 25 §2).
	// dcgm-exporter resolves a custom CSV row by these names (its ≤4.8
	// names; DCGM 4.6 keeps them as aliases of the new ones), so a user
	// who adds them to dcgm-exporter gets the same series.
	"DCGM_FI_DEV_FAN_SPEED": "DCGM field 191, percent 0-100 from nvmlDeviceGetFanSpeed (fan 0) as DCGM reads it; " +
		"HELP is DCGM's field description.",
	"DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "DCGM field 164, whole watts from nvmlDeviceGetEnforcedPowerLimit (mW / 1000, " +
		"truncated as DCGM does); HELP is DCGM's field description with the unit.",
	"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": "DCGM field 1523 (DCGM_FI_DEV_GPU_RECOVERY_ACTION since DCGM 4.6, this name " +
		"kept as its alias), NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R550 and later); HELP is DCGM's field description.",
	"DCGM_FI_DEV_ROW_REMAP_PENDING": "DCGM field 396, the pending flag of nvmlDeviceGetRemappedRows, which " +
		"ROW_REMAP_FAILURE is read with; HELP is DCGM's field description.",
}

// contractDrift lists, per older release, the fields whose row differs
// from gpuscope's (or is missing there).
var contractDrift = map[string]map[string]string{}

func init() {
	// dcgm-exporter PR #589 fixed the unit in the violation fields' HELP
	// from "us" to "ns" in 4.7.1 (DCGM reports them in ns); gpuscope
	// follows the fixed text.
	for _, tag := range []string{"4.4.0-4.5.0", "4.4.1-4.6.0"} {
		contractDrift[tag] = map[string]string{}
		for _, f := range []string{"POWER", "THERMAL", "SYNC_BOOST", "BOARD_LIMIT", "LOW_UTIL", "RELIABILITY"} {
			contractDrift[tag]["DCGM_FI_DEV_"+f+"_VIOLATION"] = `HELP says "(in us)"; fixed to "(in ns)" in 4.7.1 (PR #589)`
		}
	}
}

// contractNotPublished are active rows of the newest CSVs that gpuscope
// does not publish as a metric.
var contractNotPublished = map[string]string{}

// csvRow is one row of a dcgm-exporter counters CSV.
type csvRow struct {
	name, typ, help string
	active          bool // not commented out
	where           string
}

var (
	dcgmNameRe = regexp.MustCompile(`^DCGM_[A-Z0-9_]+$`)
	csvTypes   = map[string]bool{"gauge": true, "counter": true, "label": true, "histogram": true, "summary": true}
)

// parseCountersCSV reads a counters CSV as dcgm-exporter does (encoding/csv,
// fields trimmed of spaces, exactly three per row) and also reads the
// commented-out rows, which name the optional fields. Where a field has an
// active row and commented ones, the active row wins; two active rows of
// one field are an error.
func parseCountersCSV(r io.Reader, file string) (map[string]csvRow, error) {
	rows := map[string]csvRow{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		active := !strings.HasPrefix(line, "#")
		rec, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(line, "#"))).Read()
		if err != nil && active {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		for i := range rec {
			rec[i] = strings.Trim(rec[i], " ")
		}
		isRow := err == nil && len(rec) == 3 && dcgmNameRe.MatchString(rec[0]) && csvTypes[rec[1]]
		if !isRow {
			if active {
				return nil, fmt.Errorf("%s:%d: want DCGM field, type, help; got %q", file, n, line)
			}
			continue // a comment
		}
		row := csvRow{name: rec[0], typ: rec[1], help: rec[2], active: active, where: fmt.Sprintf("%s:%d", file, n)}
		if old, ok := rows[row.name]; ok {
			if old.active && active {
				return nil, fmt.Errorf("%s: %s has a second active row (first at %s)", row.where, row.name, old.where)
			}
			if old.active || !active {
				continue // keep the active row, or the first commented one
			}
		}
		rows[row.name] = row
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return rows, nil
}

func TestParseCountersCSV(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]csvRow
		err      string
	}{
		{
			name: "active, commented and padded rows",
			in: "# Format\n# DCGM FIELD, Prometheus metric type, help message\n\n" +
				"DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n" +
				"# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.\n" +
				"# NOTE: supported on Nvidia datacenter Volta GPUs and newer\n",
			want: map[string]csvRow{
				"DCGM_FI_DEV_DEC_UTIL":          {name: "DCGM_FI_DEV_DEC_UTIL", typ: "gauge", help: "Decoder utilization (in %).", active: true, where: "f:4"},
				"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": {name: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", typ: "counter", help: "Total number of single-bit volatile ECC errors.", where: "f:5"},
			},
		},
		{
			name: "the active row wins over a commented one before it",
			in: "# DCGM_FI_PROF_PCIE_TX_BYTES,  counter, Total number of bytes transmitted through PCIe TX via NVML.\n" +
				"DCGM_FI_PROF_PCIE_TX_BYTES, gauge, The rate of data transmitted.\n",
			want: map[string]csvRow{
				"DCGM_FI_PROF_PCIE_TX_BYTES": {name: "DCGM_FI_PROF_PCIE_TX_BYTES", typ: "gauge", help: "The rate of data transmitted.", active: true, where: "f:2"},
			},
		},
		{name: "two fields on an active row", in: "DCGM_FI_DEV_SM_CLOCK, gauge\n", err: "f:1: want DCGM field, type, help"},
		{name: "unknown type", in: "DCGM_FI_DEV_SM_CLOCK, gauges, SM clock\n", err: "f:1: want DCGM field, type, help"},
		{name: "two active rows", in: "DCGM_FI_DEV_SM_CLOCK, gauge, a\nDCGM_FI_DEV_SM_CLOCK, gauge, b\n", err: "f:2: DCGM_FI_DEV_SM_CLOCK has a second active row (first at f:1)"},
		{name: "bad quoting", in: "DCGM_FI_DEV_SM_CLOCK, gauge, \"a\n", err: "f:1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCountersCSV(strings.NewReader(tc.in), "f")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// publishedFamily is a DCGM_* metric family as gpuscope exposes it.
type publishedFamily struct {
	typ, help string
	labels    map[string]bool // label names seen on any series
	by        string          // backend that published it
}

// simXIDAt is when gpu/sim's xid scenario dies of XID 79: ten simulated
// minutes in.
const simXIDAt = 10 * time.Minute

// contractSources gathers every DCGM_* family from a mock NVML machine and
// from the sim, all families on, over cycles long enough for the sim's XID.
func contractSources(t *testing.T) map[string][]*dto.MetricFamily {
	t.Helper()
	all := gpu.Families{Profiling: true, Processes: true, ECC: true, RetiredPages: true, Violations: true, ClockEvents: true, NVLinkErrors: true}
	out := map[string][]*dto.MetricFamily{}

	// go-nvml's mock: the two GPUs of the golden test with a container.
	out["nvml-mock"] = gpu.NVMLContractSource(t, all)

	// The sim, one GPU per scenario, past the xid scenario's XID.
	clock := gputest.NewClock()
	cfg := gpu.DefaultConfig()
	cfg.Backend = gpu.BackendSim
	cfg.Families = all
	simCfg := sim.DefaultConfig()
	for _, sc := range []string{sim.ScenarioIdle, sim.ScenarioTraining, sim.ScenarioLeak, sim.ScenarioInputBound, sim.ScenarioMemoryBound, sim.ScenarioThermal, sim.ScenarioXID} {
		simCfg.GPUs = append(simCfg.GPUs, sim.GPU{Scenario: sc})
	}
	simCfg.Count = len(simCfg.GPUs)
	var b *sim.Backend
	c, err := gpu.New(gpu.Options{
		Config: cfg, Now: clock.Now, Interval: 15 * time.Second, Hostname: "gpu-node-1", ProcRoot: t.TempDir(),
		NewBackend: func(env *gpu.BackendEnv) (gpu.Backend, error) {
			var err error
			b, err = sim.New(sim.Options{Config: simCfg}, env)
			return b, err
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	for range (simXIDAt + time.Minute) / time.Minute {
		require.NoError(t, c.SampleOnce(context.Background()))
		clock.Advance(time.Minute)
	}
	require.NoError(t, c.SampleOnce(context.Background()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out["sim"] = mfs
	return out
}

// publishedDCGM returns the DCGM_* families of the sources, failing where
// two backends disagree on a family's type or HELP.
func publishedDCGM(t *testing.T, sources map[string][]*dto.MetricFamily) map[string]*publishedFamily {
	t.Helper()
	pub := map[string]*publishedFamily{}
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, backend := range names {
		for _, mf := range sources[backend] {
			if !strings.HasPrefix(mf.GetName(), "DCGM_") {
				continue
			}
			typ := strings.ToLower(mf.GetType().String())
			p, ok := pub[mf.GetName()]
			if !ok {
				p = &publishedFamily{typ: typ, help: mf.GetHelp(), labels: map[string]bool{}, by: backend}
				pub[mf.GetName()] = p
			}
			require.Equalf(t, p.typ, typ, "%s: type differs between %s and %s", mf.GetName(), p.by, backend)
			require.Equalf(t, p.help, mf.GetHelp(), "%s: HELP differs between %s and %s", mf.GetName(), p.by, backend)
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					p.labels[l.GetName()] = true
				}
			}
		}
	}
	return pub
}

// contractCSVDir finds the directory holding one folder per release:
// $GPUSCOPE_DCGM_EXPORTER_CSV_DIR, testdata/dcgm-exporter, or the
// steering repository's shared/dcgm-exporter beside the checkout.
func contractCSVDir() (string, bool) {
	dirs := []string{filepath.Join("testdata", "dcgm-exporter"), filepath.Join("..", "..", "shared", "dcgm-exporter")}
	if d := os.Getenv("GPUSCOPE_DCGM_EXPORTER_CSV_DIR"); d != "" {
		dirs = []string{d}
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, contractReleases[len(contractReleases)-1].tag, "default-counters.csv")); err == nil {
			return d, true
		}
	}
	return dirs[0], false
}

// loadRelease parses a release's two CSVs, checking their sha256.
func loadRelease(dir, tag string, sums map[string]string) (map[string]csvRow, error) {
	rows := map[string]csvRow{}
	for _, file := range []string{"default-counters.csv", "dcp-metrics-included.csv"} {
		path := filepath.Join(dir, tag, file)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("dcgm-exporter %s: %w", tag, err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != sums[file] {
			return nil, fmt.Errorf("%s: sha256 %s, want %s: not the file of release %s", path, got, sums[file], tag)
		}
		parsed, err := parseCountersCSV(bytes.NewReader(b), path)
		if err != nil {
			return nil, err
		}
		for name, r := range parsed {
			old, ok := rows[name]
			switch {
			case !ok:
				rows[name] = r
			case old.typ != r.typ || old.help != r.help:
				if !old.active && !r.active {
					return nil, fmt.Errorf("%s differs between %s and %s", name, old.where, r.where)
				}
				if r.active && !old.active {
					rows[name] = r
				}
			case r.active:
				rows[name] = r
			}
		}
	}
	return rows, nil
}

// contractMismatch says how a published family differs from a CSV row.
func contractMismatch(p *publishedFamily, r csvRow, ok bool) error {
	var errs []error
	if !ok {
		return errors.New("not in the CSVs")
	}
	if p.typ != r.typ {
		errs = append(errs, fmt.Errorf("type %s, CSV %s (%s)", p.typ, r.typ, r.where))
	}
	if p.help != r.help {
		errs = append(errs, fmt.Errorf("HELP %q, CSV %q (%s)", p.help, r.help, r.where))
	}
	return errors.Join(errs...)
}

func TestDCGMExporterContract(t *testing.T) {
	pub := publishedDCGM(t, contractSources(t))

	t.Run("every DCGM field of fields.go is published", func(t *testing.T) {
		// Keeps the comparison below from passing on an empty gather.
		for _, spec := range gpu.FieldSpecs() {
			if !strings.HasPrefix(spec.Name, "DCGM_") {
				continue
			}
			p, ok := pub[spec.Name]
			require.Truef(t, ok, "%s is in fields.go but neither backend published it", spec.Name)
			require.Equal(t, spec.Help, p.help, spec.Name)
			require.Equal(t, valueTypeName(spec.Type), p.typ, spec.Name)
			for _, l := range []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION"} {
				require.Truef(t, p.labels[l], "%s has no %s label", spec.Name, l)
			}
		}
	})

	dir, found := contractCSVDir()
	if !found {
		t.Skipf("dcgm-exporter's CSVs are not in %s: the CSV checks are skipped (see gpu/testdata/dcgm-exporter/README.md)", dir)
	}
	releases := make([]map[string]csvRow, len(contractReleases))
	for i, rel := range contractReleases {
		rows, err := loadRelease(dir, rel.tag, rel.sha256)
		require.NoError(t, err)
		releases[i] = rows
	}
	newest := releases[len(releases)-1]
	names := make([]string, 0, len(pub))
	for n := range pub {
		names = append(names, n)
	}
	sort.Strings(names)

	t.Run("newest release", func(t *testing.T) {
		for _, name := range names {
			r, ok := newest[name]
			if reason, extra := contractExtras[name]; extra {
				require.Falsef(t, ok, "%s is listed as an extra (%s) but %s has it: remove it from contractExtras", name, reason, r.where)
				continue
			}
			require.NoErrorf(t, contractMismatch(pub[name], r, ok), "%s in dcgm-exporter %s", name, contractReleases[len(contractReleases)-1].tag)
		}
		for name := range contractExtras {
			require.Containsf(t, pub, name, "contractExtras lists %s, which gpuscope does not publish", name)
		}
	})

	t.Run("older releases", func(t *testing.T) {
		for i, rel := range contractReleases[:len(contractReleases)-1] {
			drift := contractDrift[rel.tag]
			for _, name := range names {
				if _, extra := contractExtras[name]; extra {
					continue
				}
				r, ok := releases[i][name]
				err := contractMismatch(pub[name], r, ok)
				if reason, listed := drift[name]; listed {
					require.Errorf(t, err, "contractDrift[%s][%s] (%s) no longer differs: remove it", rel.tag, name, reason)
					continue
				}
				require.NoErrorf(t, err, "%s in dcgm-exporter %s: fix it or list it in contractDrift with a reason", name, rel.tag)
			}
			for name := range drift {
				require.Containsf(t, pub, name, "contractDrift[%s] lists %s, which gpuscope does not publish", rel.tag, name)
			}
		}
	})

	t.Run("every active row of the newest release is published", func(t *testing.T) {
		for name, r := range newest {
			if !r.active {
				continue
			}
			if reason, ok := contractNotPublished[name]; ok {
				require.NotContainsf(t, pub, name, "contractNotPublished lists %s (%s) but it is published", name, reason)
				continue
			}
			if r.typ == "label" {
				for metric, p := range pub {
					require.Truef(t, p.labels[name], "%s (%s) is not a label of %s", name, r.where, metric)
				}
				continue
			}
			require.Containsf(t, pub, name, "%s is an active row (%s) that gpuscope does not publish", name, r.where)
		}
	})
}

// valueTypeName is the CSV's name of a Prometheus value type.
func valueTypeName(v prometheus.ValueType) string {
	switch v {
	case prometheus.CounterValue:
		return "counter"
	case prometheus.GaugeValue:
		return "gauge"
	}
	return fmt.Sprintf("ValueType(%d)", v)
}
