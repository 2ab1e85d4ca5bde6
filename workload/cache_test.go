package workload

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// counting counts its calls and resolves every path as docker.
type counting struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) Runtime() string { return "docker" }

func (c *counting) Resolve(path string, md Metadata) (Identity, bool) {
	c.mu.Lock()
	c.calls[path]++
	c.mu.Unlock()
	w := md.Name
	if w == "" {
		w = "anon"
	}
	return Identity{Workload: w, Runtime: "docker"}, true
}

func (c *counting) n(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[path]
}

func TestCache(t *testing.T) {
	cr := &counting{calls: map[string]int{}}
	c := NewCache(&Options{Resolvers: []Resolver{cr}})
	named := Metadata{Name: "llama-train", Image: "llama:1", Labels: map[string]string{"other": "x"}}

	t.Run("computed once per path", func(t *testing.T) {
		for range 3 {
			require.Equal(t, Identity{Workload: "llama-train", Runtime: "docker", Image: "llama:1"}, c.Get("/a", named))
		}
		require.Equal(t, 1, cr.n("/a"))
		require.Equal(t, 1, c.Len())
	})
	t.Run("labels resolvers don't read don't matter", func(t *testing.T) {
		md := named
		md.Labels = map[string]string{"other": "y"}
		c.Get("/a", md)
		require.Equal(t, 1, cr.n("/a"))
	})
	t.Run("a caller with only the path gets the named identity", func(t *testing.T) {
		require.Equal(t, "llama-train", c.Get("/a", Metadata{}).Workload)
		require.Equal(t, 1, cr.n("/a"))
	})
	t.Run("metadata arriving after the path is used", func(t *testing.T) {
		require.Equal(t, "anon", c.Get("/b", Metadata{}).Workload)
		require.Equal(t, "late", c.Get("/b", Metadata{Name: "late"}).Workload)
		require.Equal(t, "late", c.Get("/b", Metadata{}).Workload)
		require.Equal(t, 2, cr.n("/b"))
	})
	t.Run("changed compose labels resolve again", func(t *testing.T) {
		md := named
		md.Labels = compose("app", "web", "2")
		c.Get("/a", md)
		require.Equal(t, 2, cr.n("/a"))
	})
	t.Run("forget", func(t *testing.T) {
		c.Forget("/a")
		c.Forget("/never-seen")
		require.Equal(t, 1, c.Len())
		c.Get("/a", named)
		require.Equal(t, 3, cr.n("/a"))
	})
}

func TestCacheDefaults(t *testing.T) {
	c := NewCache(nil)
	require.Equal(t, Resolve("/system.slice/docker-"+id1+".scope", Metadata{Name: "x"}),
		c.Get("/system.slice/docker-"+id1+".scope", Metadata{Name: "x"}))
	require.Equal(t, DefaultMaxEntries, c.max)
}

func TestCacheBound(t *testing.T) {
	c := NewCache(&Options{MaxEntries: 4})
	for i := range 4 {
		c.Get(fmt.Sprintf("/p%d", i), Metadata{})
	}
	require.Equal(t, 4, c.Len())
	c.Get("/p0", Metadata{Name: "again"}) // a known path never empties it
	require.Equal(t, 4, c.Len())
	c.Get("/p4", Metadata{})
	require.Equal(t, 1, c.Len(), "a fifth path empties the cache")
	require.Equal(t, Identity{Workload: "/p0", Runtime: "cgroup"}, c.Get("/p0", Metadata{}))
}

func TestCacheConcurrent(t *testing.T) {
	cr := &counting{calls: map[string]int{}}
	c := NewCache(&Options{Resolvers: []Resolver{cr}})
	paths := make([]string, 50)
	for i := range paths {
		paths[i] = fmt.Sprintf("/docker/%064x", i)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				p := paths[(i+g)%len(paths)]
				switch i % 10 {
				case 0:
					c.Forget(p)
				case 1:
					require.Equal(t, "n", c.Get(p, Metadata{Name: "n"}).Workload)
				default:
					require.Contains(t, []string{"n", "anon"}, c.Get(p, Metadata{}).Workload)
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, c.Len(), len(paths))
}
