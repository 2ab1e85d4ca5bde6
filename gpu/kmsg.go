package gpu

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// XIDs from the kernel log. The driver logs every XID to the kernel log
// as
//
//	NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., GPU has fallen off the bus.
//
// NVML's event set may not deliver some of them: a GPU that fell off the
// bus (79) or whose GSP stopped answering (119, 120) can make the set's
// Wait fail for every GPU in it, and a set being rebuilt misses what
// happens meanwhile. DCGM and GPUd read the kernel log for these; so does
// gpuscope, where it may: /dev/kmsg needs root or CAP_SYSLOG (and the
// packaged unit's ProtectKernelLogs=yes closes it; docs/metrics.md says how
// to open it). Without access it says so once, and `gpuscope doctor` says
// how to enable it.
//
// Each line names the GPU by PCI address, which is matched to the GPU's.
// A report is counted into the same series as NVML's events
// (DCGM_FI_DEV_XID_ERRORS, gpuscope_gpu_xid_errors_total), once: an XID
// that both sources report, with the same code on the same GPU within
// xidMatchWindow of each other, counts once, whichever comes first. Only
// lines logged after gpuscope opened the log count, as only events after
// registration do: the counter is "since gpuscope started".

// defaultKernelLog is the kernel's log device.
const defaultKernelLog = "/dev/kmsg"

// xidMatchWindow is how far apart NVML's event and the kernel log's line
// of one XID may arrive. Both come from the same interrupt handler and
// are read within the event wait (500 ms); storms keep them within a few
// seconds.
const xidMatchWindow = 10 * time.Second

// maxRecentXIDs bounds the reports kept per GPU for matching, in a storm.
const maxRecentXIDs = 1024

// xidSource is where an XID report came from.
type xidSource uint8

const (
	xidFromNVML xidSource = iota
	xidFromKernelLog
)

func (s xidSource) String() string {
	if s == xidFromKernelLog {
		return "kernel log"
	}
	return "NVML"
}

// xidReport is one XID report kept for xidMatchWindow, to match the same
// XID from the other source.
type xidReport struct {
	code    uint64
	src     xidSource
	at      time.Time
	matched bool
}

// recordXID counts XID code of g, reported by src at at, unless the other
// source reported it (same code) within xidMatchWindow and that report
// has not been matched yet.
func (b *nvmlBackend) recordXID(g *nvmlGPU, code uint64, src xidSource, at time.Time) {
	x := g.xid
	x.mu.Lock()
	keep := x.recent[:0]
	for _, r := range x.recent {
		if d := at.Sub(r.at); d < xidMatchWindow && d > -xidMatchWindow {
			keep = append(keep, r)
		}
	}
	clear(x.recent[len(keep):])
	x.recent = keep
	for i := range x.recent {
		if r := &x.recent[i]; !r.matched && r.src != src && r.code == code {
			r.matched = true
			x.mu.Unlock()
			return
		}
	}
	if len(x.recent) < maxRecentXIDs {
		x.recent = append(x.recent, xidReport{code: code, src: src, at: at})
	}
	changed := x.last != code
	x.last = code
	x.counts[code]++
	x.seen = true
	x.mu.Unlock()
	// Some XIDs come in storms; the counter has them all, the log the changes.
	if changed {
		b.logger.Warn("XID error", "gpu", g.label, "xid", code, "msg", xidMessage(code), "source", src)
	}
}

// parseXIDLine finds an NVRM Xid report in a kernel log line, as
// /dev/kmsg gives it ("6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79,
// ...") or dmesg prints it: the GPU's PCI address and the XID code. Older
// drivers leave out "PCI:"; NVSwitch's SXid lines are not GPU XIDs.
func parseXIDLine(line []byte) (pciAddr, uint64, bool) {
	const marker = "NVRM: Xid ("
	i := bytes.Index(line, []byte(marker))
	if i < 0 {
		return pciAddr{}, 0, false
	}
	rest := line[i+len(marker):]
	end := bytes.Index(rest, []byte("): "))
	if end < 0 {
		return pciAddr{}, 0, false
	}
	addr, ok := parsePCIAddr(string(bytes.TrimPrefix(rest[:end], []byte("PCI:"))))
	if !ok {
		return pciAddr{}, 0, false
	}
	rest = rest[end+3:]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || (n < len(rest) && rest[n] != ',' && rest[n] != ' ' && rest[n] != '\n') {
		return pciAddr{}, 0, false
	}
	code, err := strconv.ParseUint(string(rest[:n]), 10, 32)
	if err != nil {
		return pciAddr{}, 0, false
	}
	return addr, code, true
}

