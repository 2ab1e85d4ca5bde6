package gpu

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

func TestParseXIDLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		pci  pciAddr
		code uint64
		ok   bool
	}{
		{"kmsg record, fallen off the bus",
			"2,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
			pciAddr{0, 0x3b, 0}, 79, true},
		{"dmesg --ctime, SM exception",
			"[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
			pciAddr{0, 0xcb, 0}, 13, true},
		{"context switch timeout with a pid",
			"[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
			pciAddr{0, 0xcb, 0}, 109, true},
		{"GSP RPC timeout",
			"4,2345,6789012,-;NVRM: Xid (PCI:0000:18:00): 119, pid=3321, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x2080014b 0x5).",
			pciAddr{0, 0x18, 0}, 119, true},
		{"GSP error",
			"NVRM: Xid (PCI:0000:18:00): 120, pid='<unknown>', name=<unknown>, GSP task timeout @ pc:0x4a0d97c, task: 1",
			pciAddr{0, 0x18, 0}, 120, true},
		{"older driver without PCI:", "NVRM: Xid (0000:03:00): 79, GPU has fallen off the bus.", pciAddr{0, 3, 0}, 79, true},
		{"another PCI domain", "NVRM: Xid (PCI:0001:c1:00): 48, pid=9, name=x, DBE (double bit error) ECC error.", pciAddr{1, 0xc1, 0}, 48, true},
		{"GB10's domain", "NVRM: Xid (PCI:000f:01:00): 31, pid=77, name=a.out, Ch 00000010, intr 00000000.", pciAddr{0xf, 1, 0}, 31, true},
		{"code at the end of the line", "NVRM: Xid (PCI:0000:3b:00): 79", pciAddr{0, 0x3b, 0}, 79, true},
		{"NVSwitch SXid is not a GPU XID", "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error", pciAddr{}, 0, false},
		{"GPU identity line", "NVRM: GPU at PCI:0000:3b:00: GPU-4d2c0b2a-1111-2222-3333-444455556666", pciAddr{}, 0, false},
		{"fallen off the bus without Xid", "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", pciAddr{}, 0, false},
		{"kmsg key=value line", " SUBSYSTEM=pci", pciAddr{}, 0, false},
		{"no code", "NVRM: Xid (PCI:0000:3b:00): pid=1, name=x", pciAddr{}, 0, false},
		{"bad address", "NVRM: Xid (PCI:zz:3b:00): 79, GPU has fallen off the bus.", pciAddr{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pci, code, ok := parseXIDLine([]byte(tc.line))
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.pci, pci)
			require.Equal(t, tc.code, code)
		})
	}
}

// fakeKernelLog is a FIFO standing in for /dev/kmsg, kept open for
// writing so that the reader never sees its end.
func fakeKernelLog(t *testing.T) (string, func(lines ...string)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kmsg")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return path, func(lines ...string) {
		for _, l := range lines {
			_, err := w.WriteString(l + "\n")
			require.NoError(t, err)
		}
	}
}

