package cadvisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// probeTimeout bounds the check that a runtime's API answers before
// cAdvisor is let near it.
const probeTimeout = 5 * time.Second

// deadEndpoint is where cAdvisor is pointed for a runtime whose socket
// accepts connections but never answers: dialing it fails at once, so
// cAdvisor's factory fails to register instead of waiting forever.
// cAdvisor's Docker plugin retries a timed-out status call at start
// without end (container/docker/plugin.go, retryDockerStatus), which would
// leave every scrape of /metrics/cadvisor waiting and no container
// measured at all; a socket that refuses, or is absent, fails fast by
// itself.
const deadEndpoint = "unix:///dev/null/gpuscope-runtime-not-answering"

// errNotAnswering marks a runtime socket that accepted a connection and
// then said nothing within probeTimeout.
var errNotAnswering = errors.New("accepts connections but does not answer")

// probeRuntime asks a runtime's API for /_ping, as `docker version` does
// first. It returns nil when anything HTTP answers (even an error status:
// the runtime is alive, and cAdvisor will say what it dislikes),
// errNotAnswering when the socket stays silent, and the dial error when it
// cannot be reached at all.
func probeRuntime(ctx context.Context, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	network, address := "unix", u.Path
	switch u.Scheme {
	case "unix":
	case "tcp":
		network, address = "tcp", u.Host
	default:
		return fmt.Errorf("unsupported endpoint %q", endpoint)
	}
	client := &http.Client{
		Timeout: probeTimeout,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, address)
		}},
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://runtime/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "dial" {
				return errNotAnswering // connected, then silence
			}
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err // the dial error, without the request that repeats the endpoint
		}
		return err
	}
	resp.Body.Close()
	return nil
}

// guardEndpoints probes the runtimes whose cAdvisor factories could wait
// forever on a silent socket (Docker's and Podman's) and points those that
// do not answer at deadEndpoint. It returns, per runtime, why it will be
// measured as raw cgroups, for the one log line that says so.
func (c Config) guardEndpoints(ctx context.Context) (Config, map[string]string) {
	why := map[string]string{}
	for _, ep := range []struct {
		runtime string
		value   *string
	}{
		{"docker", &c.DockerEndpoint},
		{"podman", &c.PodmanEndpoint},
	} {
		if *ep.value == "" {
			continue
		}
		err := probeRuntime(ctx, *ep.value)
		switch {
		case err == nil:
		case errors.Is(err, errNotAnswering):
			why[ep.runtime] = fmt.Sprintf("%s %v within %s", *ep.value, err, probeTimeout)
			*ep.value = deadEndpoint
		default:
			why[ep.runtime] = fmt.Sprintf("%s: %v", *ep.value, err)
		}
	}
	return c, why
}

// ErrNotAnswering is ProbeRuntime's error for a runtime socket that
// accepts a connection and then says nothing.
var ErrNotAnswering = errNotAnswering

// ProbeRuntime is the probe guardEndpoints runs at start, for `gpuscope
// doctor`: nil when the runtime's API answers at endpoint (unix:// or
// tcp://), ErrNotAnswering, or the dial error.
func ProbeRuntime(ctx context.Context, endpoint string) error {
	return probeRuntime(ctx, endpoint)
}
