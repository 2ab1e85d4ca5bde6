package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	amconfig "github.com/prometheus/alertmanager/config"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/alertmanager"
)

// The alertmanager: section is an alertmanager.yml, read by Alertmanager's
// own loader (yaml.v2), or {config_file: path} naming one. Its errors are
// worded as the rest of the file's: the section's lines are handed to the
// loader where they stand in gpuscope.yml (the other lines blank), so the
// loader's line numbers are the file's, and the schema walk knows
// Alertmanager's keys (alertmanagerShape) for "did you mean".

// alertmanagerKey is the section's key.
const alertmanagerKey = "alertmanager"

// alertmanagerNode makes the section a key the decoder of gpuscope's
// sections knows, and takes it as it is: loadAlertmanager reads it, from
// the file's lines, with Alertmanager's loader.
type alertmanagerNode struct{}

func (*alertmanagerNode) UnmarshalYAML(*yaml.Node) error { return nil }

var alertmanagerNodeType = reflect.TypeFor[alertmanagerNode]()

// alertmanagerShape is what the schema walk takes the section for: the
// keys of an alertmanager.yml (Alertmanager's Config, whose fields are
// read here so that a key added upstream is known), and config_file
// (withFile). The struct has no unmarshaler of its own, so an unknown
// key is named with the keys it could be.
func alertmanagerShape(withFile bool) reflect.Type {
	var fields []reflect.StructField
	if withFile {
		fields = append(fields, reflect.StructField{Name: "ConfigFile", Type: reflect.TypeFor[string](), Tag: `yaml:"config_file"`})
	}
	t := reflect.TypeFor[amconfig.Config]()
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			fields = append(fields, reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag})
		}
	}
	return reflect.StructOf(fields)
}

// loadAlertmanager loads the alertmanager: section of the file (data,
// whose YAML root is root): inline, or the file config_file names,
// relative to the file's folder. No section is a config that keeps alerts
// and sends them to nobody.
func loadAlertmanager(data []byte, file string, root *yaml.Node, s *lazySchema) (*alertmanager.Config, error) {
	dir := ""
	if file != "" {
		dir = filepath.Dir(file)
	}
	key, value := sectionOf(root, alertmanagerKey)
	if value == nil || isNull(value) {
		return alertmanager.Load("", dir)
	}
	if value.Kind == yaml.MappingNode {
		if f := mappingValue(value, "config_file"); f != nil {
			if len(value.Content) > 2 {
				return nil, s.errorFor(file, errors.New("alertmanager.config_file: give either config_file or the alertmanager.yml settings, not both"), false)
			}
			path := f.Value
			if path != "" && !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			c, err := loadAlertmanagerFile(path)
			if err != nil {
				// Its own errors name the other file: say which key led there.
				return nil, &Error{File: file, Line: f.Line, Key: alertmanagerKey + ".config_file", Err: err}
			}
			return c, nil
		}
	}
	c, err := alertmanager.Load(sectionText(data, root, key, value), dir)
	if err != nil {
		if s.s == nil {
			s.s = walkFile(s.root)
		}
		return nil, s.s.alertmanagerError(file, err, alertmanagerKey)
	}
	return c, nil
}

// loadAlertmanagerFile loads an alertmanager.yml of its own; errors name
// it, its line and key.
func loadAlertmanagerFile(path string) (*alertmanager.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := alertmanager.Load(string(data), filepath.Dir(path))
	if err != nil {
		var doc yaml.Node
		if yerr := yaml.Unmarshal(data, &doc); yerr != nil || len(doc.Content) == 0 {
			return nil, (&schema{}).errorFor(path, err, true)
		}
		s := &schema{budget: walkBudget}
		s.walkRoot(doc.Content[0], alertmanagerShape(false), true)
		return nil, s.alertmanagerError(path, err, "")
	}
	return c, nil
}

