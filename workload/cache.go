package workload

import (
	"strings"
	"sync"
)

// DefaultMaxEntries is Options.MaxEntries when it is 0.
const DefaultMaxEntries = 1 << 16

// Options configure a Cache.
type Options struct {
	// Resolvers are tried in order; nil means DefaultResolvers.
	Resolvers []Resolver
	// MaxEntries bounds the cache. When a new path would exceed it, the
	// cache is emptied and refills as paths are asked for again: cheaper
	// and simpler than an eviction order for a bound that a host with
	// fewer cgroups than this never reaches, and that only stops a caller
	// who never calls Forget from growing without end. 0 means
	// DefaultMaxEntries.
	MaxEntries int
}

// Cache holds the identity of each cgroup path, so that it is computed
// once per cgroup and not once per scrape. The caller calls Forget when
// cAdvisor forgets the container (its cgroup is gone); a path that comes
// back is resolved anew. Safe for concurrent use.
type Cache struct {
	rs  []Resolver
	max int

	mu      sync.RWMutex
	entries map[string]cacheEntry
}

type cacheEntry struct {
	id  Identity
	key mdKey
}

// mdKey is the part of Metadata that resolvers read. A Get with other
// metadata than the cached identity was computed from resolves again, so
// a name that arrives after the first sighting (cAdvisor's runtime
// handler claiming a container the GPU side saw first) is not lost.
type mdKey struct {
	name, image, runtime, user       string
	project, service, number, oneoff string
}

func keyOf(md Metadata) mdKey {
	k := mdKey{name: md.Name, image: md.Image, runtime: md.Runtime, user: md.User}
	if len(md.Labels) > 0 {
		k.project = md.Labels[ComposeProjectLabel]
		k.service = md.Labels[ComposeServiceLabel]
		k.number = md.Labels[ComposeNumberLabel]
		k.oneoff = md.Labels[ComposeOneoffLabel]
	}
	return k
}

// NewCache returns an empty Cache. o may be nil.
func NewCache(o *Options) *Cache {
	c := &Cache{max: DefaultMaxEntries, entries: map[string]cacheEntry{}}
	if o != nil {
		c.rs = o.Resolvers
		if o.MaxEntries > 0 {
			c.max = o.MaxEntries
		}
	}
	return c
}

// Get returns the identity of the cgroup at path. A cached identity is
// returned when md is empty (a caller that knows only the path, such as
// the GPU collector's pid→cgroup join, gets the name cAdvisor's side
// supplied) or carries the same metadata the identity was computed from;
// otherwise the path is resolved with md and the result cached.
func (c *Cache) Get(path string, md Metadata) Identity {
	key := keyOf(md)
	c.mu.RLock()
	e, ok := c.entries[path]
	c.mu.RUnlock()
	if ok && (key == mdKey{} || key == e.key) {
		return e.id
	}
	id := ResolveWith(c.rs, path, md)
	c.mu.Lock()
	if _, had := c.entries[path]; !had && len(c.entries) >= c.max {
		clear(c.entries)
	}
	// The map keeps its own copy of the key, so a path cut from a larger
	// string (a /proc file read whole) does not keep all of it alive.
	c.entries[strings.Clone(path)] = cacheEntry{id: id, key: key}
	c.mu.Unlock()
	return id
}

// Forget drops the identity of the cgroup at path.
func (c *Cache) Forget(path string) {
	c.mu.Lock()
	delete(c.entries, path)
	c.mu.Unlock()
}

// Len returns how many paths are cached.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
