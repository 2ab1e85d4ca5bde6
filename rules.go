package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/rules"
)

// rulesExportCommand is `gpuscope rules export [DIR]`: the built-in rule
// pack as the Prometheus rule files it is, to read, to copy a rule from
// before overriding it, or to load into another Prometheus.
func rulesExportCommand(cli *kingpin.Application) command {
	c := cli.Command("rules", "The built-in alerting and recording rules.").
		Command("export", "Print the built-in rules as one Prometheus rule file, or write the pack's files into DIR.")
	dir := c.Arg("dir", "Directory to write the rule files into (created if missing). Default: print one file to stdout.").String()
	return command{clause: c, run: func(*slog.Logger) error {
		if *dir == "" {
			_, err := os.Stdout.Write(rules.PackAsOneFile())
			return err
		}
		return printPaths(rules.ExportPack(*dir))
	}}
}

// checkRulesCommand is `gpuscope check rules FILE...`, promtool's check
// rules for files that are not (yet) in a config's rule_files. It must be
// registered after checkConfigCommand, which creates `check`.
func checkRulesCommand(cli *kingpin.Application) command {
	c := cli.GetCommand("check").Command("rules", "Validate Prometheus rule files; exit 0 if all are valid, 1 otherwise.")
	files := c.Arg("file", "Rule file(s) to check.").Required().ExistingFiles()
	return command{clause: c, run: func(*slog.Logger) error {
		failed := 0
		for _, f := range *files {
			if err := rules.CheckRuleFiles([]string{f}, model.UTF8Validation); err != nil {
				fmt.Fprintf(os.Stderr, "FAILED: %s\n", err)
				failed++
				continue
			}
			fmt.Printf("SUCCESS: %s is a valid rule file\n", f)
		}
		if failed > 0 {
			os.Exit(1)
		}
		return nil
	}}
}
