package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/config"
)

// alertmanagerExportCommand is `gpuscope alertmanager export [FILE]`: the
// embedded Alertmanager's config as the alertmanager.yml it is (the
// alertmanager: section, or its config_file, with gpuscope's default
// route where gpuscope added it), for `amtool check-config`, for a
// standalone Alertmanager, or to start a section from.
func alertmanagerExportCommand(cli *kingpin.Application) command {
	c := cli.Command("alertmanager", "The embedded Alertmanager.").
		Command("export", "Print the alertmanager.yml the embedded Alertmanager runs (the config file's alertmanager: section, with gpuscope's default route when it has none), or write it to FILE.")
	file := c.Arg("file", "File to write (default: stdout).").String()
	configFile := c.Flag("config.file", "gpuscope config file, as given to serve. Empty: the embedded defaults (no receiver).").String()
	return command{clause: c, run: func(logger *slog.Logger) error {
		cfg, err := config.Loader{File: *configFile, Logger: logger}.Load()
		if err != nil {
			return fmt.Errorf("load config: %w", err)
		}
		text := []byte(cfg.Alertmanager.Text)
		if *file == "" {
			_, err = os.Stdout.Write(text)
			return err
		}
		if err := os.WriteFile(*file, text, 0o600); err != nil {
			return fmt.Errorf("write alertmanager config: %w", err)
		}
		return nil
	}}
}
