package accounting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxAnswerBytes bounds what Client reads of an answer: a week of a large
// cluster is a few MiB of JSON, and a server that is not gpuscope may
// send anything.
const maxAnswerBytes = 256 << 20

// ClientOptions configure a Client.
type ClientOptions struct {
	// URL is the gpuscope to ask, its web address; basic auth goes in it
	// as http://user:password@host:port. Required.
	URL *url.URL
	// HTTPClient sends the request. Nil: one that waits 2 minutes, serve's
	// default --query.timeout.
	HTTPClient *http.Client
}

// Client asks a running gpuscope for its run report over the HTTP API,
// /api/v1/workloads: what `gpuscope workloads` prints. Its errors end in
// hints for that command's user, who gave the address with --url.
type Client struct {
	base *url.URL
	hc   *http.Client
}

// NewClient checks the options.
func NewClient(o ClientOptions) (*Client, error) {
	if o.URL == nil {
		return nil, errors.New("accounting: the URL of a gpuscope is required")
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 2 * time.Minute}
	}
	return &Client{base: o.URL, hc: o.HTTPClient}, nil
}

// Report asks for the report of q, as the server's Reporter computes it.
// A zero Start or End is left to the server's default (the 7 days up to
// its now); others are sent to the second.
func (c *Client) Report(ctx context.Context, q Query) (Report, error) {
	var runs []Run
	warnings, err := c.get(ctx, q, nil, &runs)
	return Report{Runs: runs, Warnings: warnings}, err
}

// GroupedReport is a report's runs summed by groups, and what the reader
// should know about their figures.
type GroupedReport struct {
	Groups   []Group
	Warnings []string
}

// Groups asks for the report of q summed by the grouping names by (as
// ParseGroupBy checks them; the server checks them again).
func (c *Client) Groups(ctx context.Context, q Query, by []string) (GroupedReport, error) {
	var groups []Group
	warnings, err := c.get(ctx, q, by, &groups)
	return GroupedReport{Groups: groups, Warnings: warnings}, err
}

// get asks /api/v1/workloads for q, grouped by by if any, and decodes
// its data into data.
func (c *Client) get(ctx context.Context, q Query, by []string, data any) ([]string, error) {
	u := c.base.JoinPath("api/v1/workloads")
	v := url.Values{}
	if len(by) > 0 {
		v.Set("by", strings.Join(by, ","))
	}
	if !q.Start.IsZero() {
		v.Set("start", strconv.FormatInt(q.Start.Unix(), 10))
	}
	if !q.End.IsZero() {
		v.Set("end", strconv.FormatInt(q.End.Unix(), 10))
	}
	if q.All {
		v.Set("all", "true")
	}
	u.RawQuery = v.Encode()
	// Redacted: the password in the URL stays out of every message.
	where := c.base.Redacted()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", where, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach gpuscope at %s: %w (is `gpuscope serve` running there? --url says where)", where, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("read the report from %s: %w", where, err)
	}
	var env struct {
		Status   string          `json:"status"`
		Data     json.RawMessage `json:"data"`
		Error    string          `json:"error"`
		Warnings []string        `json:"warnings"`
	}
	decodeErr := json.Unmarshal(body, &env)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s has no /api/v1/workloads (a `gpuscope agent`, an older gpuscope, or not gpuscope): %s", where, resp.Status)
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s asks for credentials (%s): give them in --url as http://user:password@host:port", where, resp.Status)
	case decodeErr == nil && env.Status == "error":
		return nil, fmt.Errorf("gpuscope at %s: %s", where, env.Error)
	case resp.StatusCode != http.StatusOK || decodeErr != nil:
		return nil, fmt.Errorf("gpuscope at %s answered %s: %s", where, resp.Status, snippet(body))
	}
	if len(env.Data) > 0 {
		if err := json.Unmarshal(env.Data, data); err != nil {
			return nil, fmt.Errorf("gpuscope at %s answered a report this gpuscope cannot read: %w", where, err)
		}
	}
	return env.Warnings, nil
}

// unwrapURLError drops net/http's "Get \"<url>\":" prefix, which repeats
// the URL (and its password) the message already names.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// snippet is the start of an answer that is not the API's, on one line,
// for the error that says so.
func snippet(b []byte) string {
	s := strings.TrimSpace(oneLine(string(b)))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return strconv.Quote(s)
}
