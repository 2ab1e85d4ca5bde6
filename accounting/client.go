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
	u := c.base.JoinPath("api/v1/workloads")
	v := url.Values{}
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
		return Report{}, fmt.Errorf("ask %s: %w", where, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Report{}, fmt.Errorf("cannot reach gpuscope at %s: %w (is `gpuscope serve` running there? --url says where)", where, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return Report{}, fmt.Errorf("read the report from %s: %w", where, err)
	}
	var env struct {
		Status   string   `json:"status"`
		Data     []Run    `json:"data"`
		Error    string   `json:"error"`
		Warnings []string `json:"warnings"`
	}
	decodeErr := json.Unmarshal(body, &env)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return Report{}, fmt.Errorf("%s has no /api/v1/workloads (a `gpuscope agent`, an older gpuscope, or not gpuscope): %s", where, resp.Status)
	case resp.StatusCode == http.StatusUnauthorized:
		return Report{}, fmt.Errorf("%s asks for credentials (%s): give them in --url as http://user:password@host:port", where, resp.Status)
	case decodeErr == nil && env.Status == "error":
		return Report{}, fmt.Errorf("gpuscope at %s: %s", where, env.Error)
	case resp.StatusCode != http.StatusOK || decodeErr != nil:
		return Report{}, fmt.Errorf("gpuscope at %s answered %s: %s", where, resp.Status, snippet(body))
	}
	return Report{Runs: env.Data, Warnings: env.Warnings}, nil
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
