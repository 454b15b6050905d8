package proctest

import "github.com/flowstate-io/flowstate/internal/netfault"

// Link is the route between two servers A < B of a proxied cluster: each
// server opens its route connections to the other through a proxy of its
// own, so a link is two proxies, broken and healed together.
type Link struct {
	A, B int
	ab   *netfault.Proxy // the connections A opens to B
	ba   *netfault.Proxy // the connections B opens to A
}

// Stall stops every byte both ways, sockets open.
func (l *Link) Stall() { l.ab.Stall(); l.ba.Stall() }

// Cut resets the route's connections, and new ones, until Heal.
func (l *Link) Cut() { l.ab.Cut(); l.ba.Cut() }

// Block holds the bytes that server from (A or B) sends over the link;
// the other way keeps flowing.
func (l *Link) Block(from int) {
	if from == l.A {
		l.ab.Block(netfault.Upstream)
		l.ba.Block(netfault.Downstream)
		return
	}
	l.ab.Block(netfault.Downstream)
	l.ba.Block(netfault.Upstream)
}

// Heal undoes Stall, Cut and Block.
func (l *Link) Heal() { l.ab.Heal(); l.ba.Heal() }

// Faulty reports whether a fault is in force on either proxy.
func (l *Link) Faulty() bool { return l.ab.Faulty() || l.ba.Faulty() }
