package storage

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLockRefusesASecondHolder(t *testing.T) {
	dir := t.TempDir()
	r, err := Lock(dir)
	require.NoError(t, err)
	_, err = Lock(dir)
	require.ErrorContains(t, err, "lock data directory "+dir)
	require.ErrorContains(t, err, "is another gpuscope")
	require.NoError(t, r.Release())
	r, err = Lock(dir)
	require.NoError(t, err, "lock is free again after release")
	require.NoError(t, r.Release())
}

// TestLockErrorsSayWhatIsWrong: each way a data directory can be unusable
// gets its own reason, and none of them blames another gpuscope.
func TestLockErrorsSayWhatIsWrong(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.WriteFile(file, nil, 0o644))

	t.Run("a file, not a directory", func(t *testing.T) {
		_, err := Lock(file)
		require.ErrorContains(t, err, "lock data directory "+file)
		require.ErrorContains(t, err, "not a directory")
		require.NotContains(t, err.Error(), "another gpuscope")
	})
	t.Run("below a file", func(t *testing.T) {
		_, err := Lock(filepath.Join(file, "sub"))
		require.ErrorContains(t, err, "not a directory")
		require.NotContains(t, err.Error(), "another gpuscope")
	})
	t.Run("read-only file system", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("mounting a read-only tmpfs needs root")
		}
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
			t.Skipf("the kernel refused a read-only tmpfs: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = syscall.Unmount(mnt, 0) })
		_, err := Lock(filepath.Join(mnt, "data"))
		require.ErrorContains(t, err, "read-only file system; choose a writable --storage.tsdb.path")
		require.NotContains(t, err.Error(), "another gpuscope")
	})
	t.Run("not writable by this user", func(t *testing.T) {
		base, err := os.MkdirTemp("", "gpuscope-lock")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(base) })
		require.NoError(t, os.Chmod(base, 0o755))
		dir := filepath.Join(base, "data")
		require.NoError(t, os.Mkdir(dir, 0o755))
		if os.Geteuid() != 0 {
			require.NoError(t, os.Chmod(dir, 0o500))
			_, err := Lock(dir)
			require.ErrorContains(t, err, "not writable by user")
			return
		}
		// Root writes anywhere: ask as nobody, in a child process run from
		// a copy of this test binary that nobody can reach.
		self, err := os.ReadFile(os.Args[0])
		require.NoError(t, err)
		bin := filepath.Join(base, "storage.test")
		require.NoError(t, os.WriteFile(bin, self, 0o755))
		cmd := exec.Command(bin, "-test.run=^TestLockAsHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "GPUSCOPE_LOCK_DIR="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "not writable by user nobody (uid 65534); chown it to that user or choose another --storage.tsdb.path")
		require.NotContains(t, string(out), "another gpuscope")
	})
}

// TestLockAsHelper is the child of "not writable by this user": it reports
// the error Lock gives for GPUSCOPE_LOCK_DIR as the user it runs as.
func TestLockAsHelper(t *testing.T) {
	dir := os.Getenv("GPUSCOPE_LOCK_DIR")
	if dir == "" {
		t.Skip("run by TestLockErrorsSayWhatIsWrong only")
	}
	_, err := Lock(dir)
	require.Error(t, err)
	t.Log(err.Error())
}
