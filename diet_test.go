package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/scrape/families"
)

// The series diet turns off, by default, the families nothing built in
// reads. These tests keep that true as rules, dashboards, pages and docs
// change: every family name they mention stays on by default, and every
// family kept "because something reads it" is read or documented.

// dietFile and dietHeading are the docs section that documents the diet.
const (
	dietFile    = "docs/metrics.md"
	dietHeading = "## What is stored by default"
)

func dietSection(t *testing.T) (doc, diet string) {
	t.Helper()
	doc = string(mustRead(t, dietFile))
	return doc, section(t, doc, dietHeading)
}

// familyToken finds metric family names of the two diets' namespaces,
// with the character before them, so that parts of recording-rule names
// (level:metric:operations) can be told apart.
var familyToken = regexp.MustCompile(`(^|[^a-zA-Z0-9_:])((?:container|machine|go|process|prometheus|promhttp|net_conntrack|alertmanager)_[a-z0-9_]*[a-z0-9])\b`)

// readers returns, for every file that reads metrics or documents them
// (built-in rules, dashboards, the page, the report, doctor, README.md,
// CONTRIBUTING.md and docs/), the family names it mentions. The diet's own table
// and the code that defines the diet are left out, as are tests,
// benchmarks and the neighbour tools' modules.
func readers(t *testing.T) map[string][]string {
	t.Helper()
	doc, diet := dietSection(t)
	found := map[string][]string{}
	var keys []string // the config keys of the groups, e.g. go_runtime
	for _, s := range []families.Section{families.CadvisorSection, families.SelfSection} {
		for _, g := range s.Groups {
			keys = append(keys, g.Key)
		}
	}
	add := func(where, text string) {
		for _, i := range familyToken.FindAllStringSubmatchIndex(text, -1) {
			name := text[i[4]:i[5]]
			if strings.HasPrefix(text[i[5]:], ".go") { // a file name: e2e/alertmanager_test.go
				continue
			}
			if slices.Contains(keys, name) {
				continue
			}
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			if !slices.Contains(found[name], where) {
				found[name] = append(found[name], where)
			}
		}
	}
	add(dietFile, strings.Replace(doc, diet, "", 1))
	for _, f := range docFiles(t) {
		if f != dietFile {
			add(f, string(mustRead(t, f)))
		}
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch path {
			// alertmanager/ registers the families of its own metrics
			// (alertmanager_receivers, ...) beside those of the Alertmanager
			// packages it wires: it defines them, it does not read them.
			case ".git", "tools", "bench", "e2e", "testdata", "scrape/families", "packaging", "alertmanager":
				return filepath.SkipDir
			}
			if d.Name() == "testdata" || d.Name() == "tests" {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, "_test.go"), path == "config/gpuscope.yml":
			return nil
		case strings.HasSuffix(path, ".go"), strings.HasSuffix(path, ".yml"), strings.HasSuffix(path, ".html"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			add(path, string(b))
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

// cadvisorOwned reports whether name is one of cAdvisor's families (the
// ones the diet may group), as opposed to a gpuscope or Prometheus one.
func cadvisorOwned(name string) bool {
	return strings.HasPrefix(name, "container_") || strings.HasPrefix(name, "machine_")
}

// TestDietKeepsWhatIsRead: a family that a built-in rule, dashboard, page,
// report or document mentions is on in the default config.
func TestDietKeepsWhatIsRead(t *testing.T) {
	found := readers(t)
	require.Contains(t, found, "container_cpu_usage_seconds_total", "the scan finds the pack's families")
	require.Contains(t, found["go_memstats_heap_inuse_bytes"], "dashboards/self.go", "the scan finds the dashboards' families")
	var off []string
	for name, where := range found {
		keep := families.Self{}.Keep(name)
		if cadvisorOwned(name) {
			keep = families.Cadvisor{}.Keep(name)
		}
		if !keep {
			off = append(off, name+" (read in "+strings.Join(where, ", ")+")")
		}
	}
	slices.Sort(off)
	require.Empty(t, off, "families read by something built in, but off by default: keep them (families.*Section.Kept) or stop reading them")
}

// TestDietKeptIsRead: every family kept inside an otherwise-off group is
// read or documented somewhere, so the kept lists do not outlive their
// reasons.
func TestDietKeptIsRead(t *testing.T) {
	found := readers(t)
	_, diet := dietSection(t)
	for _, s := range []families.Section{families.CadvisorSection, families.SelfSection} {
		for _, name := range s.Kept {
			if len(found[name]) == 0 {
				require.True(t, strings.Contains(diet, "`"+name+"`"), "%s is kept by the %s diet, but nothing reads it and %s %q does not list it", name, s.Name, dietFile, dietHeading)
			}
		}
	}
}

// TestReadmeDietTable: docs/metrics.md's table of the groups is the
// groups, and gpuscope.yml has a key for each, off.
func TestReadmeDietTable(t *testing.T) {
	_, diet := dietSection(t)
	var want [][]string
	for _, s := range []families.Section{families.CadvisorSection, families.SelfSection} {
		for _, g := range s.Groups {
			var fams []string
			for _, p := range g.Prefixes {
				fams = append(fams, "`"+p+"*`")
			}
			for _, n := range g.Names {
				fams = append(fams, "`"+n+"`")
			}
			want = append(want, []string{"`" + s.Name + ".families." + g.Key + "`", strings.Join(fams, ", "), g.Why})
			require.Regexp(t, `(?m)^    `+g.Key+`: false\b`, string(mustRead(t, "config/gpuscope.yml")), "config/gpuscope.yml has %s.families.%s: false", s.Name, g.Key)
		}
	}
	var got [][]string
	for _, row := range tableRows(diet) {
		if strings.Contains(row[0], ".families.") {
			got = append(got, row)
		}
	}
	require.Equal(t, want, got)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
