//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/rules"
)

const badRules = `groups:
  - name: e2e
    rules:
      - alert: E2EAlwaysFiring
        expr: sum(rate(up[5m])
`

// TestRulesCheckConfig: a rule file with a syntax error fails check
// config and stops serve, which exits non-zero, naming file and line; a
// valid one passes (app's TestRulesBadInputAndReload has the reload).
func TestRulesCheckConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(badRules), 0o644))
	cfgFile := writeConfig(t, dir, "rule_files: [rules.yml]\n")

	out, code := run(t, "check", "config", cfgFile)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, rulesFile+": 5:15:")
	require.Contains(t, out, "unclosed left parenthesis")

	q := start(t, "serve", "--web.listen-address=127.0.0.1:0", "--storage.tsdb.path="+filepath.Join(dir, "refused"), "--config.file="+cfgFile)
	require.NotEqual(t, 0, q.wait(30*time.Second))
	require.Contains(t, q.out.String(), rulesFile+": 5:15:")

	require.NoError(t, os.WriteFile(rulesFile, []byte("groups:\n  - name: e2e\n    rules:\n      - alert: E2EAlwaysFiring\n        expr: vector(1)\n"), 0o644))
	out, code = run(t, "check", "config", cfgFile)
	require.Equal(t, 0, code, out)
}

// TestRulesExport: the built-in pack comes out as rule files that
// `check rules` accepts.
func TestRulesExport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, code := run(t, "rules", "export", dir)
	require.Equal(t, 0, code, out)
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	require.NoError(t, err)
	require.Len(t, files, len(rules.Pack()), "one file per file of the built-in pack")
	all := filepath.Join(t.TempDir(), "all.yml")
	out, code = run(t, "rules", "export")
	require.Equal(t, 0, code)
	require.NoError(t, os.WriteFile(all, []byte(out), 0o644))
	out, code = run(t, append([]string{"check", "rules", all}, files...)...)
	require.Equal(t, 0, code, out)
	require.Equal(t, len(files)+1, strings.Count(out, "SUCCESS"), out)
}
