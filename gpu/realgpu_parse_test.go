package gpu

// Parsers for what the hardware check (realgpu_test.go, build tag realgpu)
// reads besides NVML: nvidia-smi's dmon and pmon traces, its -q text and
// gpuload's rate lines. They live in an untagged file so that CI tests
// them on the samples below; the realgpu test only runs on a GPU machine.

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dmonRow is one line of `nvidia-smi dmon -o DT`: when (local time, whole
// seconds), the GPU index and each column by its header name ("pwr",
// "sm", ...), NaN where dmon printed "-".
type dmonRow struct {
	at  time.Time
	gpu string
	v   map[string]float64
}

// parseDmon reads a dmon trace written with -o DT. The columns are taken
// from the header line "#Date Time gpu ...", which dmon repeats now and
// then and whose columns vary with the driver and -s; lines before a
// header, or that do not fit it, are skipped.
func parseDmon(r io.Reader, loc *time.Location) ([]dmonRow, error) {
	var cols []string
	var rows []dmonRow
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			f := strings.Fields(strings.TrimPrefix(line, "#"))
			if len(f) >= 3 && f[0] == "Date" && f[1] == "Time" && f[2] == "gpu" {
				cols = f
			}
			continue
		}
		f := strings.Fields(line)
		if cols == nil || len(f) != len(cols) {
			continue
		}
		at, err := time.ParseInLocation("20060102 15:04:05", strings.ReplaceAll(f[0], "/", "")+" "+f[1], loc)
		if err != nil {
			continue
		}
		row := dmonRow{at: at, gpu: f[2], v: map[string]float64{}}
		for i := 3; i < len(f); i++ {
			row.v[cols[i]] = smiNum(f[i])
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cols == nil {
		return nil, fmt.Errorf("no \"#Date Time gpu ...\" header: not a dmon -o DT trace")
	}
	return rows, nil
}

// pmonRow is one line of `nvidia-smi pmon -s u`: a process's SM share in
// one sample, NaN where pmon printed "-".
type pmonRow struct {
	gpu, pid string
	sm       float64
}

// parsePmon reads pmon's output, finding the columns from its "# gpu pid
// type sm ..." header (with or without -o DT's Date and Time first).
func parsePmon(r io.Reader) ([]pmonRow, error) {
	var gpuCol, pidCol, smCol int
	var ncols int
	var rows []pmonRow
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			f := strings.Fields(strings.TrimPrefix(line, "#"))
			idx := map[string]int{}
			for i, c := range f {
				idx[c] = i
			}
			g, ok1 := idx["gpu"]
			p, ok2 := idx["pid"]
			s, ok3 := idx["sm"]
			if ok1 && ok2 && ok3 {
				gpuCol, pidCol, smCol, ncols = g, p, s, len(f)
			}
			continue
		}
		f := strings.Fields(line)
		// The command name may hold spaces; the columns before it do not.
		if ncols == 0 || len(f) < ncols || f[pidCol] == "-" {
			continue
		}
		rows = append(rows, pmonRow{gpu: f[gpuCol], pid: f[pidCol], sm: smiNum(f[smCol])})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if ncols == 0 {
		return nil, fmt.Errorf("no \"# gpu pid type sm ...\" header: not a pmon trace")
	}
	return rows, nil
}

// parseSMIQuery reads `nvidia-smi -q` text into one map per GPU, keyed by
// the GPU's bus id as -q prints it ("00000000:18:00.0"). A value's key is
// its path of section names and its own name joined by "/", e.g.
// "PCI/Replays Since Reset" or "Clocks Event Reasons Counters/SW Power
// Capping"; the values are as printed ("0", "12234991553 us", "No").
func parseSMIQuery(r io.Reader) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	var cur map[string]string
	type level struct {
		indent int
		name   string
	}
	var stack []level
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "===") {
			continue
		}
		indent := len(raw) - len(strings.TrimLeft(raw, " \t"))
		if indent == 0 {
			if id, ok := strings.CutPrefix(line, "GPU "); ok {
				cur = map[string]string{}
				out[strings.TrimSpace(id)] = cur
				stack = stack[:0]
			}
			continue
		}
		if cur == nil {
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		name, value, hasValue := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !hasValue {
			stack = append(stack, level{indent, name})
			continue
		}
		path := make([]string, 0, len(stack)+1)
		for _, l := range stack {
			path = append(path, l.name)
		}
		cur[strings.Join(append(path, name), "/")] = strings.TrimSpace(value)
		// "HW Slowdown : Not Active" is also the parent of more indented lines.
		stack = append(stack, level{indent, name})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no \"GPU <bus id>\" section: not nvidia-smi -q output")
	}
	return out, nil
}

