package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/scrape"
)

// FuzzLoad feeds the config loader arbitrary files: it must answer every
// one with a config or an error, never panic or hang, and a config it
// accepts must take the next steps serve takes (the built-in jobs, the
// components' own validation), and the schema walk that explains errors
// must find no error in it. Seeds are in testdata/fuzz/FuzzLoad; run
//
//	go test -run '^$' -fuzz '^FuzzLoad$' -fuzztime 1m ./config
func FuzzLoad(f *testing.F) {
	f.Add(DefaultFile())
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load(data, "fuzz.yml", nil)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotNil(t, cfg.Prometheus)
		// The walk that explains errors finds nothing wrong in a file the
		// decoders take.
		p, err := split(data)
		require.NoError(t, err)
		require.Empty(t, walkFile(p.root).errs)
		require.NoError(t, cfg.GPU.Validate())
		require.NoError(t, cfg.Cadvisor.Validate())
		require.Positive(t, cfg.ScrapeInterval())
		_ = scrape.AddBuiltinJobs(cfg.Prometheus, scrape.Builtin{
			Address:  "localhost:9089",
			Instance: "fuzz",
			Cadvisor: cfg.Cadvisor.Enabled,
			GPU:      cfg.GPU.Backend != gpu.BackendNone,
			Nodes:    cfg.Nodes,
		})
	})
}
