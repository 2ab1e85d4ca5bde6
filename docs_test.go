package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/config"
)

// The docs restate the code in places; these tests keep them equal to it
// and keep every link between them working.

// docFiles returns README.md, CONTRIBUTING.md and every Markdown file
// under docs/, slash-separated and relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	require.NoError(t, filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	}))
	return files
}

var (
	fencedBlock = regexp.MustCompile("(?ms)^ *```.*?^ *```[^\n]*$")
	inlineCode  = regexp.MustCompile("`[^`\n]*`")
	mdLink      = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	mdHeading   = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#* *$`)
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
)

// prose is text without its code: fenced blocks and inline code spans,
// which hold link-like text that is not a link.
func prose(text string) string {
	text = fencedBlock.ReplaceAllString(text, "")
	text = htmlComment.ReplaceAllString(text, "")
	return inlineCode.ReplaceAllString(text, "")
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// text: the heading's text lower-cased, without what is neither a letter,
// a digit, a space, '-' nor '_', spaces as '-'; a repeated one gets -1,
// -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(fencedBlock.ReplaceAllString(text, ""), -1) {
		h := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(m[1], "$1") // a link: its text
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestDocsAnchors(t *testing.T) {
	a := anchors("# gpuscope\n## `gpuscope doctor`: why a metric is missing\n## 64 nodes × 8 GPUs on two cores\n```sh\n# not a heading\n```\n## Install\n## Install\n### GPUs on real drivers\n")
	require.Equal(t, map[string]bool{
		"gpuscope": true, "gpuscope-doctor-why-a-metric-is-missing": true, "64-nodes--8-gpus-on-two-cores": true,
		"install": true, "install-1": true, "gpus-on-real-drivers": true,
	}, a)
}

// TestDocsLinks: every relative link of README.md, CONTRIBUTING.md,
// BENCHMARKS.md and docs/ names a file or directory of the repository,
// and every #anchor a heading of the file it points into. No link is
// exempt.
func TestDocsLinks(t *testing.T) {
	files := append(docFiles(t), "BENCHMARKS.md")
	require.Contains(t, files, "docs/install.md")
	headings := map[string]map[string]bool{}
	headingsOf := func(path string) map[string]bool {
		if h, ok := headings[path]; ok {
			return h
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		headings[path] = anchors(string(b))
		return headings[path]
	}
	var broken []string
	checked := 0
	for _, file := range files {
		text := prose(string(mustRead(t, file)))
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(target) { // http:, https:, mailto:
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			if path == "" {
				path = file
			} else {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
				if _, err := os.Stat(path); err != nil {
					broken = append(broken, fmt.Sprintf("%s: %s: no such file", file, target))
					continue
				}
			}
			if anchor != "" {
				if !strings.HasSuffix(path, ".md") {
					broken = append(broken, fmt.Sprintf("%s: %s: an anchor into a file that is not Markdown", file, target))
				} else if !headingsOf(path)[anchor] {
					broken = append(broken, fmt.Sprintf("%s: %s: %s has no heading #%s", file, target, path, anchor))
				}
			}
		}
	}
	require.Greater(t, checked, 50, "the scan finds the links")
	require.Empty(t, broken, "broken links")
}

// configKey is one key of the config file, as docs/configuration.md's
// table lists it.
type configKey struct {
	path, typ, def string
}

// configKeys walks the types the config file decodes into, by their yaml
// tags: every key of gpuscope's own sections, the first level of the
// Prometheus types they embed (nodes: takes Prometheus's HTTP client
// config inline), and the top-level sections of a prometheus.yml, which
// Prometheus's own config package reads.
func configKeys(t *testing.T) []configKey {
	t.Helper()
	var defaults yaml.Node
	require.NoError(t, yaml.Unmarshal(config.DefaultFile(), &defaults))
	lookup := func(path string) *yaml.Node {
		n := defaults.Content[0]
		for _, k := range strings.Split(path, ".") {
			var next *yaml.Node
			for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					next = n.Content[i+1]
				}
			}
			if next == nil {
				return nil
			}
			n = next
		}
		return n
	}
	def := func(path string, ty reflect.Type) string {
		if strings.Contains(path, "[]") {
			return "(per item)"
		}
		n := lookup(path)
		switch {
		case n == nil:
			return "(not set)"
		case n.Kind == yaml.ScalarNode:
			if n.Value == "" {
				return `""`
			}
			return n.Value
		case n.Kind == yaml.SequenceNode && len(n.Content) == 0:
			return "[]"
		case n.Kind == yaml.MappingNode && ty.Kind() == reflect.Struct:
			return ""
		}
		b, err := yaml.Marshal(n)
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	var keys []configKey
	var walk func(prefix string, ty reflect.Type, ours bool)
	walk = func(prefix string, ty reflect.Type, ours bool) {
		for ty.Kind() == reflect.Pointer {
			ty = ty.Elem()
		}
		for i := range ty.NumField() {
			f := ty.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || tag == "-" {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if tag == "" && ft.Kind() == reflect.Struct { // inline
				walk(prefix, ft, ours && strings.HasPrefix(ft.PkgPath(), "github.com/gpuscope/"))
				continue
			}
			if tag == "" {
				continue
			}
			path := prefix + tag
			keys = append(keys, configKey{path, typeName(ft), def(path, ft)})
			if !ours {
				continue
			}
			switch {
			case ft.Kind() == reflect.Struct && strings.HasPrefix(ft.PkgPath(), "github.com/gpuscope/"):
				walk(path+".", ft, true)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && strings.HasPrefix(ft.Elem().PkgPath(), "github.com/gpuscope/"):
				walk(path+"[].", ft.Elem(), true)
			}
		}
	}
	// The top level: Prometheus's sections, then gpuscope's, as
	// config.Config holds them (its fields have no yaml tags: the file's
	// names are those of the loader's own struct, listed here; the test
	// fails when config.Config gains a section this list lacks).
	walk("", reflect.TypeFor[promconfig.Config](), false)
	sections := map[string]string{
		"Cadvisor": "cadvisor", "GPU": "gpu", "Web": "web", "Nodes": "nodes", "Rules": "rules",
		"Accounting": "accounting", "Workloads": "workloads", "SelfMetrics": "self_metrics",
		"Users": "users", "Digests": "digests",
	}
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		switch f.Name {
		case "Prometheus", "Alertmanager", "File", "Warnings":
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, ok := sections[f.Name]
		require.True(t, ok, "config.Config has a section %s: name its key in configKeys", f.Name)
		if ft := f.Type; ft.Kind() == reflect.Map {
			// users: keyed by a name of the user's choosing.
			keys = append(keys, configKey{name, typeName(ft), def(name, ft)})
			if ft.Elem().Kind() == reflect.Struct {
				walk(name+".<name>.", ft.Elem(), true)
			}
			continue
		}
		keys = append(keys, configKey{name, "section", ""})
		walk(name+".", f.Type, true)
	}
	keys = append(keys, configKey{"alertmanager", "an alertmanager.yml, or `{config_file: path}`", "(not set): alerts reach nobody"})
	return keys
}

func typeName(ty reflect.Type) string {
	switch ty {
	case reflect.TypeFor[model.Duration]():
		return "duration"
	case reflect.TypeFor[units.Base2Bytes]():
		return "size"
	}
	switch ty.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Uint, reflect.Int32, reflect.Uint32:
		return "integer"
	case reflect.Float64, reflect.Float32:
		return "number"
	case reflect.Map:
		return "map"
	case reflect.Slice:
		if ty.Elem().Kind() == reflect.String {
			return "list of strings"
		}
		return "list"
	case reflect.Struct:
		return "section"
	}
	return ty.Kind().String()
}

const (
	configTableStart = "<!-- The table below is generated from the config types and config/gpuscope.yml; GPUSCOPE_UPDATE_DOCS=1 go test . -run TestDocsConfiguration rewrites it. -->\n"
	configTableEnd   = "<!-- end of the generated table -->\n"
)

func configTable(keys []configKey) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default |\n|---|---|---|\n")
	for _, k := range keys {
		d := k.def
		switch {
		case d == "":
		case strings.HasPrefix(d, "("):
		default:
			d = "`" + strings.ReplaceAll(strings.ReplaceAll(d, "|", `\|`), "\n", " ") + "`"
		}
		ty := k.typ
		if ty == "section" {
			ty = "section"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.path, ty, d)
	}
	return b.String()
}