// smiQNumber parses a -q value such as "0", "12234991553 us" or
// "4,007,672,629 us" (thousands separators), in the unit given; NaN for
// N/A or another unit.
func smiQNumber(v, unit string) float64 {
	v = strings.TrimSpace(v)
	if unit != "" {
		s, ok := strings.CutSuffix(v, " "+unit)
		if !ok {
			return math.NaN()
		}
		v = s
	}
	return smiNum(strings.ReplaceAll(v, ",", ""))
}

// smiQBool parses Yes/No; NaN otherwise.
func smiQBool(v string) float64 {
	switch strings.TrimSpace(v) {
	case "Yes":
		return 1
	case "No":
		return 0
	}
	return math.NaN()
}

// loadRate is one "gpuload: rate" line.
type loadRate struct {
	at    float64 // Unix seconds: the end of the window it measured
	value float64
}

var loadRateLine = regexp.MustCompile(`^gpuload: rate t=(\d+(?:\.\d+)?) mode=(\S+) (\w+)=(\S+)$`)

// parseLoadRates returns the rate lines of a gpuload log for mode whose
// quantity is unit (bytes_per_s, busy).
func parseLoadRates(r io.Reader, mode, unit string) ([]loadRate, error) {
	var out []loadRate
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := loadRateLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil || m[2] != mode || m[3] != unit {
			continue
		}
		at, err1 := strconv.ParseFloat(m[1], 64)
		v, err2 := strconv.ParseFloat(m[4], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad rate line %q", sc.Text())
		}
		out = append(out, loadRate{at: at, value: v})
	}
	return out, sc.Err()
}

// smiNum parses an nvidia-smi number; [N/A], [Not Supported] and dmon's
// "-" are NaN.
func smiNum(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// realMedian is the median of v, NaN when v is empty.
func realMedian(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// realMean is the mean of v, NaN when v is empty.
func realMean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

var nvlinkGPULine = regexp.MustCompile(`^GPU (\d+): `)
var nvlinkLinkLine = regexp.MustCompile(`^Link \d+: (\d+(?:\.\d+)?) GB/s$`)

// parseNVLinkStatus reads `nvidia-smi nvlink -s` and returns, by GPU
// index, the sum of its active links' rates in bytes per second (GB/s as
// 1e9 B/s): the most its NVLink can carry per direction. A GPU listed
// with no active link has 0.
func parseNVLinkStatus(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	cur := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := nvlinkGPULine.FindStringSubmatch(line); m != nil {
			cur = m[1]
			out[cur] += 0
			continue
		}
		if m := nvlinkLinkLine.FindStringSubmatch(line); m != nil && cur != "" {
			v, _ := strconv.ParseFloat(m[1], 64)
			out[cur] += v * 1e9
		}
	}
	return out, sc.Err()
}

// clockEventMask parses nvidia-smi's clocks_event_reasons.active
// ("0x0000000000000001"); ok is false for [N/A] and the like.
func clockEventMask(s string) (uint64, bool) {
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(s), "0x"), 16, 64)
	return v, err == nil
}

