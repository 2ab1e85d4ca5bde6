//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/rules"
)

// promtool runs the real promtool with args and returns its combined
// output and exit code.
func promtool(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(neighbourTools(t).Promtool, args...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// TestPromtoolChecksExportedRules: what `gpuscope rules export` writes,
// as the pack's files and as one file, passes the real `promtool check
// rules`, duplicate-rule lint included.
func TestPromtoolChecksExportedRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, code := run(t, "rules", "export", dir)
	require.Equal(t, 0, code, out)
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	require.NoError(t, err)
	require.Len(t, files, len(rules.Pack()))
	out, code = run(t, "rules", "export")
	require.Equal(t, 0, code)
	all := filepath.Join(t.TempDir(), "all.yml")
	require.NoError(t, os.WriteFile(all, []byte(out), 0o644))

	out, code = promtool(t, append([]string{"check", "rules", "--lint=all", "--lint-fatal", all}, files...)...)
	require.Equal(t, 0, code, out)
	require.Equal(t, len(files)+1, strings.Count(out, "SUCCESS"), out)
	require.NotContains(t, out, "FAILED", out)
}

// TestPromtoolTestsPack: the built-in pack's unit tests, which `go test
// ./rules/` runs with its Go runner, pass the real `promtool test rules`
// too, run against the files `gpuscope rules export` writes (the rules
// users get; their tests' rule_files are ../<file>.yml). The exported
// files are the repository's rules/pack/*.yml byte for byte, so this is
// also promtool over the tests in place, without a second 30-second run.
func TestPromtoolTestsPack(t *testing.T) {
	t.Parallel()
	tests, err := filepath.Glob(filepath.Join("..", "rules", "pack", "tests", "*.test.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, tests)

	dir := t.TempDir()
	out, code := run(t, "rules", "export", dir)
	require.Equal(t, 0, code, out)
	exported, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	require.NoError(t, err)
	require.Len(t, exported, len(rules.Pack()))
	for _, f := range exported {
		require.Equal(t, readFile(t, filepath.Join("..", "rules", "pack", filepath.Base(f))), readFile(t, f), f)
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "tests"), 0o755))
	var copies []string
	for _, f := range tests {
		c := filepath.Join(dir, "tests", filepath.Base(f))
		require.NoError(t, os.WriteFile(c, []byte(readFile(t, f)), 0o644))
		copies = append(copies, c)
	}
	out, code = promtool(t, append([]string{"test", "rules"}, copies...)...)
	require.Equal(t, 0, code, out)
	require.Equal(t, len(tests), strings.Count(out, "  SUCCESS"), out)

	// A failing unit test fails promtool: the runs above are not vacuous.
	broken := strings.Replace(readFile(t, filepath.Join("..", "rules", "pack", "tests", "gpu.test.yml")), "severity: warning", "severity: page", 1)
	b := filepath.Join(dir, "tests", "broken.test.yml")
	require.NoError(t, os.WriteFile(b, []byte(broken), 0o644))
	out, code = promtool(t, "test", "rules", b)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "FAILED")
	require.Contains(t, out, "severity=\"page\"")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// ruleFileErrors returns the errors a checker's output gives for file,
// each as the text after "<file>: " (promtool and gpuscope word what
// comes before differently: "Checking f\n  FAILED:\nf: 5:15: ..." and
// "FAILED: rule files: f: 5:15: ...").
func ruleFileErrors(out, file string) []string {
	var errs []string
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, file+": "); i >= 0 {
			errs = append(errs, strings.TrimSpace(line[i+len(file)+2:]))
		}
	}
	slices.Sort(errs)
	return slices.Compact(errs)
}

