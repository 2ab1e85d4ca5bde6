package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// A full disk can tear a WAL record, and the next start then loses
// everything written after it:
//
// The WAL (prometheus/tsdb/wlog) is a sequence of 32 KiB pages. A record
// that does not fit in what is left of the current page is split: a
// "first" fragment fills the page to its end, "middle" fragments fill
// whole pages, a "last" fragment ends it. A page is written out when it
// is full. When that write fails (ENOSPC), Log returns the error and the
// rest of the record is dropped, but the fragments already in the page
// stay there and are written when space is back, followed by the next
// records (the TODO in wlog.go's log()). The reader then fails at the
// first record after them ("unexpected full record"), and the repair at
// the next start truncates the WAL there: every sample written after the
// disk was full is lost, hours of them if the next restart is hours
// later. Checkpoints in the meantime fail on the same record, so the WAL
// is not truncated and grows.
//
// The torn fragments always reach the end of their pages, and the reader
// takes zeros up to a page's end as padding. So dropTornRecords zeroes
// them in place: the abandoned record (whose commit failed, so its
// samples were never in the head) disappears, and everything after it
// reads again. It touches only a run of fragments with valid checksums
// that a following valid record shows to be abandoned; anything else that
// does not parse (a garbled or cut-off segment) is left to the TSDB's
// repair.

const (
	walPageSize   = 32 * 1024 // wlog's pageSize
	walHeaderSize = 7         // type, length (2), CRC32 (4)

	walRecPageTerm = 0
	walRecFull     = 1
	walRecFirst    = 2
	walRecMiddle   = 3
	walRecLast     = 4
	walRecTypeMask = 0x07 // the other bits are compression flags
)

var walCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// walPos is a position in the WAL: a segment and an offset in it.
type walPos struct {
	Segment int
	Offset  int64
}

// tornRecord is an abandoned record zeroed by dropTornRecords.
type tornRecord struct {
	Segment int
	Offset  int64 // of its first fragment
	Bytes   int64 // zeroed, to the end of the last fragment's page
}

// tornFragment is one fragment of a record being read.
type tornFragment struct {
	path     string
	segment  int
	off, end int64
}

// dropTornRecords reads the WAL segments in dir from the position from,
// zeroes every abandoned record it finds and returns them, with the
// position after the last whole record read: a later call can go on from
// there. It stops without error where the WAL does not parse, and at the
// end of the last segment.
func dropTornRecords(dir string, from walPos) ([]tornRecord, walPos, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, from, nil
		}
		return nil, from, fmt.Errorf("list WAL segments: %w", err)
	}
	var segs []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && !e.IsDir() && n >= from.Segment {
			segs = append(segs, n)
		}
	}
	slices.Sort(segs)

	var (
		torn  [][]tornFragment
		run   []tornFragment // fragments of the record being read
		next  = from
		page  = make([]byte, walPageSize)
		ended bool
	)
	for i, seg := range segs {
		if i > 0 && seg != segs[i-1]+1 {
			break // segments follow each other; after a gap, the TSDB's repair
		}
		path := filepath.Join(dir, fmt.Sprintf("%08d", seg))
		start := int64(0)
		if seg == from.Segment {
			start = from.Offset
		}
		ended, err = func() (bool, error) {
			f, err := os.Open(path)
			if err != nil {
				return true, err
			}
			defer f.Close()
			for pageOff := start - start%walPageSize; ; pageOff += walPageSize {
				n, err := f.ReadAt(page, pageOff)
				if err != nil && !errors.Is(err, io.EOF) {
					return true, err
				}
				if n == 0 {
					return false, nil
				}
				p := page[:n]
				pos := 0
				if pageOff < start {
					pos = int(start - pageOff)
				}
				for pos < len(p) {
					if p[pos] == walRecPageTerm {
						break // zeros to the page's end (or a partly written page)
					}
					if pos+walHeaderSize > len(p) {
						return true, nil
					}
					length := int(binary.BigEndian.Uint16(p[pos+1:]))
					end := pos + walHeaderSize + length
					if end > len(p) || crc32.Checksum(p[pos+walHeaderSize:end], walCastagnoli) != binary.BigEndian.Uint32(p[pos+3:]) {
						return true, nil // cut off or damaged: the TSDB's repair
					}
					typ := p[pos] & walRecTypeMask
					frag := tornFragment{path: path, segment: seg, off: pageOff + int64(pos), end: pageOff + walPageSize}
					switch typ {
					case walRecFull, walRecFirst:
						if len(run) > 0 {
							torn = append(torn, run) // abandoned: a new record starts
							run = nil
						}
						if typ == walRecFull {
							next = walPos{seg, pageOff + int64(end)}
						} else {
							if end != walPageSize {
								return true, nil // a first fragment fills its page
							}
							run = []tornFragment{frag}
						}
					case walRecMiddle:
						if len(run) == 0 || end != walPageSize {
							return true, nil
						}
						run = append(run, frag)
					case walRecLast:
						if len(run) == 0 {
							return true, nil
						}
						run = nil
						next = walPos{seg, pageOff + int64(end)}
					default:
						return true, nil
					}
					pos = end
				}
				if n < walPageSize {
					return false, nil
				}
			}
		}()
		if err != nil {
			return nil, from, fmt.Errorf("read WAL segment %s: %w", path, err)
		}
		if ended {
			break
		}
	}

	var out []tornRecord
	zeros := make([]byte, walPageSize)
	for _, frags := range torn {
		rec := tornRecord{Segment: frags[0].segment, Offset: frags[0].off}
		if err := func() (err error) {
			f, err := os.OpenFile(frags[0].path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, f.Close()) }()
			for _, fr := range frags {
				if _, err := f.WriteAt(zeros[:fr.end-fr.off], fr.off); err != nil {
					return err
				}
				rec.Bytes += fr.end - fr.off
			}
			return f.Sync()
		}(); err != nil {
			return out, from, fmt.Errorf("zero torn WAL record in segment %d at %d: %w", rec.Segment, rec.Offset, err)
		}
		out = append(out, rec)
	}
	return out, next, nil
}
