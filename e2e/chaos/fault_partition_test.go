package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/internal/netfault"
	fsstate "github.com/flowstate-io/flowstate/state"
)

// link is a route or a worker's link to a server, which the nemesis can
// break and heal.
type link interface {
	Stall()
	Cut()
	Heal()
}

// partitionFault draws a partition, stalled (no byte either way, sockets
// open) or cut (connections reset) half the time each, healed after a
// few seconds: a server isolated from the other two (the stream leader
// half the time), the lease holder or another worker cut from every
// server, a bridge, one direction only, or a flapping partition.
func (n *nemesis) partitionFault() *fault {
	stall := n.rng.IntN(2) == 0
	mode := "cut"
	if stall {
		mode = "stall"
	}
	f := &fault{kind: kindPartition, hold: n.between(time.Second, 8*time.Second)}
	var links []link
	switch n.rng.IntN(7) {
	case 0, 1:
		i, what := n.rng.IntN(len(n.s.servers)), ""
		if n.rng.IntN(2) == 0 {
			if l := streamLeader(n.js); l >= 0 {
				i, what = l, " (the stream leader)"
			}
		}
		links = n.routesOf(i)
		f.what = fmt.Sprintf("%s the routes of s%d%s: isolated from the other servers", mode, i, what)
	case 2, 3:
		w, what := n.rng.IntN(len(n.s.workers)), ""
		if n.rng.IntN(2) == 0 {
			if h := n.leaseHolder(); h >= 0 {
				w, what = h, " (the lease holder)"
			}
		}
		for _, p := range n.s.links[w] {
			links = append(links, p)
		}
		f.what = fmt.Sprintf("%s every link of %s%s: cut off from every server", mode, n.s.workers[w].name, what)
	case 4:
		a := n.rng.IntN(len(n.s.servers))
		b := (a + 1 + n.rng.IntN(len(n.s.servers)-1)) % len(n.s.servers)
		links = []link{n.s.cluster.Route(a, b)}
		f.what = fmt.Sprintf("%s the route s%d-s%d: a bridge, both see the third server", mode, a, b)
	case 5:
		return n.oneWayFault(f)
	default:
		return n.flapFault(f, stall)
	}
	f.inject = func() error {
		for _, l := range links {
			if stall {
				l.Stall()
			} else {
				l.Cut()
			}
		}
		return nil
	}
	f.heal = n.healer(links)
	return f
}

// routesOf returns the route links of server i.
func (n *nemesis) routesOf(i int) []link { return routeLinks(n.s, i) }

// routeLinks returns the route links of server i of s.
func routeLinks(s *system, i int) []link {
	var out []link
	for j := range s.servers {
		if j != i {
			out = append(out, s.cluster.Route(i, j))
		}
	}
	return out
}

// flapLinks stalls (or cuts) links for a second and heals them for a
// second, from now until stop is closed; it closes done when it returns,
// leaving the links as they were at that moment.
func flapLinks(links []link, stall bool, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for broken := false; ; broken = !broken {
		for _, l := range links {
			switch {
			case broken:
				l.Heal()
			case stall:
				l.Stall()
			default:
				l.Cut()
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// healer heals links, then waits until the stream has a leader.
func (n *nemesis) healer(links []link) func() error {
	return func() error {
		for _, l := range links {
			l.Heal()
		}
		return n.awaitStream()
	}
}

// oneWayFault holds one direction only: what a server sends to its peers
// (it still hears them), or what a worker sends to (or receives from)
// every server.
func (n *nemesis) oneWayFault(f *fault) *fault {
	var heal []link
	if n.rng.IntN(2) == 0 {
		i := n.rng.IntN(len(n.s.servers))
		f.what = fmt.Sprintf("hold what s%d sends on its routes (it still hears the others)", i)
		f.inject = func() error {
			for j := range n.s.servers {
				if j != i {
					n.s.cluster.Route(i, j).Block(i)
				}
			}
			return nil
		}
		heal = n.routesOf(i)
	} else {
		w := n.rng.IntN(len(n.s.workers))
		d, what := netfault.Upstream, "what %s sends to the servers"
		if n.rng.IntN(2) == 0 {
			d, what = netfault.Downstream, "what the servers send to %s"
		}
		f.what = "hold " + fmt.Sprintf(what, n.s.workers[w].name)
		f.inject = func() error {
			for _, p := range n.s.links[w] {
				p.Block(d)
			}
			return nil
		}
		for _, p := range n.s.links[w] {
			heal = append(heal, p)
		}
	}
	f.heal = n.healer(heal)
	return f
}

// flapFault isolates the stream leader's routes and heals them every
// second, for n.flap.
func (n *nemesis) flapFault(f *fault, stall bool) *fault {
	i := streamLeader(n.js)
	if i < 0 {
		i = n.rng.IntN(len(n.s.servers))
	}
	links := n.routesOf(i)
	mode := "cut"
	if stall {
		mode = "stall"
	}
	f.what = fmt.Sprintf("flap the routes of s%d (%s 1 s, heal 1 s) for %v", i, mode, n.flap)
	f.hold = n.flap
	stop, done := make(chan struct{}), make(chan struct{})
	f.inject = func() error {
		go flapLinks(links, stall, stop, done)
		return nil
	}
	healLinks := n.healer(links)
	f.heal = func() error {
		close(stop)
		<-done
		return healLinks()
	}
	return f
}

// leaseHolder returns the index of the worker that holds the publisher
// lease (its id, in the bucket's lease key, ends with its pid and a
// random suffix), or -1.
func (n *nemesis) leaseHolder() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, bucket)
	if err != nil {
		return -1
	}
	e, err := kv.Get(ctx, fsstate.PublisherKey)
	if err != nil {
		return -1
	}
	parts := strings.Split(string(e.Value()), "-")
	if len(parts) < 3 {
		return -1
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		return -1
	}
	for i, w := range n.s.workers {
		if w.Pid() == pid {
			return i
		}
	}
	return -1
}
