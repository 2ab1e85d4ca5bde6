package web

import (
	"context"
	"net"

	"google.golang.org/grpc/test/bufconn"
)

// selfPipeBytes is the buffer of each direction of an in-memory connection
// of the built-in jobs. A scrape larger than it flows through as the scrape
// loop reads; each kept-alive connection holds two, so 1 MiB pipes were a
// quarter of an idle appliance's heap (BENCHMARKS.md, "Where idle time
// goes").
const selfPipeBytes = 64 << 10

// SelfListener is the in-memory listener of the built-in scrape jobs:
// the Handler serves the collectors' /metrics* on it, and the scraper
// dials it for the jobs' address, so self-scrapes need neither the
// network nor the credentials --web.config.file may require. It is built
// before both and handed to each (Alloy's exporters are scraped the same
// way).
type SelfListener struct {
	*bufconn.Listener
	address string
}

// NewSelfListener returns a listener for the built-in jobs' target
// address (host:port of the public listener, as the API's targets show
// it).
func NewSelfListener(address string) *SelfListener {
	return &SelfListener{Listener: bufconn.Listen(selfPipeBytes), address: address}
}

// Address is the host:port the built-in jobs scrape; the scraper answers
// connections to it with Dial instead of the network.
func (l *SelfListener) Address() string { return l.address }

// Dial connects to the listener.
func (l *SelfListener) Dial(ctx context.Context) (net.Conn, error) { return l.DialContext(ctx) }
