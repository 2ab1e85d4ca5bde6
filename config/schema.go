package config

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/dns"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/http"
	"github.com/prometheus/prometheus/model/labels"
	yaml2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
)

// schema is what a walk of the file beside the Go types it decodes into
// learnt: the path and line of every key, and the values that do not
// decode. The decoders' own errors name a line and a Go type, or nothing
// at all (a bad duration); the schema turns them into the file's line and
// the key's path (gpu.sim.gpus[0].lost_at).
type schema struct {
	places  []place
	errs    []*Error
	flow    bool                // the file is one flow mapping, re-rendered before decoding
	budget  int                 // nodes left to visit
	aliased map[*yaml.Node]bool // anchored values reached through an alias
}

// walkBudget bounds the nodes a walk visits, far above any real config.
const walkBudget = 100_000

// place is one key (or list item) of the file.
type place struct {
	path   string
	key    *yaml.Node // nil for a list item
	value  *yaml.Node
	typ    reflect.Type // what value decodes into; nil: not known
	parent reflect.Type // the struct holding key; nil: a map, a list or the top level
	v2     bool         // decoded by Prometheus's config package (yaml.v2)
}

func (p place) line() int {
	if p.key != nil {
		return p.key.Line
	}
	return p.value.Line
}

var (
	durationType = reflect.TypeFor[model.Duration]()
	bytesType    = reflect.TypeFor[units.Base2Bytes]()
	sdConfigs    = reflect.TypeFor[discovery.Configs]()

	v2Unmarshaler   = reflect.TypeFor[yaml2.Unmarshaler]()
	v3Unmarshaler   = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// stand-ins are types whose custom unmarshalers read a shape of their own;
// the walk follows the shape instead.
var standIns = map[reflect.Type]reflect.Type{
	reflect.TypeFor[labels.Labels](): reflect.TypeFor[map[string]string](),
	reflect.TypeFor[discovery.StaticConfig](): reflect.TypeFor[[]struct {
		Targets []string          `yaml:"targets"`
		Labels  map[string]string `yaml:"labels"`
	}](),
}

// sdTypes are the service discovery sections a scrape or Alertmanager
// config takes inline, for the discovery packages gpuscope links.
var sdTypes = map[string]reflect.Type{
	"static_configs":  reflect.TypeFor[discovery.StaticConfig](),
	"file_sd_configs": reflect.TypeFor[[]*file.SDConfig](),
	"dns_sd_configs":  reflect.TypeFor[[]*dns.SDConfig](),
	"http_sd_configs": reflect.TypeFor[[]*http.SDConfig](),
}

// sdKeys are the inline service discovery keys and their types (nil for
// a registered mechanism the walk does not know the type of).
func sdKeys() map[string]reflect.Type {
	keys := map[string]reflect.Type{}
	for _, name := range discovery.RegisteredConfigNames() {
		k := name + "_sd_configs"
		if name == "static" {
			k = "static_configs"
		}
		keys[k] = sdTypes[k]
	}
	return keys
}

// walkFile walks a whole config document. Top-level keys are Prometheus
// sections or gpuscope's own.
func walkFile(root *yaml.Node) *schema {
	s := &schema{budget: walkBudget}
	if root == nil || root.Kind != yaml.MappingNode {
		return s
	}
	s.flow = root.Style&yaml.FlowStyle != 0
	promT, ownT := reflect.TypeFor[promconfig.Config](), reflect.TypeFor[own]()
	promFields, ownFields := yamlFields(promT), yamlFields(ownT)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == "<<" {
			continue
		}
		if t, ok := promFields.types[k.Value]; ok {
			s.places = append(s.places, place{path: k.Value, key: k, value: v, typ: t, parent: promT, v2: true})
			s.walk(v, t, k.Value, true)
			continue
		}
		t, ok := ownFields.types[k.Value]
		if t == alertmanagerNodeType {
			// An alertmanager.yml, read by Alertmanager's loader (yaml.v2).
			t = alertmanagerShape(true)
			s.places = append(s.places, place{path: k.Value, key: k, value: v, typ: t, parent: ownT, v2: true})
			s.walk(v, t, k.Value, true)
			continue
		}
		s.places = append(s.places, place{path: k.Value, key: k, value: v, typ: t, parent: ownT})
		if !ok {
			s.fail(k.Line, k.Value, unknownKey(k.Value, topLevelKeys(), true))
			continue
		}
		s.walk(v, t, k.Value, false)
	}
	return s
}

