package gpu

import (
	"bytes"
	"errors"
	"io"
	"os"

	"github.com/gpuscope/gpuscope/workload"
)

// MaxCommandBytes bounds a process's command line in the process list: a
// table cell, not the whole of a command line that may be megabytes.
const MaxCommandBytes = 512

// procInfo is what the process list shows of a process besides its GPU
// use: its real uid (decimal, "" if unreadable), the kernel's name for
// it (comm) and its command line, made valid UTF-8 without control
// characters and bounded.
type procInfo struct {
	uid, comm, command string
}

// info returns pid's procInfo: read once for a process resolve has cached
// (its owner and command do not change in a way worth a read per cycle),
// else read now.
func (r *pidResolver) info(pid uint32) procInfo {
	e, ok := r.cache[pid]
	if ok && e.info != nil {
		return *e.info
	}
	i := r.readInfo(pid)
	if ok {
		e.info = &i
		r.cache[pid] = e
	}
	return i
}

func (r *pidResolver) readInfo(pid uint32) procInfo {
	var i procInfo
	if b, err := readSmallFile(string(r.procPath(pid, "/status")), r.buf); err == nil {
		r.buf = b[:cap(b)]
		i.uid, _ = workload.StatusUID(b)
	}
	if b, err := readSmallFile(string(r.procPath(pid, "/comm")), r.buf); err == nil {
		r.buf = b[:cap(b)]
		i.comm = workload.Clean(string(bytes.TrimSuffix(b, []byte{'\n'})), 64)
	}
	if b, err := readBounded(string(r.procPath(pid, "/cmdline")), 4*MaxCommandBytes); err == nil {
		i.command = commandLine(b)
	}
	if i.command == "" && i.comm != "" {
		// A kernel thread, or a process whose arguments are gone (a
		// zombie): ps shows its name in brackets.
		i.command = "[" + i.comm + "]"
	}
	return i
}

// commandLine turns /proc/<pid>/cmdline content (arguments ended by NUL)
// into one line: arguments joined by spaces, cleaned and bounded.
func commandLine(b []byte) string {
	b = bytes.TrimRight(b, "\x00")
	b = bytes.ReplaceAll(b, []byte{0}, []byte{' '})
	return workload.Clean(string(b), MaxCommandBytes)
}

// readBounded reads at most max bytes of a file.
func readBounded(name string, max int) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}
