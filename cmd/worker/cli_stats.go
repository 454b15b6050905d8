package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/flowstate-io/flowstate/flowstate"
)

// maxErrorColumn is how much of a flow's newest error a line shows.
const maxErrorColumn = 60

// printStats writes the stats view as a table, one line per flow, and a
// line with its version.
func printStats(w io.Writer, view flowstate.StatsView, v flowstate.Version) error {
	if _, err := fmt.Fprintf(w, "%-10s %10s %-24s %-24s %12s %14s %6s  %s\n", "FLOW", "STATE", "LAST EXECUTION", "START", "UPTIME", "ROWS", "ERRORS", "NEWEST ERROR"); err != nil {
		return err
	}
	flows, stats := view.Flows, view.Stats
	n := 0
	for len(flows) > 0 || len(stats) > 0 {
		// The next flow id of either list, and its entries (both sorted).
		var f flowstate.Flow
		var h flowstate.FlowStats
		switch {
		case len(stats) == 0 || len(flows) > 0 && flows[0].ID < stats[0].ID:
			f, flows = flows[0], flows[1:]
			h.ID = f.ID
		case len(flows) == 0 || stats[0].ID < flows[0].ID:
			h, stats = stats[0], stats[1:]
			f.ID = h.ID
		default:
			f, h, flows, stats = flows[0], stats[0], flows[1:], stats[1:]
		}
		n++
		if err := printFlowStats(w, f, h); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "epoch %s, revision %d, %d flows\n", outside(v.Epoch), v.Revision, n)
	return err
}

// printFlowStats writes the line of one flow: its entry f in GreptimeDB's
// value and its health h (either may have no field).
func printFlowStats(w io.Writer, f flowstate.Flow, h flowstate.FlowStats) error {
	hasLast, hasStart := f.Has&flowstate.HasLastExecTime != 0, f.Has&flowstate.HasStartTime != 0
	uptime := "-"
	if hasLast && hasStart {
		uptime = humanDuration(time.Duration(f.LastExecTime-f.StartTime) * time.Millisecond)
	}
	sizeText := "-"
	if f.Has&flowstate.HasStateSize != 0 {
		sizeText = humanSize(f.StateSize)
	}
	rows := "-"
	if h.Has&flowstate.HasProcessedRows != 0 {
		rows = strconv.FormatUint(h.ProcessedRows, 10)
	}
	newest := "-"
	if errs := h.LastErrors; len(errs) > 0 {
		newest = fmt.Sprintf("%s node %d: %s", msTime(errs[0].Time, true), errs[0].NodeID, printable(errs[0].Message, maxErrorColumn))
	}
	_, err := fmt.Fprintf(w, "%-10d %10s %-24s %-24s %12s %14s %6d  %s\n", f.ID, sizeText, msTime(f.LastExecTime, hasLast), msTime(f.StartTime, hasStart),
		uptime, rows, len(h.LastErrors), newest)
	return err
}

// printable returns s for a terminal line: control and other non-graphic
// characters escaped, cut to max runes with "…".
func printable(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max {
			b.WriteString("…")
			break
		}
		if unicode.IsGraphic(r) {
			b.WriteRune(r)
		} else {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		n++
	}
	return b.String()
}
