package workload

import (
	"testing"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"ordinary cgroup path", "/system.slice/docker-0123abcd.scope", "/system.slice/docker-0123abcd.scope"},
		{"systemd's own escapes stay", `/system.slice/system-getty\x2dstatic.slice`, `/system.slice/system-getty\x2dstatic.slice`},
		{"valid multi-byte UTF-8 stays", "/user.slice/Grüße-日本.scope", "/user.slice/Grüße-日本.scope"},
		{"an invalid byte", "/user.slice/bad\xff.scope", `/user.slice/bad\xff.scope`},
		{"a truncated sequence", "/a/\xe6\x97", `/a/\xe6\x97`},
		{"backslashes of an invalid path are doubled", "/a\\x2d/\xfe", `/a\\x2d/\xfe`},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LabelValue(tc.in)
			require.Equal(t, tc.want, got)
			require.True(t, utf8.ValidString(got))
			require.True(t, model.LabelValue(got).IsValid())
		})
	}
}

// TestLabelValueKeepsPathsApart: paths that differ only in their invalid
// bytes, or in an invalid byte against a backslash, stay apart, where
// strings.ToValidUTF8 would give them one series.
func TestLabelValueKeepsPathsApart(t *testing.T) {
	paths := []string{
		"/a\xff", "/a\xfe", "/a\xff\xfe", "/a\\xff\xfe", "/a\xff\\xfe", "/a\x80", "/a",
	}
	seen := map[string]string{}
	for _, p := range paths {
		v := LabelValue(p)
		if other, dup := seen[v]; dup {
			t.Fatalf("%q and %q both give %q", other, p, v)
		}
		seen[v] = p
	}
}

func FuzzLabelValue(f *testing.F) {
	f.Add("/system.slice/a.scope")
	f.Add("/a\xff\\b")
	f.Fuzz(func(t *testing.T, s string) {
		v := LabelValue(s)
		if !utf8.ValidString(v) {
			t.Fatalf("LabelValue(%q) = %q is not valid UTF-8", s, v)
		}
		if utf8.ValidString(s) && v != s {
			t.Fatalf("valid %q changed to %q", s, v)
		}
		// Injective on invalid strings: the escape can be undone.
		if !utf8.ValidString(s) {
			if back := unescapeLabelValue(v); back != s {
				t.Fatalf("LabelValue(%q) = %q does not undo to it (got %q)", s, v, back)
			}
		}
	})
}

// unescapeLabelValue undoes LabelValue's escape of an invalid string.
func unescapeLabelValue(v string) string {
	var out []byte
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			switch v[i+1] {
			case '\\':
				out = append(out, '\\')
				i++
				continue
			case 'x':
				if i+3 < len(v) {
					var c byte
					for _, h := range []byte(v[i+2 : i+4]) {
						c <<= 4
						switch {
						case h >= '0' && h <= '9':
							c |= h - '0'
						case h >= 'a' && h <= 'f':
							c |= h - 'a' + 10
						}
					}
					out = append(out, c)
					i += 3
					continue
				}
			}
		}
		out = append(out, v[i])
	}
	return string(out)
}