// TestDocsConfiguration: docs/configuration.md lists every key of the
// config file, with its type and the embedded default config's value, as
// the config types and config/gpuscope.yml have them.
func TestDocsConfiguration(t *testing.T) {
	const file = "docs/configuration.md"
	keys := configKeys(t)
	var paths []string
	for _, k := range keys {
		paths = append(paths, k.path)
	}
	for _, want := range []string{"global", "scrape_configs", "remote_write", "gpu.sim.gpus[].lost_at", "nodes.basic_auth", "self_metrics.families.alertmanager_detail", "workloads.passwd_file", "accounting.price_per_kwh"} {
		require.Contains(t, paths, want, "the walk reaches %s", want)
	}
	doc := string(mustRead(t, file))
	start, end := strings.Index(doc, configTableStart), strings.Index(doc, configTableEnd)
	require.True(t, start >= 0 && end > start, "%s has the generated table's markers", file)
	want := configTable(keys)
	if os.Getenv("GPUSCOPE_UPDATE_DOCS") != "" {
		doc = doc[:start+len(configTableStart)] + want + doc[end:]
		require.NoError(t, os.WriteFile(file, []byte(doc), 0o644))
		end = start + len(configTableStart) + len(want)
	}
	require.Equal(t, want, doc[start+len(configTableStart):end], "%s's table of keys is stale: GPUSCOPE_UPDATE_DOCS=1 go test . -run TestDocsConfiguration", file)
}

