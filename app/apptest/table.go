package apptest

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TableRows parses `gpuscope workloads`' table by its header's column
// offsets (tabwriter pads every cell to its column; cells hold spaces,
// "23.4 GiB", so fields cannot be split on them), by workload.
func TableRows(t testing.TB, table string) map[string]map[string]string {
	t.Helper()
	if table == "No workloads in this range.\n" {
		return nil
	}
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	header := lines[0]
	require.True(t, strings.HasPrefix(header, "WORKLOAD"), "the table's header: %q", header)
	type column struct {
		name       string
		start, end int
	}
	var cols []column
	for i := 0; i < len(header); {
		j := i
		// A column's name ends where two spaces begin (names like
		// "SM AVG/MAX" hold one).
		for j < len(header) && !(header[j] == ' ' && j+1 < len(header) && header[j+1] == ' ') {
			j++
		}
		k := j
		for k < len(header) && header[k] == ' ' {
			k++
		}
		cols = append(cols, column{name: header[i:j], start: i, end: k})
		i = k
	}
	cols[len(cols)-1].end = math.MaxInt
	rows := map[string]map[string]string{}
	for _, l := range lines[1:] {
		r := map[string]string{}
		for _, c := range cols {
			if c.start >= len(l) {
				continue
			}
			r[c.name] = strings.TrimSpace(l[c.start:min(c.end, len(l))])
		}
		rows[r["WORKLOAD"]] = r
	}
	return rows
}
