package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/config"
)

func checkConfigCommand(cli *kingpin.Application) command {
	check := cli.Command("check", "Check configuration and rule files.")
	c := check.Command("config", "Validate gpuscope config files; exit 0 if all are valid, 1 otherwise.")
	files := c.Arg("file", "Config file(s) to check.").Required().ExistingFiles()
	return command{clause: c, run: func(logger *slog.Logger) error {
		if failed := checkConfigFiles(*files, os.Stdout, os.Stderr, logger); failed > 0 {
			// The reasons are printed above; exit non-zero without a log line.
			os.Exit(1)
		}
		return nil
	}}
}

// checkConfigFiles checks each file as serve loads it, on start and on
// reload: SUCCESS on stdout,
// FAILED with every error (file:line: key: what) or WARNING on stderr. It
// returns how many files failed.
func checkConfigFiles(files []string, stdout, stderr io.Writer, logger *slog.Logger) (failed int) {
	for _, f := range files {
		cfg, err := config.Loader{File: f, Logger: logger}.Load()
		if err != nil {
			// One error per line, below the first.
			fmt.Fprintf(stderr, "FAILED: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n        "))
			failed++
			continue
		}
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stderr, "WARNING: %s\n", w)
		}
		fmt.Fprintf(stdout, "SUCCESS: %s is valid gpuscope config\n", f)
	}
	return failed
}
