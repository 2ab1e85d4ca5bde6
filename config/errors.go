package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a problem at one place of a config file. It reads
// "file:line: key: what is wrong", the key being the path of YAML keys
// (gpu.sim.gpus[0].scenario); parts not known are left out.
type Error struct {
	File string
	Line int
	Key  string
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

var (
	// The YAML packages' messages, v2 and v3 alike.
	lineRe    = regexp.MustCompile(`^line (\d+): (.*)$`)
	syntaxRe  = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	unknownRe = regexp.MustCompile(`^field (.+) not found in type \S+$`)
	typeRe    = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	jobRe     = regexp.MustCompile(`job[ _]name "([^"]*)"`)
	dupRe     = regexp.MustCompile(`^mapping key "(.*)" already defined at line \d+$`)
	// yaml.v2's words for the same, from Prometheus's loader.
	dupV2Re = regexp.MustCompile(`^field (\S+) already set in type \S+$`)
	// A message of gpuscope's own validation: "gpu.sim.count: ...".
	pathRe = regexp.MustCompile(`^([a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_]+|\[\d+\])*): (.*)$`)
)

// errorFor turns an error of a decoder or of a section's validation into
// errors naming file, line and key. decoding: err came from a decoder, so
// the values the walk found bad are the cause (a decoder stops at the
// first value its custom unmarshaler refuses, without a line).
func (s *schema) errorFor(file string, err error, decoding bool) error {
	var errs []*Error
	if decoding {
		errs = append(errs, s.errs...)
	}
	for _, e := range s.explain(err) {
		// A decoder's error the schema cannot place (a flow-style file is
		// re-rendered before decoding) repeats one the walk found.
		if s.flow && e.Key == "" && len(s.errs) > 0 && decoding {
			continue
		}
		errs = append(errs, e)
	}
	if len(errs) == 0 {
		var e *Error
		if errors.As(err, &e) {
			c := *e
			errs = append(errs, &c)
		} else {
			errs = append(errs, s.keyed(0, err.Error()))
		}
	}
	// Checks across a scrape config name its job.
	if len(errs) == 1 && errs[0].Line == 0 && (errs[0].Key == "" || errs[0].Key == "scrape_configs") {
		if m := jobRe.FindStringSubmatch(err.Error()); m != nil {
			if p := s.job(m[1]); p != "" {
				errs[0].Key = p
			}
		}
	}
	for _, e := range errs {
		if e.File == "" {
			e.File = file
		}
		if e.Line == 0 && e.Key != "" {
			e.Line = s.lineOf(e.Key)
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	// The walk and the decoder may both report a value: keep the first
	// error for a key, or for a message, on a line.
	type at struct {
		line      int
		key, text string
	}
	seen := map[at]bool{}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		byKey, byText := at{line: e.Line, key: e.Key}, at{line: e.Line, text: e.Err.Error()}
		if e.Line > 0 && (seen[byKey] || seen[byText]) {
			continue
		}
		seen[byKey], seen[byText] = true, true
		out = append(out, e)
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// explain reads the line numbers in a YAML package's error; nil if it has
// none.
func (s *schema) explain(err error) []*Error {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "yaml: unmarshal errors:\n"); ok {
		var out []*Error
		for _, l := range strings.Split(rest, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, s.explainLine(l))
			}
		}
		return out
	}
	if m := syntaxRe.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return []*Error{{Line: line, Err: errors.New("invalid YAML: " + m[2] + syntaxHint(m[2]))}}
	}
	if lineRe.MatchString(msg) && !strings.Contains(msg, "\n") {
		return []*Error{s.explainLine(msg)}
	}
	return nil
}