// TestPromtoolRejectsAsGpuscope: a user rule file that `promtool check
// rules` rejects, `gpuscope check rules` rejects too, with the same
// errors (file, line, column, group, rule and what is wrong); and the
// good file both accept.
func TestPromtoolRejectsAsGpuscope(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		rules string
		// why must match what each says about the file; nil for a file
		// both accept.
		why *regexp.Regexp
	}{
		{
			name: "good",
			rules: `groups:
  - name: user
    rules:
      - alert: GPUHot
        expr: DCGM_FI_DEV_GPU_TEMP > 90
        for: 5m
        labels: {severity: critical}
        annotations:
          summary: GPU {{ $labels.gpu }} on {{ $labels.instance }} is at {{ $value }}°C
`,
		},
		{
			name: "bad PromQL",
			rules: `groups:
  - name: user
    rules:
      - alert: GPUBusy
        expr: sum(rate(DCGM_FI_DEV_GPU_UTIL[5m])
`,
			why: regexp.MustCompile(`: 5:15: group "user", rule 1, "GPUBusy": could not parse expression: .*unclosed left parenthesis`),
		},
		{
			name: "unknown function",
			rules: `groups:
  - name: user
    rules:
      - record: gpu:util:avg
        expr: averge_over_time(DCGM_FI_DEV_GPU_UTIL[5m])
`,
			why: regexp.MustCompile(`"gpu:util:avg": could not parse expression: .*unknown function with name "averge_over_time"`),
		},
		{
			name: "duplicate group name",
			rules: `groups:
  - name: user
    rules:
      - record: a:b
        expr: vector(1)
  - name: user
    rules:
      - record: c:d
        expr: vector(2)
`,
			why: regexp.MustCompile(`groupname: "user" is repeated in the same file`),
		},
		{
			name: "bad for",
			rules: `groups:
  - name: user
    rules:
      - alert: GPUHot
        expr: DCGM_FI_DEV_GPU_TEMP > 90
        for: 5 minutes
`,
			why: regexp.MustCompile(`unknown unit " minutes" in duration "5 minutes"`),
		},
		{
			name: "template error in annotation",
			rules: `groups:
  - name: user
    rules:
      - alert: GPUHot
        expr: DCGM_FI_DEV_GPU_TEMP > 90
        annotations:
          summary: 'GPU {{ if $labels.gpu }}{{ $labels.gpu }} is hot'
`,
			why: regexp.MustCompile(`rule 1, "GPUHot": annotation "summary": template: __alert_GPUHot:1: unexpected EOF`),
		},
		{
			name: "undefined template function",
			rules: `groups:
  - name: user
    rules:
      - alert: GPUHot
        expr: DCGM_FI_DEV_GPU_TEMP > 90
        annotations:
          summary: '{{ $value | humanise }}°C'
`,
			why: regexp.MustCompile(`rule 1, "GPUHot": annotation "summary": template: __alert_GPUHot:1: function "humanise" not defined`),
		},
		{
			// Both accept UTF-8 metric names, as Prometheus 3 does.
			name: "record name with a space",
			rules: `groups:
  - name: user
    rules:
      - record: 'gpu util'
        expr: DCGM_FI_DEV_GPU_UTIL
`,
		},
		{
			name: "for on a recording rule",
			rules: `groups:
  - name: user
    rules:
      - record: gpu:util
        expr: DCGM_FI_DEV_GPU_UTIL
        for: 5m
`,
			why: regexp.MustCompile(`rule 1, "gpu:util": invalid field 'for' in recording rule`),
		},
		{
			name: "neither alert nor record",
			rules: `groups:
  - name: user
    rules:
      - expr: DCGM_FI_DEV_GPU_UTIL
`,
			why: regexp.MustCompile(`one of 'record' or 'alert' must be set`),
		},
		{
			name: "alert and record",
			rules: `groups:
  - name: user
    rules:
      - alert: GPUHot
        record: gpu:hot
        expr: DCGM_FI_DEV_GPU_TEMP > 90
`,
			why: regexp.MustCompile(`only one of 'record' and 'alert' must be set`),
		},
		{
			name: "unknown field",
			rules: `groups:
  - name: user
    rules:
      - alert: GPUHot
        expr: DCGM_FI_DEV_GPU_TEMP > 90
        severity: critical
`,
			why: regexp.MustCompile(`yaml: unmarshal errors:\n\s+line 6: field severity not found in type rulefmt.Rule`),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yml")
			require.NoError(t, os.WriteFile(f, []byte(tc.rules), 0o644))
			pOut, pCode := promtool(t, "check", "rules", f)
			gOut, gCode := run(t, "check", "rules", f)
			if tc.why == nil {
				require.Equal(t, 0, pCode, pOut)
				require.Equal(t, 0, gCode, gOut)
				return
			}
			require.Equal(t, 1, pCode, "promtool accepts it:\n%s", pOut)
			require.Equal(t, 1, gCode, "gpuscope accepts it:\n%s", gOut)
			pErrs, gErrs := ruleFileErrors(pOut, f), ruleFileErrors(gOut, f)
			require.NotEmpty(t, pErrs, "promtool's errors do not name the file:\n%s", pOut)
			require.Equal(t, pErrs, gErrs, "promtool:\n%s\ngpuscope:\n%s", pOut, gOut)
			require.Regexp(t, tc.why, pOut, "promtool")
			require.Regexp(t, tc.why, gOut, "gpuscope")
		})
	}
}
