package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/backup"
)

// backupCommands are `gpuscope backup` and `gpuscope restore` (docs/backup.md).
func backupCommands(cli *kingpin.Application) []command {
	b := cli.Command("backup", "Back up the gpuscope running on a data directory, while it runs: its TSDB (a snapshot with the newest samples) and its Alertmanager's silences and notification log. Asked over the control socket in the data directory: run it as root or as the user gpuscope runs as.")
	data := b.Flag("storage.tsdb.path", "The running gpuscope's data directory.").Default(app.DefaultDataDir).String()
	dest := b.Arg("dir", "A directory, not there yet, to put the backup in. Default: a new one under <data directory>/backups.").String()
	r := cli.Command("restore", "Restore a backup into an empty data directory for a gpuscope to start on. Run it with gpuscope stopped, as the user gpuscope runs as.")
	from := r.Arg("backup", "The backup's directory.").Required().String()
	into := r.Flag("storage.tsdb.path", "The data directory to restore into: empty, or not there yet.").Default(app.DefaultDataDir).String()
	return []command{{clause: b, run: func(*slog.Logger) error {
		dir, m, err := backup.Request(context.Background(), *data, *dest)
		if err == nil {
			fmt.Println(backup.Describe(dir, m))
		}
		return err
	}}, {clause: r, run: func(*slog.Logger) error {
		m, err := backup.Restore(*from, *into)
		if err == nil {
			fmt.Printf("restored into %s: %s\n", *into, backup.Describe(*from, m))
		}
		return err
	}}}
}
