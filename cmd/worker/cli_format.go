package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
)

// humanSize writes a byte count in binary units: "512 B", "1.5 KiB".
func humanSize(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	units := [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, i := float64(n)/1024, 0
	for i < len(units)-1 && v >= 1024-0.05 { // so that 1023.97 KiB shows as 1.0 MiB
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}

// msTime writes a unix-ms time as RFC 3339 in UTC, or "-" when absent.
func msTime(ms int64, ok bool) string {
	if !ok {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// totalSize sums the state sizes of v.
func totalSize(v flowstate.FlowStateValue) uint64 {
	var sum uint64
	for _, n := range v.StateSize {
		sum += n
	}
	return sum
}

// writeTable writes v as a table, one flow a line by ascending id.
func writeTable(w io.Writer, v flowstate.FlowStateValue) error {
	flows := v.Flows()
	if len(flows) == 0 {
		_, err := fmt.Fprintln(w, "no flows")
		return err
	}
	return writeFlows(w, flows)
}

// writeChanges writes the flows that changed, indented, one a line by
// ascending id; a flow that left shows "left".
func writeChanges(w io.Writer, flows []flowstate.Flow) error {
	if len(flows) == 0 {
		_, err := fmt.Fprintln(w, "  no flow changed")
		return err
	}
	return writeFlows(w, flows)
}

// writeFlows writes flows, sorted by id, as a table under a header; a flow
// with no field present shows "left".
func writeFlows(w io.Writer, flows []flowstate.Flow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FLOW\tSTATE SIZE\tLAST EXECUTION\tSTART\tUPTIME")
	for _, f := range flows {
		if f.Has == 0 {
			fmt.Fprintf(tw, "%d\tleft\t\t\t\n", f.ID)
			continue
		}
		size := "-"
		if f.Has&flowstate.HasStateSize != 0 {
			size = humanSize(f.StateSize)
		}
		hasLast, hasStart := f.Has&flowstate.HasLastExecTime != 0, f.Has&flowstate.HasStartTime != 0
		uptime := "-"
		if hasLast && hasStart {
			uptime = humanDuration(time.Duration(f.LastExecTime-f.StartTime) * time.Millisecond)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", f.ID, size, msTime(f.LastExecTime, hasLast), msTime(f.StartTime, hasStart), uptime)
	}
	return tw.Flush()
}

// humanDuration writes d as Go does, in whole seconds from a minute on, and
// with days from a day on: "1.5s", "1m0s", "3d4h0m0s".
func humanDuration(d time.Duration) string {
	if d < 0 {
		return "-" + humanDuration(-d)
	}
	if d < time.Minute {
		return d.String()
	}
	d = d.Round(time.Second)
	const day = 24 * time.Hour
	if d < day {
		return d.String()
	}
	days, rest := d/day, d%day
	if rest == 0 {
		return strconv.FormatInt(int64(days), 10) + "d"
	}
	return strconv.FormatInt(int64(days), 10) + "d" + rest.String()
}
