package workload

import (
	"strings"
	"unicode/utf8"
)

// LabelValue returns s as a valid Prometheus label value. A label value
// must be valid UTF-8: client_golang refuses a metric with any other
// (MustNewConstMetric panics), and a cgroup directory, a container name or
// an NVML string may hold any byte but '/' and NUL. Any user with a
// delegated cgroup subtree can create such a cgroup with mkdir, so one
// process in it must not cost a collector its whole scrape.
//
// A valid string is returned unchanged: the id of every ordinary cgroup is
// still its path, byte for byte as cAdvisor names it. In an invalid one,
// each byte that is not part of a valid UTF-8 sequence is written \xHH
// (two lower-case hex digits) and each backslash \\, as Go quotes a
// string. Unlike strings.ToValidUTF8, which would turn both /a\xff and
// /a\xfe into the same /a\uFFFD, this keeps distinct paths distinct: two
// cgroups never share one series (the registry drops a duplicate series
// as an error), and GPU and CPU use of a container still join on id,
// since both collectors write the id through this function. Only a valid
// path that spells out the escape by hand (a directory literally named
// "a\xff") can meet an escaped one; no function that leaves valid strings
// as they are can avoid that.
func LabelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	var esc [4]byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.Write(appendByteEscape(esc[:0], s[i]))
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// appendByteEscape appends c written \xHH (two lower-case hex digits), as
// Go quotes a byte that is not part of valid UTF-8.
func appendByteEscape(b []byte, c byte) []byte {
	const hex = "0123456789abcdef"
	return append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
}