func TestGPUCheckParseDmon(t *testing.T) {
	// Driver 550 with -s pucmt -o DT: jpg, ofa, ccpm and the PCIe columns.
	const trace = `#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk     fb   bar1   ccpm  rxpci  txpci 
#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz     MB     MB     MB   MB/s   MB/s 
 20260301   12:00:00      0     75     31     40      0      0      0      0      0      0   2619    345      0      1      0      5     10 
 20260301   12:00:01      0    690     55     63    100      0      -      -      0      0   2619   1980    533      3      0  52011    812 

#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk     fb   bar1   ccpm  rxpci  txpci 
#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz     MB     MB     MB   MB/s   MB/s 
 20260301   12:00:02      1    120     33     41      7      2      0      0      0      0   2619   1755    533      3      0      1      2 
garbage that does not fit
`
	loc := time.FixedZone("test", 3600)
	rows, err := parseDmon(strings.NewReader(trace), loc)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, time.Date(2026, 3, 1, 12, 0, 1, 0, loc), rows[1].at)
	require.Equal(t, "0", rows[1].gpu)
	require.Equal(t, 690.0, rows[1].v["pwr"])
	require.Equal(t, 100.0, rows[1].v["sm"])
	require.Equal(t, 1980.0, rows[1].v["pclk"])
	require.Equal(t, 52011.0, rows[1].v["rxpci"])
	require.True(t, math.IsNaN(rows[1].v["enc"]), "dmon's - is no value")
	require.Equal(t, "1", rows[2].gpu)

	// The date with slashes, as some drivers print it.
	rows, err = parseDmon(strings.NewReader("#Date Time gpu pwr sm\n2026/03/01 23:59:59 0 80 3\n"), time.UTC)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, time.Date(2026, 3, 1, 23, 59, 59, 0, time.UTC), rows[0].at)

	_, err = parseDmon(strings.NewReader("# gpu pwr sm\n 0 80 3\n"), time.UTC)
	require.ErrorContains(t, err, "not a dmon -o DT trace")
}

func TestGPUCheckParsePmon(t *testing.T) {
	const trace = `# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command 
# Idx           #    C/G      %      %      %      %      %      %    name 
    0      41234     C     23      0      -      -      -      -    gpuload        
    0      41299     C      -      -      -      -      -      -    python3 x.py   
    0          -     -      -      -      -      -      -      -    -              
`
	rows, err := parsePmon(strings.NewReader(trace))
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, pmonRow{gpu: "0", pid: "41234", sm: 23}, rows[0])
	require.Equal(t, "41299", rows[1].pid)
	require.True(t, math.IsNaN(rows[1].sm))

	_, err = parsePmon(strings.NewReader("#Date Time gpu pwr\n"))
	require.ErrorContains(t, err, "not a pmon trace")
}

func TestGPUCheckParseSMIQuery(t *testing.T) {
	const q = `
==============NVSMI LOG==============

Timestamp                                 : Sun Mar  1 12:00:00 2026
Driver Version                            : 570.124.06
CUDA Version                              : 12.8

Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H200
    Persistence Mode                      : Disabled
    PCI
        Bus                               : 0x18
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : 5
            Link Width
                Max                       : 16x
                Current                   : 16x
        Replays Since Reset               : 3
        Replay Number Rollovers           : 0
        Tx Throughput                     : 812 KB/s
        Rx Throughput                     : 1,204 KB/s
    Clocks Event Reasons
        Idle                              : Active
        HW Slowdown                       : Not Active
            HW Thermal Slowdown           : Not Active
        SW Thermal Slowdown               : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                  : 12234991553 us
        Sync Boost                        : 0 us
        SW Thermal Slowdown               : 11591399010 us
        HW Thermal Slowdown               : 0 us
        HW Power Braking                  : 0 us
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 1
        Pending                           : No
        Remapping Failure Occurred        : No
`
	gpus, err := parseSMIQuery(strings.NewReader(q))
	require.NoError(t, err)
	require.Len(t, gpus, 1)
	g := gpus["00000000:18:00.0"]
	require.Equal(t, "NVIDIA H200", g["Product Name"])
	require.Equal(t, "5", g["PCI/GPU Link Info/PCIe Generation/Current"])
	require.Equal(t, "16x", g["PCI/GPU Link Info/Link Width/Max"])
	require.Equal(t, 3.0, smiQNumber(g["PCI/Replays Since Reset"], ""))
	require.Equal(t, 1204.0, smiQNumber(g["PCI/Rx Throughput"], "KB/s"))
	require.Equal(t, "Not Active", g["Clocks Event Reasons/HW Slowdown/HW Thermal Slowdown"])
	require.Equal(t, "Not Active", g["Clocks Event Reasons/SW Thermal Slowdown"], "a sibling after a nested line")
	require.Equal(t, 12234991553.0, smiQNumber(g["Clocks Event Reasons Counters/SW Power Capping"], "us"))
	require.Equal(t, 1.0, smiQNumber(g["Remapped Rows/Uncorrectable Error"], ""))
	require.Equal(t, 0.0, smiQBool(g["Remapped Rows/Remapping Failure Occurred"]))
	require.True(t, math.IsNaN(smiQNumber("N/A", "us")))
	require.True(t, math.IsNaN(smiQNumber("12 ms", "us")), "another unit")
	require.Equal(t, 4007672629.0, smiQNumber("4,007,672,629 us", "us"))

	_, err = parseSMIQuery(strings.NewReader("No devices were found\n"))
	require.ErrorContains(t, err, "not nvidia-smi -q output")
}