// topLevelKeys are the sections a file may have.
func topLevelKeys() []string {
	keys := append(yamlFields(reflect.TypeFor[promconfig.Config]()).names, yamlFields(reflect.TypeFor[own]()).names...)
	sort.Strings(keys)
	return keys
}

func (s *schema) fail(line int, path, msg string) {
	s.errs = append(s.errs, &Error{Line: line, Key: path, Err: errors.New(msg)})
}

// walk checks node n, which decodes into a t, and records the keys below
// it.
func (s *schema) walk(n *yaml.Node, t reflect.Type, path string, v2 bool) {
	if n != nil && n.Kind == yaml.AliasNode {
		// An anchored value is checked once, where it is written.
		n = unalias(n)
		if s.aliased[n] {
			return
		}
		if s.aliased == nil {
			s.aliased = map[*yaml.Node]bool{}
		}
		s.aliased[n] = true
	}
	if n == nil || t == nil || isNull(n) || s.budget <= 0 {
		return
	}
	s.budget--
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if st, ok := standIns[t]; ok {
		t = st
	}
	custom := hasUnmarshaler(t)
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		// A custom unmarshaler may take keys the struct does not name
		// (the inline service discovery sections, for one): unknown keys
		// are left to it, and its error is explained later.
		s.mapping(n, t, path, v2, !custom)
		return
	case custom || t == durationType || t == bytesType:
		s.leaf(n, t, path, v2)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		s.fail(n.Line, path, got(n)+" is not "+want(t))
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			s.fail(n.Line, path, got(n)+" is not "+want(t))
			return
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			s.places = append(s.places, place{path: p, value: item, typ: t.Elem(), v2: v2})
			s.walk(item, t.Elem(), p, v2)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			msg := got(n) + " is not " + want(t)
			// A price per GPU-hour is by model: the flat price a user
			// writes first gets its spelling.
			if path == "accounting.price_per_gpu_hour" && n.Kind == yaml.ScalarNode {
				msg += " of GPU model to price; one price for every model is {default: " + n.Value + "}"
			}
			s.fail(n.Line, path, msg)
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := path + "." + k.Value
			s.places = append(s.places, place{path: p, key: k, value: v, typ: t.Elem(), v2: v2})
			s.walk(v, t.Elem(), p, v2)
		}
	case reflect.Interface:
	default:
		s.leaf(n, t, path, v2)
	}
}

// mapping walks the keys of a struct. strict: a key the struct does not
// name is an error.
func (s *schema) mapping(n *yaml.Node, t reflect.Type, path string, v2, strict bool) {
	fields := yamlFields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" {
			continue
		}
		p := path + "." + k.Value
		ft, ok := fields.types[k.Value]
		if !ok && fields.sd {
			ft, ok = sdKeys()[k.Value]
		}
		s.places = append(s.places, place{path: p, key: k, value: v, typ: ft, parent: t, v2: v2})
		switch {
		case ok:
			s.walk(v, ft, p, v2)
		case strict && !fields.anyKey:
			s.fail(k.Line, p, unknownKey(k.Value, candidates(t), false))
		}
	}
}

// leaf decodes n alone, with the decoder that will decode it in the file.
func (s *schema) leaf(n *yaml.Node, t reflect.Type, path string, v2 bool) {
	err := decodeAlone(n, t, v2)
	if err == nil {
		return
	}
	msg := ""
	if w := want(t); w != "" && (t == durationType || t == bytesType || !hasUnmarshaler(t)) {
		msg = got(n) + " is not " + w
	} else {
		msg = cleanDecodeError(err.Error())
		// A section's own unmarshaler may name the section itself.
		if m := pathRe.FindStringSubmatch(msg); m != nil && strings.HasPrefix(path, m[1]) {
			msg = m[2]
		}
	}
	s.fail(n.Line, path, msg)
}

func decodeAlone(n *yaml.Node, t reflect.Type, v2 bool) (err error) {
	p := reflect.New(t).Interface()
	if !v2 {
		return n.Decode(p)
	}
	text, err := yaml.Marshal(n)
	if err != nil {
		return nil // cannot tell; the decoder will
	}
	return yaml2.UnmarshalStrict(text, p)
}

