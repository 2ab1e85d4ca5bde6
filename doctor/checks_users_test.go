package doctor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

func TestUsersCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	good := write("good", "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n")
	bad := write("bad", "root:x:0:0:root:/root:/bin/sh\nalice:x:1000\n# ok\nbob:x:x:1::/:/bin/sh\n")
	for _, tc := range []struct {
		name, file, status, summary, hint string
	}{
		{"readable", good, StatusOK, "user names from " + good + " (2 users; others show as uids)", ""},
		{"absent", filepath.Join(dir, "absent"), StatusWarn, "cannot read " + filepath.Join(dir, "absent") + ": open " + filepath.Join(dir, "absent") + ": no such file or directory: the user label shows uids, not names", "mount the host's root at /rootfs"},
		{"a directory", dir, StatusWarn, "is a directory: the user label shows uids, not names", "workloads.passwd_file"},
		{"malformed lines", bad, StatusWarn, bad + ": 2 malformed lines skipped (the first is line 2): their uids show as numbers; 1 users named", "pwck -r " + bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default(nil)
			cfg.Workloads.PasswdFile = tc.file
			o := Options{Config: cfg}.withDefaults()
			checks := userChecks(context.Background(), &o)
			require.Len(t, checks, 1)
			c := checks[0]
			require.Equal(t, "users", c.Name)
			require.Equal(t, tc.status, c.Status)
			require.Contains(t, c.Summary, tc.summary)
			require.Contains(t, c.Hint, tc.hint)
		})
	}
}
