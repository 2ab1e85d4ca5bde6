// Command gpuscope is one binary that does the job of Prometheus, cAdvisor,
// dcgm-exporter, alert rules and Grafana dashboards for GPU servers and
// small GPU clusters that do not run Kubernetes.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"k8s.io/klog/v2"
)

// fallbackVersion is reported when the build did not stamp a version
// (go run, go build without the packaging script's -ldflags). It is
// semver so Grafana's version detection accepts it.
const fallbackVersion = "0.1.0-dev"

// DefaultListenAddress is gpuscope's port: 9089 is next to Prometheus's
// 9090 and clear of Alertmanager (9093), node_exporter (9100),
// dcgm-exporter (9400), cAdvisor (8080) and Grafana (3000).
const DefaultListenAddress = "0.0.0.0:9089"

// command is one subcommand: its flags are registered on the kingpin
// command, and run executes it once the command line is parsed.
type command struct {
	clause *kingpin.CmdClause
	run    func(logger *slog.Logger) error
}

func main() {
	if version.Version == "" {
		version.Version = fallbackVersion
	}
	app := kingpin.New("gpuscope", "GPU and container monitoring appliance: Prometheus TSDB, scrape loop, cAdvisor, NVML/DCGM metrics, alert rules and Grafana dashboards in one binary.")
	app.Version(version.Print("gpuscope"))
	app.HelpFlag.Short('h')
	var logConfig promslog.Config
	promslogflag.AddFlags(app, &logConfig)

	commands := []command{
		serveCommand(app),
		agentCommand(app),
		checkConfigCommand(app),
		checkRulesCommand(app),
		rulesExportCommand(app),
		dashboardsExportCommand(app),
		grafanaProvisionCommand(app),
		versionCommand(app),
	}

	selected, err := app.Parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuscope: %s (try --help)\n", err)
		os.Exit(2)
	}
	logger := promslog.New(&logConfig)
	// cAdvisor logs through klog; send it to the same handler so every line
	// has one format.
	klog.SetSlogLogger(logger.With("component", "cadvisor"))

	for _, c := range commands {
		if c.clause.FullCommand() == selected {
			if err := c.run(logger); err != nil {
				logger.Error("gpuscope stopped with an error", "err", err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "gpuscope: unknown command %q\n", selected)
	os.Exit(2)
}

func versionCommand(app *kingpin.Application) command {
	c := app.Command("version", "Print the version and build information.")
	return command{clause: c, run: func(*slog.Logger) error {
		fmt.Println(version.Print("gpuscope"))
		return nil
	}}
}
