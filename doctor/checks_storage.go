package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/alecthomas/units"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/storage"
)

// minFree is the free space below which the data directory is a warning
// whatever the retention: a day of a few GPU nodes' samples.
const minFree = 1 << 30

// storageChecks: the data directory can be written, and its disk holds
// what the retention keeps.
func storageChecks(_ context.Context, o *Options) []Check {
	return []Check{dataDirCheck(o)}
}

func dataDirCheck(o *Options) Check {
	const name = "data-dir"
	dir := o.DataDir
	st, err := os.Stat(dir)
	exists := err == nil
	switch {
	case exists && !st.IsDir():
		return fail(name, dir+" is not a directory", "remove it or give --storage.tsdb.path another path")
	case err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return fail(name, fmt.Sprintf("cannot look at %s: %v", dir, err), "give gpuscope's user access to it, or --storage.tsdb.path another path")
	}
	// Where the directory is or will be: the nearest existing parent.
	at := dir
	if !exists {
		for {
			parent := filepath.Dir(at)
			if _, err := os.Stat(parent); err == nil || parent == at {
				at = parent
				break
			}
			at = parent
		}
		if st, err := os.Stat(at); err != nil || !st.IsDir() {
			return fail(name, fmt.Sprintf("%s cannot be created: %s is not a directory", dir, at), "give --storage.tsdb.path a path under a directory")
		}
	}
	if err := writable(at, exists); err != nil {
		what := dir + " is not writable"
		if !exists {
			what = fmt.Sprintf("%s cannot be created: %s is not writable", dir, at)
		}
		return fail(name, fmt.Sprintf("%s (%v)", what, err),
			"give gpuscope's user the directory (chown), mount it read-write, or give --storage.tsdb.path another path")
	}
	var fsStat unix.Statfs_t
	if err := unix.Statfs(at, &fsStat); err != nil {
		return warn(name, fmt.Sprintf("%s is writable; free space unknown: %v", dir, err), "")
	}
	free := int64(fsStat.Bavail) * int64(fsStat.Bsize)
	total := int64(fsStat.Blocks) * int64(fsStat.Bsize)
	used := int64(0)
	if exists {
		used = dirSize(dir)
	}
	where := dir
	if !exists {
		where += " (to be created)"
	}
	summary := fmt.Sprintf("%s writable, %s free of %s", where, bytesString(free), bytesString(total))
	if used > 0 {
		summary += fmt.Sprintf(", TSDB %s", bytesString(used))
	}
	limit := o.RetentionSize
	limitName := "storage.tsdb.retention.size " + bytesString(limit)
	if s := o.Config.Prometheus.StorageConfig.TSDBConfig; s != nil && s.Retention != nil && s.Retention.Percentage > 0 {
		if p := int64(s.Retention.Percentage / 100 * float64(total)); limit == 0 || p < limit {
			limit, limitName = p, fmt.Sprintf("storage.tsdb.retention.percentage %g%% (%s)", s.Retention.Percentage, bytesString(p))
		}
	}
	switch {
	case limit > 0 && free+used < limit:
		return warn(name, fmt.Sprintf("%s; %s does not fit: the disk fills before retention deletes anything", summary, limitName),
			fmt.Sprintf("lower the retention size below %s, or free space on the disk", bytesString(free+used)))
	case free < minFree:
		return warn(name, summary+": under "+bytesString(minFree)+" free",
			"free space on the disk, or set storage.tsdb.retention.size so the TSDB stays within it")
	case limit > 0:
		return ok(name, summary+"; "+limitName+" fits")
	}
	return ok(name, summary+"; no size limit (storage.tsdb.retention.size 0): retention time alone bounds it")
}

// writable tries what serve will do in dir: create a file (dir is the
// data directory) or a directory (dir is where the data directory will
// be made), and removes it again. A real try, not access(2), which says
// yes to root on filesystems that refuse (sysfs, an immutable directory).
func writable(dir string, isDataDir bool) error {
	var (
		name string
		err  error
	)
	if isDataDir {
		var f *os.File
		if f, err = os.CreateTemp(dir, ".gpuscope-doctor-*"); err == nil {
			name = f.Name()
			err = f.Close()
		}
	} else {
		name, err = os.MkdirTemp(dir, ".gpuscope-doctor-*")
	}
	if name == "" {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	}
	return errors.Join(err, os.Remove(name))
}

// dirSize adds up the sizes of the files below dir, as the TSDB counts
// its retention size (blocks, WAL, head chunks), leaving out serve's
// disk reserve.
func dirSize(dir string) int64 {
	var n int64
	reserve := filepath.Join(dir, storage.ReserveFile)
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && path != reserve {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func bytesString(n int64) string {
	return units.Base2Bytes(n).Round(1).String()
}

// listenChecks: serve's listen address is free, or held by a gpuscope.
func listenChecks(ctx context.Context, o *Options) []Check {
	return []Check{listenCheck(ctx, o)}
}

func listenCheck(ctx context.Context, o *Options) Check {
	const name = "listen"
	addr := o.ListenAddress
	l, err := net.Listen("tcp", addr)
	if err == nil {
		l.Close()
		return ok(name, addr+" is free")
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		_, port, _ := net.SplitHostPort(addr)
		switch gpuscopeAt(ctx, o, addr) {
		case holderGpuscope:
			return ok(name, addr+" is in use by a running gpuscope")
		case holderAuth:
			return warn(name, addr+" is in use by a server that asks for a password (a gpuscope with --web.config.file?)",
				fmt.Sprintf("if it is not gpuscope, stop it (`ss -ltnp 'sport = :%s'` names it) or choose another port with --web.listen-address", port))
		}
		return fail(name, addr+" is in use by another program: serve cannot start",
			fmt.Sprintf("stop it (`ss -ltnp 'sport = :%s'` names it), or choose another port with --web.listen-address or web.listen_address", port))
	case errors.Is(err, syscall.EACCES):
		return fail(name, fmt.Sprintf("%s: permission denied", addr),
			"ports below 1024 need root or CAP_NET_BIND_SERVICE: choose a port of 1024 or above with --web.listen-address")
	}
	return fail(name, fmt.Sprintf("cannot listen on %s: %v", addr, err), "give --web.listen-address an address of this machine (e.g. 0.0.0.0:9089)")
}

// Who holds a port: unknown, a gpuscope, or a server asking for a
// password (a gpuscope with basic auth, or not).
const (
	holderUnknown = iota
	holderGpuscope
	holderAuth
)

// gpuscopeAt asks whoever listens at addr for /-/healthy, as a gpuscope
// answers it ("gpuscope is Healthy.").
func gpuscopeAt(ctx context.Context, o *Options, addr string) int {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return holderUnknown
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	for _, scheme := range []string{"http", "https"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, port)+"/-/healthy", nil)
		if err != nil {
			return holderUnknown
		}
		resp, err := o.Client.Do(req)
		if err != nil {
			continue
		}
		var buf [64]byte
		n, _ := io.ReadFull(resp.Body, buf[:])
		resp.Body.Close()
		switch {
		case strings.HasPrefix(string(buf[:n]), "gpuscope"):
			return holderGpuscope
		case resp.StatusCode == http.StatusUnauthorized:
			return holderAuth
		}
		return holderUnknown
	}
	return holderUnknown
}
