package doctor

import (
	"context"
	"fmt"

	"github.com/gpuscope/gpuscope/workload"
)

// userChecks: the passwd file that names the user label's uids, read as
// the collectors read it (workload.Users).
func userChecks(_ context.Context, o *Options) []Check {
	return []Check{usersCheck(o.Config.Workloads)}
}

func usersCheck(cfg workload.Config) Check {
	path := workload.UsersOptions{PasswdFile: cfg.PasswdFile}.PasswdPath()
	names, malformed, err := workload.ReadPasswdFile(path)
	switch {
	case err != nil:
		return warn("users", fmt.Sprintf("cannot read %s: %v: the user label shows uids, not names", path, err),
			"in a container, mount the host's root at /rootfs (-v /:/rootfs:ro); or name a passwd file in workloads.passwd_file")
	case len(malformed) > 0:
		return warn("users", fmt.Sprintf("%s: %d malformed lines skipped (the first is line %d): their uids show as numbers; %d users named",
			path, len(malformed), malformed[0], len(names)),
			"fix those lines (pwck -r "+path+" lists them), or name another file in workloads.passwd_file")
	}
	return ok("users", fmt.Sprintf("user names from %s (%d users; others show as uids)", path, len(names)))
}
