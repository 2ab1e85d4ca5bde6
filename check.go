package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/scrape"
)

func checkConfigCommand(app *kingpin.Application) command {
	check := app.Command("check", "Check configuration and rule files.")
	c := check.Command("config", "Validate gpuscope config files; exit 0 if all are valid, 1 otherwise.")
	files := c.Arg("file", "Config file(s) to check.").Required().ExistingFiles()
	return command{clause: c, run: func(logger *slog.Logger) error {
		failed := 0
		for _, f := range *files {
			if err := checkConfig(f, logger); err != nil {
				fmt.Fprintf(os.Stderr, "FAILED: %s\n", err)
				failed++
				continue
			}
			fmt.Printf("SUCCESS: %s is valid gpuscope config\n", f)
		}
		if failed > 0 {
			// The reasons are printed above; exit non-zero without a log line.
			os.Exit(1)
		}
		return nil
	}}
}

// checkConfig runs the same validation serve runs at start and on reload.
func checkConfig(file string, logger *slog.Logger) error {
	cfg, err := config.LoadFile(file, logger)
	if err != nil {
		return err
	}
	if err := scrape.AddBuiltinJobs(cfg.Prometheus, builtinJobs(cfg, "localhost:0", "check")); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// builtinJobs says which built-in collectors a config turns on.
func builtinJobs(cfg *config.Config, address, instance string) scrape.Builtin {
	return scrape.Builtin{
		Address:  address,
		Instance: instance,
		Cadvisor: cfg.Cadvisor.Enabled,
		GPU:      cfg.GPU.Backend != gpu.BackendNone,
		Nodes:    cfg.Nodes,
	}
}
