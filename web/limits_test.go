package web

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunked hides a body's length, so the client sends it chunked and the
// server learns its size only by reading.
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestBodyLimit(t *testing.T) {
	const limit = 1024
	h, srv := newTestHandler(t, Options{MaxRequestBodyBytes: limit})
	h.SetReady(true)

	form := func(n int) string {
		q := "query=demo&pad="
		return q + strings.Repeat("a", n-len(q))
	}
	for _, tc := range []struct {
		name    string
		body    io.Reader
		want    int
		message string
	}{
		{"at the limit", strings.NewReader(form(limit)), 200, `"status":"success"`},
		{"over the limit, length declared", strings.NewReader(form(limit + 1)), 413, "request body larger than 1024 bytes"},
		{"at the limit, chunked", chunked{strings.NewReader(form(limit))}, 200, `"status":"success"`},
		{"over the limit, chunked", chunked{strings.NewReader(form(64 * limit))}, 413, "request body larger than 1024 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/api/v1/query", "application/x-www-form-urlencoded", tc.body)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, tc.want, resp.StatusCode, string(b))
			require.Contains(t, string(b), tc.message)
		})
	}
}