// parsePCIAddr parses domain:bus:device, with an optional .function, all
// hexadecimal: 0000:3b:00 or 00000000:3B:00.0.
func parsePCIAddr(s string) (pciAddr, bool) {
	if dot := len(s) - 2; dot > 0 && s[dot] == '.' {
		s = s[:dot]
	}
	var parts [3]uint64
	for i := range parts {
		var field string
		if i < 2 {
			j := strings.IndexByte(s, ':')
			if j < 0 {
				return pciAddr{}, false
			}
			field, s = s[:j], s[j+1:]
		} else {
			field = s
		}
		v, err := strconv.ParseUint(field, 16, 32)
		if err != nil || field == "" {
			return pciAddr{}, false
		}
		parts[i] = v
	}
	return pciAddr{domain: uint32(parts[0]), bus: uint32(parts[1]), device: uint32(parts[2])}, true
}

// kmsgReader reads the kernel log in a goroutine of its own until its
// file is closed.
type kmsgReader struct {
	f       *os.File
	stop    chan struct{}
	done    chan struct{}
	unwatch func() bool
}

// startKernelLog opens the kernel log, past what it already holds, and
// starts reading it. Without access it logs why, once per process.
func (b *nvmlBackend) startKernelLog(ctx context.Context) {
	if !b.fields.has(FieldXID) || b.kernelLog == "-" || b.kmsg != nil {
		return
	}
	path := b.kernelLog
	if path == "" {
		path = defaultKernelLog
	}
	f, err := openKernelLog(path)
	if err != nil {
		if !b.kernelLogDenied {
			b.kernelLogDenied = true
			b.logger.Info("XIDs are not read from the kernel log; those NVML does not deliver (79, 119, 120) are missed",
				"path", path, "err", err, "hint", "run as root or with CAP_SYSLOG; for the packaged service see `gpuscope doctor`")
		}
		return
	}
	r := &kmsgReader{f: f, stop: make(chan struct{}), done: make(chan struct{})}
	// Run's end stops the reader even where the backend is left open
	// (a hung NVML call at shutdown): closing the file ends its Read.
	r.unwatch = context.AfterFunc(ctx, func() { r.f.Close() })
	b.kmsg = r
	b.kmsgActive.Store(true)
	go r.run(ctx, b)
}

// openKernelLog opens path for reading without blocking, so that the
// runtime's poller waits for records and Close ends a Read in progress,
// and moves past the records it holds. A FIFO (tests) cannot seek.
func openKernelLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil && !errors.Is(err, syscall.ESPIPE) {
		f.Close()
		return nil, err
	}
	return f, nil
}

// stopKernelLog stops the reader and waits for it, briefly.
func (b *nvmlBackend) stopKernelLog() {
	r := b.kmsg
	if r == nil {
		return
	}
	b.kmsg = nil
	b.kmsgActive.Store(false)
	close(r.stop)
	r.unwatch()
	r.f.Close()
	bound := time.NewTimer(time.Second)
	defer bound.Stop()
	select {
	case <-r.done:
	case <-bound.C:
		b.logger.Warn("The kernel log reader did not stop; leaving it behind")
	}
}

// kernelLogActive reports whether the kernel log is being read.
func (b *nvmlBackend) kernelLogActive() bool { return b.kmsgActive.Load() }

// maxKernelLogLine bounds a line kept while waiting for its end.
const maxKernelLogLine = 64 << 10

func (r *kmsgReader) run(ctx context.Context, b *nvmlBackend) {
	defer close(r.done)
	defer func() {
		if p := recover(); p != nil {
			b.kmsgActive.Store(false)
			b.logger.Error("The kernel log reader panicked; XIDs are no longer read from the kernel log", "panic", p)
		}
	}()
	// /dev/kmsg gives one record per read (at most about 8 KiB with its
	// key=value lines); a FIFO may give several, or part of one.
	buf := make([]byte, 16<<10)
	var pending []byte
	for {
		n, err := r.f.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				b.kernelLogLine(pending[:i])
				pending = pending[i+1:]
			}
			if len(pending) > maxKernelLogLine {
				pending = pending[:0]
			}
			pending = append(pending[:0:0], pending...)
		}
		switch {
		case err == nil:
		case errors.Is(err, syscall.EPIPE):
			// Records were overwritten before they were read: the next
			// read goes on from the oldest one left.
		case errors.Is(err, io.EOF):
			// A FIFO without a writer; /dev/kmsg never ends.
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		default:
			select {
			case <-r.stop: // closed by stopKernelLog
			case <-ctx.Done(): // closed at Run's end
			default:
				b.kmsgActive.Store(false)
				b.logger.Warn("Reading the kernel log failed; XIDs are no longer read from it", "err", err)
			}
			return
		}
	}
}

// kernelLogLine counts the XID a kernel log line reports, if any, for the
// GPU at its PCI address.
func (b *nvmlBackend) kernelLogLine(line []byte) {
	addr, code, ok := parseXIDLine(line)
	if !ok {
		return
	}
	for _, g := range b.gpuList() {
		if id := g.ident.Load(); id != nil && id.pci == addr {
			b.recordXID(g, code, xidFromKernelLog, time.Now())
			return
		}
	}
	b.logger.Debug("XID in the kernel log for a GPU not identified", "pci", addr, "xid", code)
}
