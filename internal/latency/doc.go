// Package latency is the project's one latency recorder, used by the load
// generator (internal/loadgen), `worker bench` and the load test: a
// Recorder counts durations in an HDR histogram
// (github.com/HdrHistogram/hdrhistogram-go) with three significant digits,
// from 1 µs to an hour, and keeps the exact maximum.
//
// A Recorder is safe for concurrent use (one mutex guards it); goroutines
// that record at a high rate may instead each own a Recorder and Merge them
// at the end. Quantiles are within 0.1% of the recorded value (values
// below 1 µs count as 1 µs, above an hour as an hour) and never exceed the
// maximum. BenchmarkRecord compares it with the lock-free atomic-bucket
// histogram it replaced (kept in baseline_test.go), in the same run.
package latency
