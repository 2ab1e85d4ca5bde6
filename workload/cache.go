package workload

import (
	"strings"
	"sync"
	"time"
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
	// Users names the user label's uids from the host's passwd and finds
	// the owners of Slurm v2 jobs and rootful containers from their
	// processes. nil: the user is a uid, and only where the path names one.
	Users *Users
}

// Cache holds the identity of each cgroup path, so that it is computed
// once per cgroup and not once per scrape. The caller calls Forget when
// cAdvisor forgets the container (its cgroup is gone); a path that comes
// back is resolved anew. Safe for concurrent use.
//
// The user of an identity is kept stable, as a label that changes splits
// every series of the cgroup in two: an owner found from processes is
// kept for the cgroup's life, and an identity changes only when passwd
// renames its uid, or when the processes of a cgroup first seen empty
// show its owner (looked for again after ownerRetry, the wait doubling
// up to ownerRetryMax).
type Cache struct {
	rs    []Resolver
	max   int
	users *Users

	mu      sync.RWMutex
	entries map[string]cacheEntry
}

// How long an identity whose owner was not found waits before the owner
// is looked for again: an empty cgroup of a container or Slurm job is
// one in its first moments, or a Slurm allocation with no step yet.
const (
	ownerRetry    = 15 * time.Second
	ownerRetryMax = 5 * time.Minute
)

type cacheEntry struct {
	id  Identity
	key mdKey
	// uid is the owner found from the cgroup's processes, "" if none.
	uid string
	// named: the user is a uid named through Users, at generation gen.
	named bool
	gen   uint64
	// pending: the owner is to be found from processes and was not;
	// looked for again from retryAt (Unix ns), then after twice wait.
	pending bool
	retryAt int64
	wait    time.Duration
}

// mdKey is the part of Metadata that resolvers read. A Get with other
// metadata than the cached identity was computed from resolves again, so
// a name that arrives after the first sighting (cAdvisor's runtime
// handler claiming a container the GPU side saw first) is not lost.
type mdKey struct {
	name, image, runtime, user       string
	project, service, number, oneoff string
}

// metadata is what the resolvers read of the Metadata k was made of.
func (k mdKey) metadata() Metadata {
	md := Metadata{Name: k.name, Image: k.image, Runtime: k.runtime, User: k.user}
	if k.project != "" || k.service != "" || k.number != "" || k.oneoff != "" {
		md.Labels = map[string]string{ComposeProjectLabel: k.project, ComposeServiceLabel: k.service,
			ComposeNumberLabel: k.number, ComposeOneoffLabel: k.oneoff}
	}
	return md
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
		c.users = o.Users
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
// otherwise the path is resolved with md and the result cached. A cached
// identity is resolved again, from the metadata it was made of, when
// passwd renamed its user, or when its owner was not found and it is
// time to look again.
func (c *Cache) Get(path string, md Metadata) Identity {
	key := keyOf(md)
	var gen uint64
	if c.users != nil {
		gen = c.users.generation()
	}
	c.mu.RLock()
	e, ok := c.entries[path]
	c.mu.RUnlock()
	var prev *cacheEntry
	if ok && (key == mdKey{} || key == e.key) {
		if c.current(&e, gen) {
			return e.id
		}
		key, md = e.key, e.key.metadata()
	}
	if ok {
		prev = &e
	}
	ne := c.resolve(path, md, prev, gen)
	ne.key = key
	c.mu.Lock()
	if _, had := c.entries[path]; !had && len(c.entries) >= c.max {
		clear(c.entries)
	}
	// The map keeps its own copy of the key, so a path cut from a larger
	// string (a /proc file read whole) does not keep all of it alive.
	c.entries[strings.Clone(path)] = ne
	c.mu.Unlock()
	return ne.id
}

// current says whether e may be returned as it is.
func (c *Cache) current(e *cacheEntry, gen uint64) bool {
	if e.named && e.gen != gen {
		return false
	}
	return !e.pending || c.users.now().UnixNano() < e.retryAt
}

// resolve computes the identity of path. An owner prev found is kept.
func (c *Cache) resolve(path string, md Metadata, prev *cacheEntry, gen uint64) cacheEntry {
	id := match(c.rs, path, md)
	e := cacheEntry{gen: gen}
	if id.User == "" && c.users != nil && ownedByProcesses(id.Runtime) {
		if prev != nil && prev.uid != "" {
			e.uid = prev.uid
		} else if uid, found := c.users.owner(path, id.Runtime); found {
			e.uid = uid
		} else {
			e.pending, e.wait = true, ownerRetry
			if prev != nil && prev.pending {
				e.wait = min(2*prev.wait, ownerRetryMax)
			}
			e.retryAt = c.users.now().Add(e.wait).UnixNano()
		}
		id.User = e.uid
	}
	e.named = c.users != nil && isUID(id.User)
	e.id = finish(id, md, c.users)
	return e
}

// Users returns the Users the cache names owners with; nil if none.
func (c *Cache) Users() *Users { return c.users }

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
