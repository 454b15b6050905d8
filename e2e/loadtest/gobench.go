package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// goBench is one result line of `go test -bench -benchmem`.
type goBench struct {
	name                       string
	nsPerOp, bytesOp, allocsOp string
}

// readGoBench reads the result lines of `go test -bench` output in path.
func readGoBench(path string) ([]goBench, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []goBench
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		b := goBench{name: strings.TrimPrefix(fields[0], "Benchmark"), bytesOp: "-", allocsOp: "-"}
		// name, iterations, then value-unit pairs.
		for i := 2; i+1 < len(fields); i += 2 {
			switch fields[i+1] {
			case "ns/op":
				b.nsPerOp = fields[i]
			case "B/op":
				b.bytesOp = fields[i]
			case "allocs/op":
				b.allocsOp = fields[i]
			}
		}
		if b.nsPerOp != "" {
			out = append(out, b)
		}
	}
	return out, sc.Err()
}

// printGoBench prints the Go benchmarks as the first part of the summary.
func printGoBench(w io.Writer, benches []goBench) {
	if len(benches) == 0 {
		return
	}
	fmt.Fprintln(w, "\nGo benchmarks (go test -bench, one run each; decode, encode, merge and get on this machine)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tns/op\tB/op\tallocs/op\t")
	for _, b := range benches {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", b.name, b.nsPerOp, b.bytesOp, b.allocsOp)
	}
	tw.Flush()
}
