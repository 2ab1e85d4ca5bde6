package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/stretchr/testify/require"
)

// TestCommandLineDocs: the committed command-line reference and man page
// are what the flags generate, as Prometheus checks docs/command-line/.
// After changing a flag, regenerate them:
//
//	go run . --write-documentation > docs/command-line/gpuscope.md
//	go run . --write-man-page > docs/gpuscope.1
func TestCommandLineDocs(t *testing.T) {
	for _, tc := range []struct {
		file string
		gen  func(*kingpin.Application, *kingpin.ParseContext, io.Writer) error
		flag string
	}{
		{"docs/command-line/gpuscope.md", writeMarkdown, "--write-documentation"},
		{"docs/gpuscope.1", writeManPage, "--write-man-page"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			app, _, _ := newApp()
			ctx, err := app.ParseContext(nil)
			require.NoError(t, err)
			var got bytes.Buffer
			require.NoError(t, tc.gen(app, ctx, &got))
			want, err := os.ReadFile(tc.file)
			require.NoError(t, err)
			require.Equal(t, string(want), got.String(), "%s is stale: regenerate it with `go run . %s > %s`", tc.file, tc.flag, tc.file)
		})
	}
}
