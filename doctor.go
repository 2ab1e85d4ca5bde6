package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/doctor"
)

// doctorFlags are `gpuscope doctor`'s settings: the config is loaded as
// serve loads it (config.Loader: --demo's GPUs and time scale, the
// retention size where the file sets none), so that the same command line
// checks what serve would use.
type doctorFlags struct {
	config.Loader
	doctor.Options
	dataDirSet, urlSet bool
	format             string
}

func doctorCommand(cli *kingpin.Application) command {
	c := cli.Command("doctor", "Check what gpuscope needs from this machine (NVIDIA driver, GPUs, privileges, cgroups, container runtimes, data directory, port) and, when one runs, what the running gpuscope sees; each check says ok, warn or fail and what to do. Exit 0 unless a check fails (1); 2 when the config cannot be loaded.")
	f := &doctorFlags{}
	c.Flag("config.file", "gpuscope config file, as given to serve. Empty: the embedded defaults.").StringVar(&f.File)
	c.Flag("storage.tsdb.path", "The data directory serve uses. Default data/, or "+config.DemoDataDir+" with --demo.").IsSetByUser(&f.dataDirSet).Default(app.DefaultDataDir).StringVar(&f.DataDir)
	c.Flag("demo", "Check what `serve --demo` uses: its simulated GPUs and its data directory.").BoolVar(&f.Demo)
	c.Flag("storage.tsdb.retention.size", "serve's --storage.tsdb.retention.size, when the config file sets no retention.").Default("0").BytesVar(&f.Loader.RetentionSize)
	c.Flag("web.listen-address", "The address serve listens on. Default: the config file's web.listen_address ("+app.DefaultListenAddress+").").StringVar(&f.ListenAddress)
	c.Flag("url", "A running gpuscope to ask for its targets and containers (basic auth as http://user:password@host:port); empty (--url=) skips those checks. Default: http://localhost:<port of the listen address>.").IsSetByUser(&f.urlSet).StringVar(&f.URL)
	c.Flag("format", "Output format: text or json.").Default("text").EnumVar(&f.format, "text", "json")
	c.Flag("timeout", "Deadline of each network check (a runtime's socket, a node, the running gpuscope).").Default("5s").DurationVar(&f.Timeout)
	return command{clause: c, run: func(logger *slog.Logger) error {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if code := runDoctor(ctx, os.Stdout, os.Stderr, f, logger); code != 0 {
			os.Exit(code)
		}
		return nil
	}}
}

// runDoctor loads the config as serve does, runs the checks, prints them
// and returns the exit code: 0, 1 when a check fails, 2 when the config
// cannot be loaded.
func runDoctor(ctx context.Context, stdout, stderr io.Writer, f *doctorFlags, logger *slog.Logger) int {
	o, err := f.options(logger)
	if err != nil {
		fmt.Fprintf(stderr, "gpuscope doctor: %v\n", err)
		return 2
	}
	checks := doctor.Run(ctx, o)
	if f.format == "json" {
		err = doctor.WriteJSON(stdout, checks)
	} else {
		// Whether one runs there is the appliance check's to say.
		ask := "asking no running gpuscope"
		if o.URL != "" {
			ask = "asking a gpuscope at " + o.URL
		}
		fmt.Fprintf(stdout, "gpuscope doctor: config %s, data %s, listen %s, %s\n\n",
			cmp.Or(f.File, "embedded default"), o.DataDir, o.ListenAddress, ask)
		err = doctor.WriteText(stdout, checks)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuscope doctor: %v\n", err)
		return 1
	}
	if doctor.Worst(checks) == doctor.StatusFail {
		return 1
	}
	return 0
}

func (f *doctorFlags) options(logger *slog.Logger) (doctor.Options, error) {
	o := f.Options
	f.Loader.Logger, o.Logger = logger, logger.With("component", "doctor")
	var err error
	if o.Config, err = f.Load(); err != nil {
		return o, fmt.Errorf("load config: %w", err)
	}
	if f.Demo && !f.dataDirSet {
		o.DataDir = config.DemoDataDir
	}
	o.ListenAddress = cmp.Or(o.ListenAddress, o.Config.Web.ListenAddress)
	if err := (config.Web{ListenAddress: o.ListenAddress}).Validate(); err != nil {
		return o, fmt.Errorf("--web.listen-address: %w", err)
	}
	if !f.urlSet {
		_, port, _ := net.SplitHostPort(o.ListenAddress)
		o.URL = "http://" + net.JoinHostPort("localhost", port)
	}
	return o, nil
}
