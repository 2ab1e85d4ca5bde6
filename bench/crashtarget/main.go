// Command crashtarget is the scrape target of bench/crash.sh: it serves
// -series counters on /metrics that all count the scrapes served, so the
// k-th scrape answers k for each of them and a value stored in gpuscope
// names the scrape it came from. /scrapes answers "<k> <unix ms>": the
// number of scrapes served and when the last one was written.
//
//	go run ./bench/crashtarget -listen 127.0.0.1:9999 -series 100000
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9999", "Address to serve /metrics and /scrapes on.")
	series := flag.Int("series", 100000, "Number of counters.")
	flag.Parse()

	var (
		mu     sync.Mutex
		k      int
		lastAt time.Time
		buf    bytes.Buffer
	)
	prefix := make([][]byte, *series)
	for i := range prefix {
		prefix[i] = fmt.Appendf(nil, "crash_counter_total{series=\"%06d\"} ", i)
	}
	mux := http.NewServeMux()
	// Scrapes are answered one at a time, so that k orders them as the
	// scraper sees them.
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		k++
		v := strconv.AppendInt(nil, int64(k), 10)
		buf.Reset()
		buf.WriteString("# TYPE crash_counter_total counter\n")
		for _, p := range prefix {
			buf.Write(p)
			buf.Write(v)
			buf.WriteByte('\n')
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(buf.Bytes())
		lastAt = time.Now()
	})
	mux.HandleFunc("/scrapes", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%d %d\n", k, lastAt.UnixMilli())
	})
	slog.Info("Serving counters", "listen", *listen, "series", *series)
	if err := http.ListenAndServe(*listen, mux); err != nil {
		slog.Error("Serve", "err", err)
		os.Exit(1)
	}
}
