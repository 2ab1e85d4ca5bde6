package main

import (
	"runtime/debug"
	"testing"

	"github.com/prometheus/common/version"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
)

func TestStampVersion(t *testing.T) {
	for _, tc := range []struct {
		name              string
		bi                debug.BuildInfo
		stamped           string
		wantVersion, date string
	}{
		{name: "go build without VCS information", bi: debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, wantVersion: app.FallbackVersion},
		{name: "go install at a tag", bi: debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, wantVersion: "0.3.1"},
		{
			name:        "go build in a clone",
			bi:          debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}}},
			wantVersion: app.FallbackVersion, date: "2026-11-30T10:00:00Z",
		},
		{name: "packaging's -ldflags win", bi: debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, stamped: "0.4.0", wantVersion: "0.4.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldV, oldD := version.Version, version.BuildDate
			t.Cleanup(func() { version.Version, version.BuildDate = oldV, oldD })
			version.Version, version.BuildDate = tc.stamped, ""
			stampVersion(&tc.bi)
			require.Equal(t, tc.wantVersion, version.Version)
			require.Equal(t, tc.date, version.BuildDate)
		})
	}
}
