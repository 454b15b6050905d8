package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/flowstate-io/flowstate/flowstate"
)

// statsJSON is the stats view's JSON (PROTOCOL.md v3), as worker get
// --stats reads it.
type statsJSON struct {
	StateSize     map[string]uint64 `json:"state_size"`
	LastExecTime  map[string]int64  `json:"last_exec_time_map"`
	StartTime     map[string]int64  `json:"start_time_map"`
	ProcessedRows map[string]uint64 `json:"processed_rows"`
	LastErrors    map[string][]struct {
		Time    int64  `json:"time"`
		NodeID  uint64 `json:"node_id"`
		Message string `json:"message"`
	} `json:"last_errors"`
}

// maxErrorColumn is how much of a flow's newest error a line shows.
const maxErrorColumn = 60

// printStats writes the stats view body as a table, one line per flow, and
// a line with its version.
func printStats(w io.Writer, body []byte, v flowstate.Version) error {
	var s statsJSON
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("the stats view does not decode: %w", err)
	}
	ids := map[uint64]bool{}
	for _, m := range []map[string]bool{keys(s.StateSize), keys(s.LastExecTime), keys(s.StartTime), keys(s.ProcessedRows), keys(s.LastErrors)} {
		for k := range m {
			if id, err := strconv.ParseUint(k, 10, 32); err == nil {
				ids[id] = true
			}
		}
	}
	sorted := make([]uint64, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	slices.Sort(sorted)
	if _, err := fmt.Fprintf(w, "%-10s %10s %-24s %-24s %12s %14s %6s  %s\n", "FLOW", "STATE", "LAST EXECUTION", "START", "UPTIME", "ROWS", "ERRORS", "NEWEST ERROR"); err != nil {
		return err
	}
	for _, id := range sorted {
		k := strconv.FormatUint(id, 10)
		size, hasSize := s.StateSize[k]
		last, hasLast := s.LastExecTime[k]
		start, hasStart := s.StartTime[k]
		uptime := "-"
		if hasLast && hasStart {
			uptime = humanDuration(time.Duration(last-start) * time.Millisecond)
		}
		sizeText := "-"
		if hasSize {
			sizeText = humanSize(size)
		}
		rows := "-"
		if n, ok := s.ProcessedRows[k]; ok {
			rows = strconv.FormatUint(n, 10)
		}
		errs := s.LastErrors[k]
		newest := "-"
		if len(errs) > 0 {
			newest = fmt.Sprintf("%s node %d: %s", msTime(errs[0].Time, true), errs[0].NodeID, printable(errs[0].Message, maxErrorColumn))
		}
		if _, err := fmt.Fprintf(w, "%-10d %10s %-24s %-24s %12s %14s %6d  %s\n", id, sizeText, msTime(last, hasLast), msTime(start, hasStart),
			uptime, rows, len(errs), newest); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "epoch %s, revision %d, %d flows\n", v.Epoch, v.Revision, len(sorted))
	return err
}

func keys[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
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
