package accounting

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// PrintRequest is `gpuscope workloads`' command line: its errors name
// the flags.
type PrintRequest struct {
	Server, Since, Month, Format string
	By                           []string
	All                          bool
	Now                          time.Time
	Client                       *http.Client // nil: NewClient's
}

// Print asks the gpuscope at r.Server for its run report, or for its sums
// with By, and writes it to w in r.Format; the server's warnings go to
// warnings. Bad flags are refused before anything is asked, and nothing
// is written to w on an error.
func Print(ctx context.Context, w, warnings io.Writer, r PrintRequest) error {
	start, end, err := Period(r.Since, r.Month, r.Now)
	if err != nil {
		return fmt.Errorf("--%w", err) // it names since or month first: the flag
	}
	by, extra, err := ParseGroupBy(r.By)
	if err != nil {
		return fmt.Errorf("--by: %w", err)
	}
	base, err := url.Parse(r.Server)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("--url %q is not an http:// or https:// address (e.g. http://localhost:9089)", r.Server)
	}
	client, err := NewClient(ClientOptions{URL: base, HTTPClient: r.Client})
	if err != nil {
		return err
	}
	q := Query{Start: start, End: end, All: r.All, Labels: extra}
	if len(by) > 0 {
		rep, err := client.Groups(ctx, q, by)
		if err != nil {
			return err
		}
		printWarnings(warnings, rep.Warnings)
		return WriteGroups(w, r.Format, by, rep.Groups)
	}
	rep, err := client.Report(ctx, q)
	if err != nil {
		return err
	}
	printWarnings(warnings, rep.Warnings)
	return WriteRuns(w, r.Format, rep.Runs, r.Now)
}

func printWarnings(w io.Writer, ws []string) {
	for _, s := range ws {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
}
