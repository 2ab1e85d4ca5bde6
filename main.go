// Command gpuscope is one binary that does the job of Prometheus, cAdvisor,
// dcgm-exporter, alert rules and Grafana dashboards for GPU servers and
// small GPU clusters that do not run Kubernetes.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"k8s.io/klog/v2"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/scrape/cadvisor"
)

// command is one subcommand: its flags are registered on the kingpin
// command, and run executes it once the command line is parsed.
type command struct {
	clause *kingpin.CmdClause
	run    func(logger *slog.Logger) error
}

func main() {
	if bi, ok := debug.ReadBuildInfo(); ok {
		stampVersion(bi)
	}
	cli, commands, logConfig := newApp()
	addDocumentationFlags(cli)

	selected, err := cli.Parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuscope: %s (try --help)\n", err)
		os.Exit(2)
	}
	logger := promslog.New(logConfig)
	if selected == "serve" && !slices.Contains(os.Args[1:], "serve") {
		logger.Info("No command given: running `gpuscope serve` (`gpuscope --help` lists the commands)")
	}
	// cAdvisor logs through klog; send it to the same handler so every line
	// has one format.
	klog.SetSlogLogger(slog.New(cadvisor.KlogHandler(logger.With("component", "cadvisor").Handler())))

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

// newApp is gpuscope's command line: the flags every command has and the
// commands, each with its flags.
func newApp() (*kingpin.Application, []command, *promslog.Config) {
	cli := kingpin.New("gpuscope", "GPU and container monitoring appliance: Prometheus TSDB, scrape loop, cAdvisor, NVML/DCGM metrics, alert rules and Grafana dashboards in one binary.")
	cli.Version(version.Print("gpuscope"))
	cli.HelpFlag.Short('h')
	// --help is asked for, not an error: it goes to stdout so that
	// `gpuscope --help | less` works.
	cli.UsageWriter(os.Stdout)
	logConfig := &promslog.Config{}
	promslogflag.AddFlags(cli, logConfig)
	commands := []command{
		serveCommand(cli),
		agentCommand(cli),
		checkConfigCommand(cli),
		checkRulesCommand(cli),
		rulesExportCommand(cli),
		dashboardsExportCommand(cli),
		grafanaProvisionCommand(cli),
		alertmanagerExportCommand(cli),
		workloadsCommand(cli),
		doctorCommand(cli),
		versionCommand(cli),
	}
	commands = append(commands, backupCommands(cli)...)
	return cli, commands, logConfig
}

func versionCommand(cli *kingpin.Application) command {
	c := cli.Command("version", "Print the version and build information.")
	return command{clause: c, run: func(*slog.Logger) error {
		fmt.Println(version.Print("gpuscope"))
		return nil
	}}
}

// stampVersion fills in what the build did not stamp with -ldflags (go
// build, go run, go install): the module version of `go install
// ...@vX.Y.Z`, and the commit time git recorded when the build had VCS
// information (go build in a clone without -buildvcs=false); the revision
// itself prometheus/common/version reads from the same place.
func stampVersion(bi *debug.BuildInfo) {
	if version.Version == "" {
		version.Version = app.FallbackVersion
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version.Version = strings.TrimPrefix(v, "v")
		}
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.time" && version.BuildDate == "" {
			version.BuildDate = s.Value
		}
	}
}
