package loadgen

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/protocol"
)

// Mode is how reports are sent.
type Mode int

const (
	// Acked sends each report as a request and waits for its
	// acknowledgement, with Config.InFlight requests in flight at most.
	Acked Mode = iota
	// Publish sends reports fire and forget, from one goroutine.
	Publish
)

func (m Mode) String() string {
	if m == Publish {
		return "publish"
	}
	return "acked"
}

// Defaults of Config.
const (
	DefaultInFlight = 256
	DefaultTimeout  = client.DefaultTimeout // a request's bound, as the client's
)

// Config describes a load. The zero values of Prefix, InFlight and Timeout
// take the defaults.
type Config struct {
	// Prefix is the worker's subject prefix; "" means protocol.DefaultPrefix.
	Prefix string
	// Mode is Acked (the zero value) or Publish.
	Mode Mode
	// Nodes is the number of simulated flownodes, with node ids FirstNode
	// to FirstNode+Nodes-1.
	Nodes     int
	FirstNode int
	// Flows is the number of flows per node; 0 sends empty reports.
	Flows int
	// Health adds protocol v3's health to every report: per flow the rows
	// processed and one error of HealthErrorBytes bytes (no seq, so that a
	// load can send a node's reports in any order).
	Health bool
	// Rate is the total number of reports per second, spread over the
	// nodes; 0 sends as fast as the mode allows. Reports follow a fixed
	// schedule: a load that fell behind it catches up as fast as it can.
	Rate float64
	// Duration bounds how long Run sends; 0 means no bound but Reports.
	Duration time.Duration
	// Reports bounds how many reports Run sends; 0 means no bound but
	// Duration. One of the two must be set.
	Reports uint64
	// InFlight is the most requests in flight in Acked mode (and one per
	// node, so never more than Nodes); 0 means DefaultInFlight.
	InFlight int
	// Timeout bounds each request, within the context's deadline; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Progress, if set, is called about once a second while Run runs and
	// once at its end, from a goroutine of Run's.
	Progress func(Progress)
}

// ErrConfig is wrapped by the errors of an invalid Config.
var ErrConfig = errors.New("loadgen: invalid config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	var err error
	switch {
	case c.Nodes <= 0:
		err = fmt.Errorf("nodes %d must be positive", c.Nodes)
	case c.FirstNode < 0:
		err = fmt.Errorf("first node %d is negative", c.FirstNode)
	case c.Flows < 0:
		err = fmt.Errorf("flows %d is negative", c.Flows)
	case (uint64(c.FirstNode)+uint64(c.Nodes))*uint64(c.Flows) > math.MaxUint32:
		err = fmt.Errorf("%d nodes x %d flows exceed the uint32 flow ids", c.FirstNode+c.Nodes, c.Flows)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		err = fmt.Errorf("rate %v must be a finite number, 0 or more", c.Rate)
	case c.Duration < 0:
		err = fmt.Errorf("duration %v is negative", c.Duration)
	case c.Duration == 0 && c.Reports == 0:
		err = errors.New("a duration or a number of reports is required")
	case c.InFlight < 0:
		err = fmt.Errorf("in flight %d is negative", c.InFlight)
	case c.Timeout < 0:
		err = fmt.Errorf("timeout %v is negative", c.Timeout)
	case c.Mode != Acked && c.Mode != Publish:
		err = fmt.Errorf("mode %d is unknown", c.Mode)
	}
	if err == nil {
		err = protocol.ValidatePrefix(c.Prefix)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// withDefaults returns c with the defaults filled in.
func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, protocol.DefaultPrefix)
	c.InFlight = cmp.Or(c.InFlight, DefaultInFlight)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	return c
}

// Progress is how far a Run has got.
type Progress struct {
	Elapsed time.Duration
	Sent    uint64 // reports sent
	Acked   uint64 // reports acknowledged (Acked mode)
	Failed  uint64 // reports rejected, timed out or not sent
	// Rate is the reports acknowledged (Publish mode: sent) per second
	// since the previous call; on the last call, over the whole Run.
	Rate float64
}
