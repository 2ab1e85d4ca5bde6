package apptest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// WebhookAlert and WebhookMessage are what Alertmanager's webhook
// receiver posts (its notify/webhook.Message, version 4).
type WebhookAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	Fingerprint string            `json:"fingerprint"`
}

type WebhookMessage struct {
	Version      string            `json:"version"`
	Receiver     string            `json:"receiver"`
	Status       string            `json:"status"`
	GroupKey     string            `json:"groupKey"`
	GroupLabels  map[string]string `json:"groupLabels"`
	CommonLabels map[string]string `json:"commonLabels"`
	Alerts       []WebhookAlert    `json:"alerts"`

	received time.Time
}

// Webhook is a receiver Alertmanager notifies: it keeps each message.
type Webhook struct {
	srv  *httptest.Server
	mu   sync.Mutex
	msgs []WebhookMessage
	errs []error
}

// NewWebhook starts a webhook receiver, stopped at the test's cleanup.
func NewWebhook(t testing.TB) *Webhook {
	t.Helper()
	w := &Webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var m WebhookMessage
		err := json.NewDecoder(r.Body).Decode(&m)
		m.received = time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.errs = append(w.errs, err)
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.msgs = append(w.msgs, m)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// Messages returns the messages for the group of alertname received
// after since, and any decoding error so far.
func (w *Webhook) Messages(alertname string, since time.Time) ([]WebhookMessage, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		return nil, fmt.Errorf("webhook could not decode: %v", w.errs)
	}
	var out []WebhookMessage
	for _, m := range w.msgs {
		if m.GroupLabels["alertname"] == alertname && m.received.After(since) {
			out = append(out, m)
		}
	}
	return out, nil
}

// Alertnames returns the group alert names of every message so far.
func (w *Webhook) Alertnames() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var names []string
	for _, m := range w.msgs {
		names = append(names, m.GroupLabels["alertname"])
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// All returns every message so far.
func (w *Webhook) All() []WebhookMessage {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// URL is where the receiver listens, for a webhook_configs url.
func (w *Webhook) URL() string { return w.srv.URL }
