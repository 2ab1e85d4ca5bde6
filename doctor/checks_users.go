package doctor

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuscope/gpuscope/workload"
)

// userChecks: the passwd file that names the user label's uids, read as
// the collectors read it (workload.Users).
func userChecks(_ context.Context, o *Options) []Check {
	return []Check{usersCheck(o.Config.Workloads)}
}

// unnamedUsersCheck asks the running gpuscope which users its series show
// as uids: the uids the passwd it reads does not name (read on the
// nodes, by the service, where this doctor may see another file). One of
// applianceChecks, run once the appliance answers; found is false where
// every user has a name (the users check says where names come from).
func unnamedUsersCheck(ctx context.Context, o *Options) (c Check, found bool) {
	const name = "users/unnamed"
	var res struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
		} `json:"result"`
	}
	q := `group by (instance, user) (container_last_seen{user=~"[0-9]+"} or gpuscope_gpu_container_processes{user=~"[0-9]+"})`
	if err := apiGet(ctx, o, "/api/v1/query", url.Values{"query": {q}}, &res); err != nil {
		return warn(name, "cannot ask the running gpuscope for its users: "+err.Error(), "see gpuscope's log; the query is "+q), true
	}
	byUID := map[string][]string{}
	for _, r := range res.Result {
		uid := r.Metric["user"]
		if inst := r.Metric["instance"]; !slices.Contains(byUID[uid], inst) {
			byUID[uid] = append(byUID[uid], inst)
		}
	}
	if len(byUID) == 0 {
		return Check{}, false
	}
	var list []string
	for _, uid := range slices.SortedFunc(maps.Keys(byUID), func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return cmp.Compare(x, y)
	}) {
		slices.Sort(byUID[uid])
		list = append(list, uid+" (on "+strings.Join(byUID[uid], ", ")+")")
	}
	return warn(name, fmt.Sprintf("%d users show as uids, which the passwd gpuscope reads does not name: %s; their workloads are reported and grouped by uid",
		len(list), strings.Join(list, "; ")),
		"directory users (LDAP, SSSD) are not in /etc/passwd and gpuscope never calls NSS: on each node, point workloads.passwd_file at a copy kept fresh (getent passwd > /var/lib/gpuscope/passwd, from cron)"), true
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
