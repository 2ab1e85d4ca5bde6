package alertmanager

import (
	"errors"
	"fmt"
	"maps"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	amconfig "github.com/prometheus/alertmanager/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/relabel"
	"go.yaml.in/yaml/v3"
)

// The labels gpuscope adds to an alert whose user label names a user of
// the users: section, for routes and templates to address the person
// holding the GPU.
const (
	OwnerEmailLabel    = "owner_email"
	OwnerChatLabel     = "owner_chat"
	OwnerReceiverLabel = "owner_receiver"
)

// User is how to reach one user: an entry of the users: section.
type User struct {
	// Email is where an email_configs `to: '{{ .CommonLabels.owner_email }}'`
	// sends.
	Email string `yaml:"email"`
	// Chat is a chat handle (@alice) the chat templates mention.
	Chat string `yaml:"chat"`
	// Receiver is a receiver of the alertmanager: section that gets the
	// alerts naming this user, besides the route tree's own.
	Receiver string `yaml:"receiver"`
}

// Users is the users: section: user (as the user label has it, a name
// from passwd or a uid) → how to reach them.
type Users map[string]User

// Validate checks each entry on its own; CheckReceivers checks the
// receivers against the alertmanager: section.
func (u Users) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(u)) {
		e := u[name]
		switch {
		case name == "" || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
			errs = append(errs, fmt.Errorf("users: %q is not a user name (as the user label has it: a passwd name or a uid)", name))
			continue
		case e.Email == "" && e.Chat == "" && e.Receiver == "":
			errs = append(errs, fmt.Errorf("users.%s: gives no email, chat or receiver", name))
		}
		if e.Email != "" {
			if a, err := mail.ParseAddress(e.Email); err != nil || a.Address != e.Email {
				errs = append(errs, fmt.Errorf("users.%s.email: %q is not an email address (e.g. alice@lab.example)", name, e.Email))
			}
		}
		if strings.ContainsFunc(e.Chat, unicode.IsControl) || !utf8.ValidString(e.Chat) {
			errs = append(errs, fmt.Errorf("users.%s.chat: %q has a control character (a handle, e.g. @alice)", name, e.Chat))
		}
	}
	return errors.Join(errs...)
}

// CheckReceivers refuses a user whose receiver is not one of c's,
// listing those there are.
func (u Users) CheckReceivers(c *Config) error {
	have := map[string]bool{}
	var names []string
	if c != nil && c.Alertmanager != nil {
		for _, r := range c.Alertmanager.Receivers {
			have[r.Name] = true
			names = append(names, r.Name)
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(u)) {
		if r := u[name].Receiver; r != "" && !have[r] {
			list := "it has none"
			if len(names) > 0 {
				list = "it has " + strings.Join(names, ", ")
			}
			errs = append(errs, fmt.Errorf("users.%s.receiver: %q is not a receiver of the alertmanager: section (%s)", name, r, list))
		}
	}
	return errors.Join(errs...)
}

// receivers are the receivers the users name, once each, sorted.
func (u Users) receivers() []string {
	var out []string
	for _, e := range u {
		if e.Receiver != "" && !slices.Contains(out, e.Receiver) {
			out = append(out, e.Receiver)
		}
	}
	slices.Sort(out)
	return out
}

// AlertRelabelConfigs are the alert relabellings that give an alert
// with a user label its owner_email, owner_chat and owner_receiver, run
// before alerting.alert_relabel_configs (which may use or drop them).
func (u Users) AlertRelabelConfigs() []*relabel.Config {
	var out []*relabel.Config
	for _, name := range slices.Sorted(maps.Keys(u)) {
		e := u[name]
		for _, l := range []struct{ label, value string }{
			{OwnerEmailLabel, e.Email}, {OwnerChatLabel, e.Chat}, {OwnerReceiverLabel, e.Receiver},
		} {
			if l.value == "" {
				continue
			}
			out = append(out, &relabel.Config{
				SourceLabels: model.LabelNames{"user"},
				Separator:    ";",
				Regex:        relabel.MustNewRegexp(regexp.QuoteMeta(name)),
				TargetLabel:  l.label,
				// $ would expand a group of the regexp.
				Replacement:          strings.ReplaceAll(l.value, "$", "$$"),
				Action:               relabel.Replace,
				NameValidationScheme: model.UTF8Validation,
			})
		}
	}
	return out
}

// WithOwnerRoutes is c with a route per receiver the users name: the
// alerts whose owner_receiver is that receiver go to it, and on through
// the route tree as it was. Alertmanager sends an alert that a child
// route matched only to the children that matched, never to their
// parent's receiver, so the owners' routes cannot simply be put first
// under the root: the root becomes a child of a new root, after them,
// and the new root has the old one's receiver and grouping, so that the
// old tree routes exactly as before. The text (what `gpuscope
// alertmanager config` prints) is the new tree. c without such users is
// returned as it is.
func (c *Config) WithOwnerRoutes(u Users) (*Config, error) {
	receivers := u.receivers()
	if len(receivers) == 0 {
		return c, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(c.Text), &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("add the users' routes: the alertmanager.yml is not a mapping")
	}
	top := doc.Content[0]
	old := mapValue(top, "route")
	if old == nil || old.Kind != yaml.MappingNode {
		return nil, errors.New("add the users' routes: the alertmanager.yml has no route")
	}
	root := &yaml.Node{Kind: yaml.MappingNode, HeadComment: "Added by gpuscope from the users: section: each user's receiver gets the alerts\nthat name them, and the route below routes every alert as it was written."}
	for _, key := range []string{"receiver", "group_by", "group_wait", "group_interval", "repeat_interval"} {
		if v := mapValue(old, key); v != nil {
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
		}
	}
	routes := &yaml.Node{Kind: yaml.SequenceNode}
	for _, r := range receivers {
		var n yaml.Node
		if err := n.Encode(struct {
			Receiver string   `yaml:"receiver"`
			Matchers []string `yaml:"matchers,flow"`
			Continue bool     `yaml:"continue"`
		}{r, []string{fmt.Sprintf("%s=%q", OwnerReceiverLabel, r)}, true}); err != nil {
			return nil, err
		}
		routes.Content = append(routes.Content, &n)
	}
	routes.Content = append(routes.Content, old)
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "routes"}, routes)
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "route" {
			top.Content[i+1] = root
		}
	}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(top); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	cfg, err := amconfig.Load(b.String())
	if err != nil {
		return nil, fmt.Errorf("add the users' routes: %w", err)
	}
	resolvePaths(c.dir, cfg)
	out := *c
	out.Alertmanager, out.Text = cfg, b.String()
	return &out, nil
}

// mapValue is the value of key in mapping m, nil if absent.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