func TestGPUCheckParseLoadRates(t *testing.T) {
	const log = `gpuload: ready pid=7 mode=h2d device=0 bus_id=0000:18:00.0 name="NVIDIA H200" sms=132 cc=9.0 cuda_driver_api=12.8 buffer_bytes=268435456 pinned=true
gpuload: rate t=1772366400.500 mode=h2d bytes_per_s=53687091200
gpuload: rate t=1772366401.501 mode=h2d bytes_per_s=53500000000
gpuload: rate t=1772366401.700 mode=duty busy=0.251
gpuload: done mode=h2d copies=400 seconds=2.0 bytes_per_s=53600000000
`
	rates, err := parseLoadRates(strings.NewReader(log), "h2d", "bytes_per_s")
	require.NoError(t, err)
	require.Equal(t, []loadRate{{1772366400.5, 53687091200}, {1772366401.501, 53500000000}}, rates)
	rates, err = parseLoadRates(strings.NewReader(log), "duty", "busy")
	require.NoError(t, err)
	require.Equal(t, []loadRate{{1772366401.7, 0.251}}, rates)
	_, err = parseLoadRates(strings.NewReader("gpuload: rate t=1 mode=h2d bytes_per_s=fast\n"), "h2d", "bytes_per_s")
	require.ErrorContains(t, err, "bad rate line")
}

func TestGPUCheckClockEventMask(t *testing.T) {
	v, ok := clockEventMask("0x0000000000000005")
	require.True(t, ok)
	require.Equal(t, uint64(5), v)
	_, ok = clockEventMask("[N/A]")
	require.False(t, ok)
}

func TestGPUCheckParseNVLinkStatus(t *testing.T) {
	const out = `GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)
	 Link 0: 26.562 GB/s
	 Link 1: 26.562 GB/s
	 Link 2: <inactive>
GPU 1: NVIDIA H200 (UUID: GPU-66666666-2222-3333-4444-555555555555)
	 Link 0: <inactive>
`
	got, err := parseNVLinkStatus(strings.NewReader(out))
	require.NoError(t, err)
	require.InDelta(t, 53.124e9, got["0"], 1)
	require.Contains(t, got, "1")
	require.Equal(t, 0.0, got["1"])
	require.NotContains(t, got, "2")
}

func TestGPUCheckStatistics(t *testing.T) {
	require.Equal(t, 2.0, realMedian([]float64{3, 1, 2}))
	require.Equal(t, 2.5, realMedian([]float64{4, 1, 3, 2}))
	require.True(t, math.IsNaN(realMedian(nil)))
	require.Equal(t, 2.5, realMean([]float64{4, 1, 3, 2}))
	require.True(t, math.IsNaN(realMean(nil)))
	require.True(t, math.IsNaN(smiNum("[N/A]")))
	require.Equal(t, 42.5, smiNum(" 42.5 "))
}