// TestKernelLogXIDs: XIDs the driver logs are counted for the GPU at the
// line's PCI address, into the same series as NVML's events; one XID that
// both report counts once, whichever comes first; a GPU that cannot
// register for NVML's events has its XID series from the kernel log.
func TestKernelLogXIDs(t *testing.T) {
	m := newMockMachine(t, 3)
	m.devs[2].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	path, write := fakeKernelLog(t)
	var logs syncBuffer
	o := mockOptions(m, newFakeClock())
	o.KernelLog = path
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	count := func(gpu, code string) float64 {
		v, _ := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": gpu, "err_code": code})
		return v
	}
	eventually := func(gpu, code string, want float64) {
		t.Helper()
		require.Eventually(t, func() bool {
			c.collectOnce(bg)
			return count(gpu, code) == want
		}, 5*time.Second, 5*time.Millisecond, "GPU %s XID %s counted %v times", gpu, code, want)
	}

	// The kernel log alone: GPU 1 (00000000:19:00.0) falls off the bus.
	write("3,812,5512345678,-;NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
		" SUBSYSTEM=pci",
		" DEVICE=+pci:0000:19:00.0",
		"6,813,5512345690,-;NVRM: Xid (PCI:0000:99:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.") // no such GPU
	eventually("1", "79", 1)
	require.Equal(t, 79.0, mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "1", "err_code": "79", "err_msg": "GPU has fallen off the bus"}))
	// NVML delivers the same XID late: counted once.
	m.events <- nvml.EventData{Device: m.devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	// NVML first, then the kernel log, on GPU 0.
	m.events <- nvml.EventData{Device: m.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	eventually("0", "13", 1)
	write("4,814,5512346000,-;NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address")
	// A storm: the second line has no NVML twin, and counts.
	write("4,815,5512346100,-;NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x505648=0x2000d")
	eventually("0", "13", 2)
	require.Equal(t, 1.0, count("1", "79"))
	require.Len(t, gather(t, reg, "gpuscope_gpu_xid_errors_total"), 2)

	// GPU 2 cannot register for NVML's events; the kernel log gives its
	// XIDs (GSP timeouts are what NVML may not deliver).
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "2", "field": "DCGM_FI_DEV_XID_ERRORS"}))
	write("4,816,5512347000,-;NVRM: Xid (PCI:0000:1a:00): 119, pid=9, name=x, Timeout after 6s of waiting for RPC response from GPU2 GSP!")
	eventually("2", "119", 1)
	require.Contains(t, logs.String(), "source=\"kernel log\"")
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
}

// TestKernelLogUnreadable: without access to the kernel log gpuscope says
// so once, across re-initialisations, and works on with NVML's events.
func TestKernelLogUnreadable(t *testing.T) {
	m := newMockMachine(t, 1)
	var logs syncBuffer
	o := mockOptions(m, newFakeClock())
	o.KernelLog = filepath.Join(t.TempDir(), "no-kmsg")
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	require.NoError(t, c.backend.Close())
	c.opened = false
	c.collectOnce(bg)
	require.Equal(t, 1, strings.Count(logs.String(), "XIDs are not read from the kernel log"), logs.String())
	require.Equal(t, 0.0, mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "0"}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
}

// TestKernelLogRealDevice: where this test may read /dev/kmsg (root), the
// reader opens it past its records, waits in the runtime's poller, and
// stops at once when the backend closes (a Read on the device ends when
// its file is closed). Nothing is written to the host's log.
func TestKernelLogRealDevice(t *testing.T) {
	f, err := os.Open(defaultKernelLog)
	if err != nil {
		t.Skipf("cannot read %s: %v", defaultKernelLog, err)
	}
	f.Close()
	m := newMockMachine(t, 1)
	var logs syncBuffer
	o := mockOptions(m, newFakeClock())
	o.KernelLog = ""
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, _ := testCollector(t, o)
	c.collectOnce(bg)
	b := c.backend.(*nvmlBackend)
	require.True(t, b.kernelLogActive())
	done := b.kmsg.done
	start := time.Now()
	require.NoError(t, b.Close())
	<-done
	require.Less(t, time.Since(start), 500*time.Millisecond)
	require.False(t, b.kernelLogActive())
	require.NotContains(t, logs.String(), "did not stop")
	require.NotContains(t, logs.String(), "Reading the kernel log failed")
	c.opened = false
}

// TestKernelLogReadingMetric: whether the kernel log is read is published,
// so that `gpuscope doctor` can ask a running gpuscope.
func TestKernelLogReadingMetric(t *testing.T) {
	path, _ := fakeKernelLog(t)
	for _, tc := range []struct {
		name, path string
		want       float64
	}{
		{"read", path, 1},
		{"unreadable", filepath.Join(t.TempDir(), "none"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mockOptions(newMockMachine(t, 1), newFakeClock())
			o.KernelLog = tc.path
			c, reg := testCollector(t, o)
			require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_kernel_log_reading"), "not before NVML is up")
			c.collectOnce(bg)
			require.Equal(t, tc.want, mustLookup(t, reg, "gpuscope_gpu_collector_kernel_log_reading", nil))
		})
	}
}
