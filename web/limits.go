package web

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/labstack/echo/v4"
)

// bodyLimit rejects request bodies over n bytes with 413, so a client
// cannot make the server buffer unbounded form or push data. A body that
// declares its length is refused before it is read. A body sent without
// one (chunked) is cut after n bytes: the handler's read fails and the
// answer goes out as 413 with the same message, so the client is told the
// same thing either way and nothing of the body is used.
func bodyLimit(n int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.ContentLength > n {
				return c.String(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes\n", n))
			}
			if r.Body == nil || r.Body == http.NoBody {
				return next(c)
			}
			resp := c.Response()
			body := &limitedBody{ReadCloser: http.MaxBytesReader(resp.Writer, r.Body, n), limit: n}
			r.Body = body
			resp.Writer = &tooLargeWriter{ResponseWriter: resp.Writer, body: body}
			return next(c)
		}
	}
}

// limitedBody is http.MaxBytesReader's body that remembers it hit the
// limit.
type limitedBody struct {
	io.ReadCloser
	limit    int64
	exceeded atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		b.exceeded.Store(true)
	}
	return n, err
}

// tooLargeWriter answers 413 once the body was cut, in place of what the
// handler answers (which may not even mention the cut: the API's form
// parsing drops the error and complains about a missing parameter).
type tooLargeWriter struct {
	http.ResponseWriter
	body        *limitedBody
	wroteHeader bool
	discard     bool
}

func (w *tooLargeWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	if !w.body.exceeded.Load() {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.discard = true
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	// The client has not sent the rest; don't wait for it.
	h.Set("Connection", "close")
	w.ResponseWriter.WriteHeader(http.StatusRequestEntityTooLarge)
	fmt.Fprintf(w.ResponseWriter, "request body larger than %d bytes\n", w.body.limit)
}

func (w *tooLargeWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.discard {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *tooLargeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *tooLargeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