func unalias(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func hasUnmarshaler(t reflect.Type) bool {
	for _, u := range []reflect.Type{v2Unmarshaler, v3Unmarshaler, textUnmarshaler} {
		if t.Implements(u) || reflect.PointerTo(t).Implements(u) {
			return true
		}
	}
	return false
}

// got names what the file has, for "got is not want".
func got(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return strconv.Quote(n.Value)
}

// want names what a key of type t takes; "" when it cannot be said
// without the Go type's name.
func want(t reflect.Type) string {
	switch t {
	case durationType:
		return "a duration (e.g. 15s, 1m)"
	case bytesType:
		return "a size (e.g. 512MB, 50GB)"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number (0 or more)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return `a list (e.g. [a, b], or one "- item" line per item)`
	case reflect.Map, reflect.Struct:
		return "a mapping (key: value lines, or {key: value})"
	}
	return ""
}

// wantByName is want for a decoder error's Go type name, for values the
// walk did not reach.
func wantByName(name string) string {
	switch {
	case name == "bool":
		return want(reflect.TypeFor[bool]())
	case strings.HasPrefix(name, "int"):
		return want(reflect.TypeFor[int]())
	case strings.HasPrefix(name, "uint"):
		return want(reflect.TypeFor[uint]())
	case strings.HasPrefix(name, "float"):
		return want(reflect.TypeFor[float64]())
	case name == "string":
		return want(reflect.TypeFor[string]())
	case strings.HasPrefix(name, "[]"):
		return want(reflect.TypeFor[[]string]())
	case strings.HasPrefix(name, "map["):
		return want(reflect.TypeFor[map[string]string]())
	}
	return ""
}

// fieldSet is the keys a struct takes.
type fieldSet struct {
	names  []string // in declaration order
	types  map[string]reflect.Type
	anyKey bool // an inline map takes any key
	sd     bool // inline service discovery sections (*_sd_configs)
}

// yamlFields lists the keys of struct t as both YAML packages name them:
// the tag's name, or the field name in lower case; inline structs add
// their keys.
func yamlFields(t reflect.Type) fieldSet {
	fs := fieldSet{types: map[string]reflect.Type{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Type == sdConfigs {
				fs.sd = true
			}
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if slices.Contains(strings.Split(opts, ","), "inline") {
				if f.Type.Kind() == reflect.Map {
					fs.anyKey = true
					continue
				}
				add(f.Type)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if _, dup := fs.types[name]; !dup {
				fs.names = append(fs.names, name)
			}
			fs.types[name] = f.Type
		}
	}
	add(t)
	return fs
}

// candidates are the keys a struct takes, for "did you mean".
func candidates(t reflect.Type) []string {
	if t == nil {
		return nil
	}
	if t == reflect.TypeFor[promconfig.Config]() || t == reflect.TypeFor[own]() {
		return topLevelKeys()
	}
	fs := yamlFields(t)
	keys := slices.Clone(fs.names)
	if fs.sd {
		for k := range sdKeys() {
			keys = append(keys, k)
		}
		sort.Strings(keys[len(fs.names):])
	}
	return keys
}

// unknownKey is the message for a key no struct field takes: the closest
// valid key, or the valid keys when there are few.
func unknownKey(key string, valid []string, topLevel bool) string {
	if strings.HasSuffix(key, "_sd_configs") && slices.Contains(valid, "file_sd_configs") {
		var sd []string
		for k := range sdKeys() {
			sd = append(sd, k)
		}
		sort.Strings(sd)
		return "unknown key (the service discovery gpuscope has: " + strings.Join(sd, ", ") + ")"
	}
	if best := closest(key, valid); best != "" {
		return fmt.Sprintf("unknown key (did you mean %s?)", best)
	}
	switch {
	case topLevel:
		return "unknown section (want one of " + strings.Join(valid, ", ") + ")"
	case len(valid) > 0 && len(valid) <= 16:
		return "unknown key (want one of " + strings.Join(valid, ", ") + ")"
	}
	return "unknown key"
}

// closest is the valid key nearest to key: within an edit distance of a
// quarter of its length (at least 2), or one that starts with it or it with
// one.
func closest(key string, valid []string) string {
	best, bestD := "", 0
	for _, v := range valid {
		d := levenshtein(strings.ToLower(key), v)
		if best == "" || d < bestD {
			best, bestD = v, d
		}
	}
	if best != "" && bestD <= max(2, len(key)/4) {
		return best
	}
	if len(key) >= 4 {
		for _, v := range valid {
			if strings.HasPrefix(v, key) || strings.HasPrefix(key, v) {
				return v
			}
		}
	}
	return ""
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
