package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/web"
)

// alertmanagerExportCommand is `gpuscope alertmanager export [FILE]`: the
// embedded Alertmanager's config as the alertmanager.yml it is (the
// alertmanager: section, or its config_file, with gpuscope's default
// route where gpuscope added it), for `amtool check-config`, for a
// standalone Alertmanager, or to start a section from.
func alertmanagerExportCommand(app *kingpin.Application) command {
	c := app.Command("alertmanager", "The embedded Alertmanager.").
		Command("export", "Print the alertmanager.yml the embedded Alertmanager runs (the config file's alertmanager: section, with gpuscope's default route when it has none), or write it to FILE.")
	file := c.Arg("file", "File to write (default: stdout).").String()
	configFile := c.Flag("config.file", "gpuscope config file, as given to serve. Empty: the embedded defaults (no receiver).").String()
	return command{clause: c, run: func(logger *slog.Logger) error {
		cfg := config.Default(logger)
		if *configFile != "" {
			var err error
			if cfg, err = config.LoadFile(*configFile, logger); err != nil {
				return fmt.Errorf("load config: %w", err)
			}
		}
		text := []byte(cfg.Alertmanager.Text)
		if *file == "" {
			_, err := os.Stdout.Write(text)
			return err
		}
		if err := os.WriteFile(*file, text, 0o600); err != nil {
			return fmt.Errorf("write alertmanager config: %w", err)
		}
		return nil
	}}
}

// notifications is the overview page's Notifications block: the embedded
// Alertmanager's receivers, silences and the alerts it holds back, and
// whether alerts reach anyone at all (the doctor's alerts check, said
// where the alerts are shown).
func (a *appliance) notifications(ctx context.Context) *web.Notifications {
	n := &web.Notifications{Fix: doctor.AlertsHint}
	if k := len(a.config.Load().Prometheus.AlertingConfig.AlertmanagerConfigs); k > 0 {
		n.External = fmt.Sprintf("the Alertmanagers of alerting.alertmanagers (%d set%s)", k, map[bool]string{true: "s"}[k > 1])
	}
	s, err := a.am.Status(ctx)
	if err != nil {
		n.Err = err.Error()
	}
	if n.External == "" {
		n.Nobody = s.Nobody
	}
	for _, d := range s.Deliveries {
		n.Deliveries = append(n.Deliveries, web.Delivery{
			Receiver:    d.Receiver,
			Integration: fmt.Sprintf("%s[%d]", d.Integration, d.Index),
			LastAttempt: d.LastAttempt,
			LastSuccess: d.LastSuccess,
			LastError:   d.LastError,
			Attempts:    d.Attempts,
			Failures:    d.Failures,
		})
	}
	for _, s := range s.Silences {
		n.Silences = append(n.Silences, web.Silence{ID: s.ID, CreatedBy: s.CreatedBy, Comment: s.Comment,
			Matchers: s.Matchers, StartsAt: s.StartsAt, EndsAt: s.EndsAt})
	}
	for _, al := range s.Alerts {
		ls := make(map[string]string, len(al.Labels))
		for k, v := range al.Labels {
			ls[string(k)] = string(v)
		}
		n.Alerts = append(n.Alerts, web.NotifiedAlert{Labels: ls, SilencedBy: al.SilencedBy,
			InhibitedBy: al.InhibitedBy, MutedBy: al.MutedBy})
	}
	return n
}