// TestReadmeAlerts: the README's table of alerts per group names exactly
// the pack's alerts, each in its group.
func TestReadmeAlerts(t *testing.T) {
	alerts, _, _ := loadPack(t)
	got := map[string]string{}
	for _, row := range tableRows(section(t, readme(t), "## Alerts")) {
		require.Len(t, row, 2, "row %v", row)
		group := backticked(row[0])[0]
		for _, name := range backticked(row[1]) {
			require.NotContains(t, got, name, "README lists %s twice", name)
			got[name] = group
		}
	}
	want := map[string]string{}
	for name, r := range alerts {
		want[name] = r.group
	}
	require.Equal(t, want, got, "README's table of alerts per group and the rule pack differ")
}

// TestContributingPackages: CONTRIBUTING.md's apt-get line installs what
// .ci/run installs.
func TestContributingPackages(t *testing.T) {
	pkgs := func(text string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?s)apt-get install -y (?:-qq )?((?:[a-z0-9.+-]+(?: |\\\n)+)*[a-z0-9.+-]+)`).FindAllStringSubmatch(text, -1) {
			out = append(out, strings.Fields(strings.ReplaceAll(m[1], "\\\n", " "))...)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	ci := string(mustRead(t, ".ci/run"))
	ci = strings.ReplaceAll(ci, "DEBIAN_FRONTEND=noninteractive ", "")
	want := pkgs(ci)
	require.Contains(t, want, "victoria-metrics")
	got := pkgs(string(mustRead(t, "CONTRIBUTING.md")))
	// .ci/run's first line installs gcc with libc6-dev, which gcc pulls in.
	want = slices.DeleteFunc(want, func(p string) bool { return p == "libc6-dev" })
	require.Equal(t, want, got, "CONTRIBUTING.md's apt-get line and .ci/run's differ")
}

// TestDocsFlagTables: the flags the docs' tables list are flags of the
// command they document (serve's in configuration.md, alerts.md and
// remote-write.md, the agent's in clusters.md), so a renamed or removed
// flag cannot stay documented. Every flag, with its default, is in the
// generated docs/command-line/gpuscope.md.
func TestDocsFlagTables(t *testing.T) {
	app, _, _ := newApp()
	for _, tc := range []struct{ file, heading, command string }{
		{"docs/configuration.md", "## Flags of `gpuscope serve`", "serve"},
		{"docs/alerts.md", "## Delivery to Alertmanager", "serve"},
		{"docs/remote-write.md", "### Receivers: pushing into gpuscope", "serve"},
		{"docs/clusters.md", "## On every GPU server: `gpuscope agent`", "agent"},
	} {
		cmd := app.GetCommand(tc.command)
		require.NotNil(t, cmd, tc.command)
		n := 0
		for _, row := range tableRows(section(t, string(mustRead(t, tc.file)), tc.heading)) {
			for _, f := range backticked(row[0]) {
				name, ok := strings.CutPrefix(f, "--")
				if !ok {
					continue
				}
				n++
				require.True(t, cmd.GetFlag(name) != nil || app.GetFlag(name) != nil, "%s lists %s, which `gpuscope %s` does not have", tc.file, f, tc.command)
			}
		}
		require.NotZero(t, n, "%s: the table under %q lists flags", tc.file, tc.heading)
	}
}
