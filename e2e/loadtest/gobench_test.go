package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadGoBenchKeepsResultLinesAndPrintsThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.txt")
	require.NoError(t, os.WriteFile(path, []byte(`goos: linux
BenchmarkDecodeReport/flows=10-2   	 3912123	       304.1 ns/op	       0 B/op	       0 allocs/op
BenchmarkAppendJSON/flows=10-2     	 1000000	      1037 ns/op	 521.57 MB/s	       0 B/op	       0 allocs/op
BenchmarkNoMem-2   	 100	      7 ns/op
PASS
ok  	flowstate/codec	1.2s
`), 0o644))
	benches, err := readGoBench(path)
	require.NoError(t, err)
	assert.Equal(t, []goBench{
		{name: "DecodeReport/flows=10-2", nsPerOp: "304.1", bytesOp: "0", allocsOp: "0"},
		{name: "AppendJSON/flows=10-2", nsPerOp: "1037", bytesOp: "0", allocsOp: "0"},
		{name: "NoMem-2", nsPerOp: "7", bytesOp: "-", allocsOp: "-"},
	}, benches)
	var out bytes.Buffer
	printGoBench(&out, benches)
	assert.Contains(t, out.String(), "DecodeReport/flows=10-2")
	assert.Contains(t, out.String(), "allocs/op")
}