func (s *schema) explainLine(l string) *Error {
	m := lineRe.FindStringSubmatch(l)
	if m == nil {
		return &Error{Err: errors.New(l)}
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[2]
	if u := unknownRe.FindStringSubmatch(rest); u != nil {
		p, ok := s.keyAt(line, u[1])
		if !ok {
			return &Error{Line: line, Key: u[1], Err: errors.New("unknown key")}
		}
		return &Error{Line: line, Key: p.path, Err: errors.New(unknownKey(u[1], candidates(p.parent), !strings.ContainsAny(p.path, ".[")))}
	}
	d := dupRe.FindStringSubmatch(rest)
	if d == nil {
		d = dupV2Re.FindStringSubmatch(rest)
	}
	if d != nil {
		if p, ok := s.keyAt(line, d[1]); ok {
			return &Error{Line: line, Key: p.path, Err: errors.New("key given twice; keep one")}
		}
	}
	if t := typeRe.FindStringSubmatch(rest); t != nil {
		tag, val, into := t[1], t[2], t[3]
		w := wantByName(into)
		if p, ok := s.valueAt(line, tag, val); ok {
			if p.typ != nil {
				typ := p.typ
				for typ.Kind() == reflect.Pointer {
					typ = typ.Elem()
				}
				if pw := want(typ); pw != "" && w == "" {
					w = pw
				}
			}
			if w == "" {
				return &Error{Line: line, Key: p.path, Err: errors.New(got(p.value) + " is not valid here")}
			}
			return &Error{Line: line, Key: p.path, Err: errors.New(got(p.value) + " is not " + w)}
		}
		g := strconv.Quote(val)
		switch tag {
		case "seq":
			g = "a list"
		case "map":
			g = "a mapping"
		}
		if w == "" {
			return &Error{Line: line, Err: errors.New(g + " is not valid here")}
		}
		return &Error{Line: line, Err: errors.New(g + " is not " + w)}
	}
	return s.keyed(line, rest)
}

// keyed reads the key path a validation message starts with
// ("nodes: files: ..."), as deep as the file has it.
func (s *schema) keyed(line int, msg string) *Error {
	m := pathRe.FindStringSubmatch(msg)
	if m == nil {
		return &Error{Line: line, Err: errors.New(msg)}
	}
	key, rest := m[1], m[2]
	if !s.has(key) {
		// Prometheus names a key without its section
		// ("scrape_protocols: unknown scrape protocol").
		p, ok := s.keyAt(-1, key)
		if !ok {
			return &Error{Line: line, Err: errors.New(msg)}
		}
		key = p.path
	}
	for {
		n := pathRe.FindStringSubmatch(rest)
		if n == nil || !s.exact(key+"."+n[1]) {
			break
		}
		key, rest = key+"."+n[1], n[2]
	}
	return &Error{Line: line, Key: key, Err: errors.New(rest)}
}

// job is the path of the last scrape config with job_name name.
func (s *schema) job(name string) string {
	path := ""
	for _, p := range s.places {
		if strings.HasPrefix(p.path, "scrape_configs[") && strings.HasSuffix(p.path, "].job_name") &&
			strings.Count(p.path, "[") == 1 && p.value != nil && p.value.Value == name {
			path = strings.TrimSuffix(p.path, ".job_name")
		}
	}
	return path
}

// has says whether path is a key the file has, or a key below one of its
// sections.
func (s *schema) has(path string) bool {
	head, _, _ := strings.Cut(path, ".")
	head, _, _ = strings.Cut(head, "[")
	for _, p := range s.places {
		if p.path == path || p.path == head {
			return true
		}
	}
	return false
}

// exact says whether the file has key path.
func (s *schema) exact(path string) bool {
	for _, p := range s.places {
		if p.path == path {
			return true
		}
	}
	return false
}

// lineOf is the line of path, or of the nearest key above it that the
// file has; 0 if none.
func (s *schema) lineOf(path string) int {
	for path != "" {
		for _, p := range s.places {
			if p.path == path {
				return p.line()
			}
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
	return 0
}

// keyAt finds the key named name on line; a flow-style file may have been
// re-rendered before decoding, so a name used once anywhere will do too.
func (s *schema) keyAt(line int, name string) (place, bool) {
	var byName []place
	for _, p := range s.places {
		if p.key == nil || p.key.Value != name {
			continue
		}
		if p.key.Line == line {
			return p, true
		}
		byName = append(byName, p)
	}
	if len(byName) == 1 {
		return byName[0], true
	}
	return place{}, false
}

// valueAt finds the deepest value on line with the tag and (possibly
// shortened: "abcdefg...") text of a decoder's type error.
func (s *schema) valueAt(line int, tag, val string) (place, bool) {
	var found place
	ok := false
	for _, p := range s.places {
		v := unalias(p.value)
		if v == nil || v.Line != line || !sameValue(v, tag, val) {
			continue
		}
		found, ok = p, true
	}
	return found, ok
}

func sameValue(v *yaml.Node, tag, val string) bool {
	switch tag {
	case "seq":
		return v.Kind == yaml.SequenceNode
	case "map":
		return v.Kind == yaml.MappingNode
	}
	if v.Kind != yaml.ScalarNode {
		return false
	}
	if short, ok := strings.CutSuffix(val, "..."); ok && len(val) == 10 {
		return strings.HasPrefix(v.Value, short)
	}
	return v.Value == val
}

// cleanDecodeError words a decoder's error about one value without Go
// type names or the line of the value decoded alone.
func cleanDecodeError(msg string) string {
	msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n")
	msg = strings.TrimSpace(msg)
	if m := lineRe.FindStringSubmatch(msg); m != nil {
		msg = m[2]
	}
	if t := typeRe.FindStringSubmatch(msg); t != nil {
		g := strconv.Quote(t[2])
		switch t[1] {
		case "seq":
			g = "a list"
		case "map":
			g = "a mapping"
		}
		if w := wantByName(t[3]); w != "" {
			return g + " is not " + w
		}
		return g + " is not valid here"
	}
	return msg
}

// syntaxHint says what usually causes the YAML parser's complaint: it
// reports where it noticed the problem, often a line before the one to
// fix.
func syntaxHint(msg string) string {
	switch {
	case strings.Contains(msg, "mapping values are not allowed"),
		strings.Contains(msg, "did not find expected key"),
		strings.Contains(msg, "could not find expected ':'"),
		strings.Contains(msg, "block sequence entries are not allowed"):
		return " (check the indentation of this line and the next: YAML nests by indentation, with spaces, and a key needs \"key: value\")"
	case strings.Contains(msg, "found character that cannot start any token"):
		return " (a tab, or a character such as @ or ` at the start of a value: indent with spaces, and quote such values)"
	}
	return ""
}