// sectionOf finds the top-level key name and its value.
func sectionOf(root *yaml.Node, name string) (key, value *yaml.Node) {
	if root == nil {
		return nil, nil
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == name {
			return root.Content[i], root.Content[i+1]
		}
	}
	return nil, nil
}

// sectionText is the section's value as a text of its own that keeps the
// file's line numbers: its lines where they are, outdented to the left
// margin, the others blank. A value in flow style ({...}) is rendered
// anew, starting on its key's line.
func sectionText(data []byte, root, key, value *yaml.Node) string {
	if root.Style&yaml.FlowStyle != 0 || value.Style&yaml.FlowStyle != 0 || value.Line == key.Line || value.Kind != yaml.MappingNode {
		b, err := yaml.Marshal(value)
		if err != nil {
			return ""
		}
		return strings.Repeat("\n", key.Line-1) + string(b)
	}
	lines := strings.SplitAfter(string(data), "\n")
	first, last := key.Line+1, len(lines)
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i] == key && i+2 < len(root.Content) {
			last = root.Content[i+2].Line - 1
		}
	}
	indent := value.Column - 1
	var b strings.Builder
	for i, l := range lines {
		n := i + 1
		switch {
		case n < first || n > last:
			if strings.HasSuffix(l, "\n") {
				b.WriteString("\n")
			}
		case len(l)-len(strings.TrimLeft(l, " ")) >= indent:
			b.WriteString(l[indent:])
		default: // a blank or comment line left of the section
			b.WriteString(strings.TrimLeft(l, " \t"))
		}
	}
	return b.String()
}

// walkRoot walks a document of its own whose top level decodes into t.
func (s *schema) walkRoot(root *yaml.Node, t reflect.Type, v2 bool) {
	if root.Kind != yaml.MappingNode {
		s.walk(root, t, "", v2)
		return
	}
	fields := yamlFields(t)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		ft, ok := fields.types[k.Value]
		s.places = append(s.places, place{path: k.Value, key: k, value: v, typ: ft, parent: t, v2: v2})
		if !ok {
			s.fail(k.Line, k.Value, unknownKey(k.Value, fields.names, false))
			continue
		}
		s.walk(v, ft, k.Value, v2)
	}
}

// under is the part of s at path prefix and below ("": all of it).
func (s *schema) under(prefix string) *schema {
	in := func(path string) bool {
		return prefix == "" || path == prefix || strings.HasPrefix(path, prefix+".") || strings.HasPrefix(path, prefix+"[")
	}
	sub := &schema{flow: s.flow}
	for _, p := range s.places {
		if in(p.path) {
			sub.places = append(sub.places, p)
		}
	}
	for _, e := range s.errs {
		if in(e.Key) {
			sub.errs = append(sub.errs, e)
		}
	}
	return sub
}

var quotedRe = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// alertmanagerError words an error of Alertmanager's loader about the
// keys at prefix ("alertmanager", or "" for a file of its own). The
// loader's YAML errors carry lines; its checks do not, so the key is
// found: the deepest value that fails the same way decoded alone (a
// receiver without a name), else the value the message quotes (an
// undefined receiver, a name given twice), else the section.
func (s *schema) alertmanagerError(file string, err error, prefix string) error {
	sub := s.under(prefix)
	if len(sub.explain(err)) == 0 {
		err = sub.locate(err, prefix)
	}
	return sub.errorFor(file, err, true)
}

