package main

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/require"
)

func TestSetMemLimit(t *testing.T) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		t.Skip("GOMEMLIMIT is set in the environment")
	}
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	const gib = 1 << 30
	noCgroup := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	for _, tc := range []struct {
		name      string
		flags     memLimitFlags
		env       string
		cgroup    memlimit.Provider
		system    memlimit.Provider
		want      int64
		wantLog   string
		wantErr   string
		unchanged bool
	}{
		{name: "cgroup limit", flags: memLimitFlags{auto: true, ratio: 0.9}, cgroup: memlimit.Limit(2 * gib),
			want: 1932735283, wantLog: `from=cgroup limit="2.0 GiB" ratio=0.9`},
		{name: "ratio", flags: memLimitFlags{auto: true, ratio: 0.5}, cgroup: memlimit.Limit(2 * gib),
			want: gib, wantLog: `GOMEMLIMIT="1.0 GiB" bytes=1073741824`},
		{name: "no cgroup limit: system memory", flags: memLimitFlags{auto: true, ratio: 0.9}, cgroup: noCgroup, system: memlimit.Limit(10 * gib),
			want: 9663676416, wantLog: `from="system memory"`},
		{name: "nothing found", flags: memLimitFlags{auto: true, ratio: 0.9}, cgroup: noCgroup, system: func() (uint64, error) { return 0, errors.New("no /proc") },
			unchanged: true, wantLog: "No memory limit found"},
		{name: "off", flags: memLimitFlags{auto: false, ratio: 0.9}, cgroup: memlimit.Limit(gib), unchanged: true, wantLog: "--no-auto-gomemlimit"},
		{name: "environment wins", flags: memLimitFlags{auto: true, ratio: 0.9}, env: "300MiB", cgroup: memlimit.Limit(gib), unchanged: true, wantLog: "GOMEMLIMIT set by the environment"},
		{name: "ratio 0", flags: memLimitFlags{auto: true, ratio: 0}, wantErr: "--auto-gomemlimit.ratio must be above 0 and at most 1, got 0"},
		{name: "ratio above 1", flags: memLimitFlags{auto: true, ratio: 1.5}, wantErr: "got 1.5"},
		{name: "ratio NaN", flags: memLimitFlags{auto: true, ratio: math.NaN()}, wantErr: "got NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
			}
			debug.SetMemoryLimit(math.MaxInt64)
			var logs bytes.Buffer
			err := setMemLimit(&tc.flags, slog.New(slog.NewTextHandler(&logs, nil)), tc.cgroup, tc.system)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			want := tc.want
			if tc.unchanged {
				want = math.MaxInt64
			}
			require.Equal(t, want, debug.SetMemoryLimit(-1))
			require.Contains(t, logs.String(), tc.wantLog)
		})
	}
}
