package main

import (
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/rules"
)

// The README is what a newcomer reads first, and docs/ what a user looks
// things up in; these tests keep the parts of them that restate the code —
// the config reference, the rule tables, the quick start and the test
// command — equal to the code.

func readme(t *testing.T) string {
	t.Helper()
	return string(mustRead(t, "README.md"))
}

// section returns a document's text from the heading to the next heading
// of the same or a higher level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "no heading %q", heading)
	rest := doc[i+len(heading)+2:]
	level := strings.Count(strings.Fields(heading)[0], "#")
	for _, l := range regexp.MustCompile(`(?m)^#{1,6} `).FindAllStringIndex(rest, -1) {
		if h := rest[l[0]:]; strings.Count(strings.Fields(h)[0], "#") <= level {
			return rest[:l[0]]
		}
	}
	return rest
}

// codeBlocks returns the fenced code blocks of text with the given info
// string (e.g. "yaml", "sh").
func codeBlocks(text, lang string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?ms)^```"+regexp.QuoteMeta(lang)+"\n(.*?)^```").FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// tableRows returns the cells of the markdown table rows in text, header
// and separator rows left out.
func tableRows(text string) [][]string {
	var rows [][]string
	header := true
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			header = true
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header {
			header = false // the header row; the separator follows
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows = append(rows, cells)
	}
	return rows
}

func backticked(cell string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestReadmeConfigReference: docs/configuration.md's config reference has
// the same keys and values as config/gpuscope.yml, the file the binary
// embeds.
func TestReadmeConfigReference(t *testing.T) {
	doc := string(mustRead(t, "docs/configuration.md"))
	i := strings.Index(doc, "The reference, with every default, is the embedded default file")
	require.GreaterOrEqual(t, i, 0)
	blocks := codeBlocks(doc[i:], "yaml")
	require.NotEmpty(t, blocks)
	var fromReadme, fromFile map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(blocks[0]), &fromReadme))
	file, err := os.ReadFile("config/gpuscope.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(file, &fromFile))
	require.Equal(t, fromFile, fromReadme, "docs/configuration.md's config reference and config/gpuscope.yml differ")
}

type packRule struct {
	group, severity, forText string
}

func loadPack(t *testing.T) (alerts, records map[string]packRule, files []string) {
	t.Helper()
	alerts, records = map[string]packRule{}, map[string]packRule{}
	for _, f := range rules.Pack() {
		files = append(files, f.Name)
		groups, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		require.Empty(t, errs, f.Name)
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					records[r.Record] = packRule{group: g.Name}
					continue
				}
				forText := "—"
				if r.For != 0 {
					forText = r.For.String()
				}
				alerts[r.Alert] = packRule{group: g.Name, severity: r.Labels["severity"], forText: forText}
			}
		}
	}
	return alerts, records, files
}

// TestReadmeRuleTables: every built-in alert is in docs/alerts.md's alert
// table with its group, for and severity, every recording rule in the
// recording-rule table with its group, nothing else is, and the listed
// rule files are those `gpuscope rules export DIR` writes.
func TestReadmeRuleTables(t *testing.T) {
	doc := string(mustRead(t, "docs/alerts.md"))
	alerts, records, files := loadPack(t)

	seen := map[string]bool{}
	for _, row := range tableRows(section(t, doc, "## The alerts")) {
		require.Len(t, row, 5, "alert table row %v", row)
		name := strings.Trim(row[0], "`")
		want, ok := alerts[name]
		require.True(t, ok, "docs/alerts.md lists alert %s, which the pack does not have", name)
		require.Equal(t, "`"+want.group+"`", row[1], "group of %s", name)
		forText := strings.NewReplacer("–", "—", "-", "—").Replace(row[3])
		require.Equal(t, want.forText, forText, "for of %s", name)
		require.Equal(t, want.severity, row[4], "severity of %s", name)
		seen[name] = true
	}
	for name := range alerts {
		require.True(t, seen[name], "alert %s is missing from docs/alerts.md's alert table", name)
	}

	seen = map[string]bool{}
	recordName := regexp.MustCompile(`^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`)
	for _, row := range tableRows(section(t, doc, "## Recording rules")) {
		if len(row) != 3 {
			continue // the bottleneck-class table
		}
		groups := backticked(row[1])
		if len(groups) != 1 || !strings.HasPrefix(groups[0], "gpuscope.") {
			continue
		}
		for _, name := range backticked(row[0]) {
			if !recordName.MatchString(name) {
				continue
			}
			want, ok := records[name]
			require.True(t, ok, "docs/alerts.md lists recording rule %s, which the pack does not have", name)
			require.Equal(t, want.group, groups[0], "group of %s", name)
			seen[name] = true
		}
	}
	var missing []string
	for name := range records {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "recording rules missing from docs/alerts.md's table")

	m := regexp.MustCompile(`gpuscope rules export rules/ +# its files: (.*)`).FindStringSubmatch(doc)
	require.NotNil(t, m, "docs/alerts.md shows the files of `gpuscope rules export rules/`")
	listed := strings.Fields(m[1])
	slices.Sort(listed)
	slices.Sort(files)
	require.Equal(t, files, listed)
}

// TestReadmeCommands: the two commands this project stands by, in the
// README's quick start and contributing sections and in CONTRIBUTING.md:
// building first (so stopping the binary stops gpuscope; `go run` leaves
// its child running when the go tool alone is signalled) and the test
// command that .ci/run runs, word for word.
func TestReadmeCommands(t *testing.T) {
	const build = "go build -o gpuscope . && ./gpuscope serve\n"
	const test = "scripts/test\n"
	doc := readme(t)
	quick := codeBlocks(section(t, doc, "## Quick start"), "sh")
	require.NotEmpty(t, quick)
	require.Equal(t, build, quick[0], "README's quick start builds, then runs")
	contributing := codeBlocks(section(t, doc, "## Contributing"), "sh")
	require.NotEmpty(t, contributing)
	require.Equal(t, test, contributing[0], "README's test command")

	running := codeBlocks(section(t, string(mustRead(t, "CONTRIBUTING.md")), "## Running the tests"), "sh")
	require.GreaterOrEqual(t, len(running), 2)
	require.Equal(t, build, running[0], "CONTRIBUTING.md's build-and-run command")
	require.Equal(t, test, running[1], "CONTRIBUTING.md's test command")

	ci := string(mustRead(t, ".ci/run"))
	lines := strings.Split(strings.TrimSpace(ci), "\n")
	require.Equal(t, strings.TrimSpace(test), lines[len(lines)-1], ".ci/run ends with the README's test command")
}