func (s *schema) locate(err error, prefix string) error {
	msg := err.Error()
	byDepth := slices.Clone(s.places)
	depth := func(p place) int { return strings.Count(p.path, ".") + strings.Count(p.path, "[") }
	slices.SortStableFunc(byDepth, func(a, b place) int { return depth(b) - depth(a) })
	for _, p := range byDepth {
		if p.path == prefix || p.typ == nil || p.value == nil {
			continue
		}
		if e := decodeAlone(p.value, p.typ, true); e != nil && e.Error() == msg {
			return &Error{Line: p.line(), Key: p.path, Err: err}
		}
	}
	// gpuscope's own wrapping names the key: "templates: ...",
	// "receivers: receiver "x": ..." (the receiver named x, if quoted).
	if section, rest, ok := strings.Cut(msg, ": "); ok && s.exact(join(prefix, section)) {
		key := join(prefix, section)
		if p, ok := s.quoted(rest, key); ok {
			return &Error{Line: p.line(), Key: p.path, Err: errors.New(rest)}
		}
		return &Error{Line: s.lineOf(key), Key: key, Err: errors.New(rest)}
	}
	// Alertmanager's checks quote the value: an undefined receiver, a
	// name given twice (the last is the second).
	if p, ok := s.quoted(msg, prefix); ok {
		return &Error{Line: p.line(), Key: p.path, Err: err}
	}
	// "no global SMTP smarthost set": the first receiver that needs it.
	if p, ok := s.integrationIn(msg); ok {
		return &Error{Line: p.line(), Key: p.path, Err: err}
	}
	return &Error{Key: prefix, Err: err}
}

// integrationIn finds the first integration config of the kind msg names
// (email for SMTP, slack, pagerduty, ...), the kinds being the receiver's
// *_configs keys.
func (s *schema) integrationIn(msg string) (place, bool) {
	lower := strings.ToLower(strings.ReplaceAll(msg, "SMTP", "email"))
	var kinds []string
	for _, name := range yamlFields(reflect.TypeFor[amconfig.Receiver]()).names {
		if kind, ok := strings.CutSuffix(name, "_configs"); ok && strings.Contains(lower, kind) {
			kinds = append(kinds, kind)
		}
	}
	// msteamsv2 over msteams: the longest name that matches.
	slices.SortFunc(kinds, func(a, b string) int { return len(b) - len(a) })
	for _, kind := range kinds {
		for _, p := range s.places {
			if p.key == nil && strings.Contains(p.path, "receivers[") && strings.Contains(p.path, "."+kind+"_configs[") &&
				strings.HasSuffix(p.path, "]") && strings.Count(p.path, "[") == 2 {
				return p, true
			}
		}
	}
	return place{}, false
}

// quoted finds the last scalar at path under or below it whose value is
// the first one msg quotes.
func (s *schema) quoted(msg, under string) (place, bool) {
	m := quotedRe.FindStringSubmatch(msg)
	if m == nil {
		return place{}, false
	}
	value, err := strconv.Unquote(m[0])
	if err != nil {
		value = m[1]
	}
	var found place
	ok := false
	for _, p := range s.places {
		if v := unalias(p.value); v == nil || v.Kind != yaml.ScalarNode || v.Value != value {
			continue
		}
		if under == "" || strings.HasPrefix(p.path, under+"[") || strings.HasPrefix(p.path, under+".") {
			found, ok = p, true
		}
	}
	return found, ok
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// alertmanagerWarnings are the template globs of c that match no file:
// valid to Alertmanager, most likely a mistake.
func alertmanagerWarnings(c *alertmanager.Config, file string, root *yaml.Node) []string {
	var out []string
	var s *schema
	_, section := sectionOf(root, alertmanagerKey)
	for i, pat := range c.Alertmanager.Templates {
		if m, err := filepath.Glob(pat); err != nil || len(m) > 0 {
			continue
		}
		if s == nil {
			s = walkFile(root)
		}
		key := fmt.Sprintf("%s.templates[%d]", alertmanagerKey, i)
		what := fmt.Sprintf("%q matches no file; no templates are loaded from it", pat)
		if section != nil && section.Kind == yaml.MappingNode && mappingValue(section, "config_file") != nil {
			key, what = alertmanagerKey+".config_file", fmt.Sprintf("templates[%d]: %s", i, what)
		}
		w := &Error{File: file, Line: s.lineOf(key), Key: key, Err: errors.New(what)}
		out = append(out, w.Error())
	}
	return out
}
