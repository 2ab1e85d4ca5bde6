package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/gpu/sim"
)

// doctorFlags are `gpuscope doctor`'s settings; the first four are
// serve's, so that the same command line checks what serve would use.
type doctorFlags struct {
	configFile    string
	dataDir       string
	dataDirSet    bool
	demo          bool
	retentionSize units.Base2Bytes
	listenAddress string
	url           string
	urlSet        bool
	format        string
	timeout       time.Duration
}

func doctorCommand(app *kingpin.Application) command {
	c := app.Command("doctor", "Check what gpuscope needs from this machine (NVIDIA driver, GPUs, privileges, cgroups, container runtimes, data directory, port) and, when one runs, what the running gpuscope sees; each check says ok, warn or fail and what to do. Exit 0 unless a check fails (1); 2 when the config cannot be loaded.")
	f := &doctorFlags{}
	c.Flag("config.file", "gpuscope config file, as given to serve. Empty: the embedded defaults.").StringVar(&f.configFile)
	c.Flag("storage.tsdb.path", "The data directory serve uses. Default data/, or "+demoDataDir+" with --demo.").IsSetByUser(&f.dataDirSet).Default("data/").StringVar(&f.dataDir)
	c.Flag("demo", "Check what `serve --demo` uses: its simulated GPUs and its data directory.").BoolVar(&f.demo)
	c.Flag("storage.tsdb.retention.size", "serve's --storage.tsdb.retention.size, when the config file sets no retention.").Default("0").BytesVar(&f.retentionSize)
	c.Flag("web.listen-address", "The address serve listens on. Default: the config file's web.listen_address ("+DefaultListenAddress+").").StringVar(&f.listenAddress)
	c.Flag("url", "A running gpuscope to ask for its targets and containers (basic auth as http://user:password@host:port); empty (--url=) skips those checks. Default: http://localhost:<port of the listen address>.").IsSetByUser(&f.urlSet).StringVar(&f.url)
	c.Flag("format", "Output format: text or json.").Default("text").EnumVar(&f.format, "text", "json")
	c.Flag("timeout", "Deadline of each network check (a runtime's socket, a node, the running gpuscope).").Default("5s").DurationVar(&f.timeout)
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
	o, err := doctorOptions(f, logger)
	if err != nil {
		fmt.Fprintf(stderr, "gpuscope doctor: %v\n", err)
		return 2
	}
	checks := doctor.Run(ctx, o)
	if f.format == "json" {
		err = doctor.WriteJSON(stdout, checks)
	} else {
		source := "embedded default"
		if f.configFile != "" {
			source = f.configFile
		}
		url := o.URL
		if url == "" {
			url = "none"
		}
		fmt.Fprintf(stdout, "gpuscope doctor: config %s, data %s, listen %s, running gpuscope %s\n\n", source, o.DataDir, o.ListenAddress, url)
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

func doctorOptions(f *doctorFlags, logger *slog.Logger) (doctor.Options, error) {
	cfg := config.Default(logger)
	if f.configFile != "" {
		var err error
		if cfg, err = config.LoadFile(f.configFile, logger); err != nil {
			return doctor.Options{}, fmt.Errorf("load config: %w", err)
		}
	}
	dataDir := f.dataDir
	if f.demo {
		cfg.GPU.Config, cfg.GPU.Sim = sim.DemoConfig()
		if !f.dataDirSet {
			dataDir = demoDataDir
		}
	}
	o := doctor.Options{
		Config:        cfg,
		Logger:        logger.With("component", "doctor"),
		DataDir:       dataDir,
		ListenAddress: f.listenAddress,
		URL:           f.url,
		Timeout:       f.timeout,
	}
	if o.ListenAddress == "" {
		o.ListenAddress = cfg.Web.ListenAddress
	}
	if err := (config.Web{ListenAddress: o.ListenAddress}).Validate(); err != nil {
		return doctor.Options{}, fmt.Errorf("--web.listen-address: %w", err)
	}
	// As serve: the flag's size applies when the config sets no retention.
	if s := cfg.Prometheus.StorageConfig.TSDBConfig; s == nil || s.Retention == nil ||
		(s.Retention.Time == 0 && s.Retention.Size == 0 && s.Retention.Percentage == 0) {
		o.RetentionSize = int64(f.retentionSize)
	}
	if !f.urlSet {
		_, port, _ := net.SplitHostPort(o.ListenAddress)
		o.URL = "http://" + net.JoinHostPort("localhost", port)
	}
	return o, nil
}
